"""The package as pip builds it: no setuptools warnings, and a wheel with everything a user
needs (the license, `py.typed`, the lazy-export stubs, the data files), from one version."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, str]:
    """A wheel built from a copy of the source (the checkout's build/ stays as it is)."""
    src = tmp_path_factory.mktemp("src")
    for name in ("gemkit", "envs", "synth", "pyproject.toml", "setup.py", "README.md", "LICENSE"):
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(path, src / name)
    out = tmp_path_factory.mktemp("wheel")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation",
         "-w", str(out), "-v"],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    (wheel,) = out.glob("gemkit-*.whl")
    return wheel, done.stdout + done.stderr


def test_building_the_package_prints_no_setuptools_warning(built):
    _, log = built
    warnings = [
        line.strip()
        for line in log.splitlines()
        if "Warning" in line and "byte-compiling is disabled" not in line
    ]
    assert warnings == []


def test_the_wheel_holds_the_license_typing_marker_stubs_and_data(built):
    wheel, _ = built
    names = set(zipfile.ZipFile(wheel).namelist())
    version = wheel.name.split("-")[1]
    for name in (
        f"gemkit-{version}.dist-info/licenses/LICENSE",
        "gemkit/py.typed",
        "gemkit/__init__.pyi",
        "gemkit/envs/math/data/builtin.jsonl",
        "gemkit/view/data/viewer.css",
        "gemkit/view/data/viewer.js",
    ):
        assert name in names, name
    metadata = zipfile.ZipFile(wheel).read(f"gemkit-{version}.dist-info/METADATA").decode()
    assert "License-Expression: Apache-2.0" in metadata
    assert "Project-URL: Documentation" in metadata and "Typing :: Typed" in metadata
    import gemkit

    assert version == gemkit.__version__
