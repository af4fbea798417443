"""The documentation site builds with every warning an error, its API reference included.

`mkdocs build --strict` (mkdocs.yml) fails on a link to a page that does not exist, a docstring
mkdocstrings cannot read, or a module the API reference names that is gone; these tests run
it and check that the reference documents the public API.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytest.importorskip("mkdocs", reason="needs the `docs` extra (mkdocs, mkdocstrings)")
pytest.importorskip("mkdocstrings_handlers.python", reason="needs the `docs` extra")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stderr[-4000:]}"
    return out


def test_the_site_builds_strict_with_the_readme_as_its_home_page(site):
    home = (site / "index.html").read_text()
    assert "pip install gemkit" in home and 'href="training/' in home
    assert (site / "api" / "index.html").is_file()


def test_fences_with_test_marks_render_as_plain_code_blocks(site):
    page = (site / "training" / "index.html").read_text()
    assert '<code class="language-bash">python -m openrlhf.cli.train_ppo_ray' in page
    assert "notest" not in page and "file=agent_func.py" not in page


def public_names() -> dict[str, str]:
    """Every name `import gemkit` offers, with the module that defines it (__init__.pyi)."""
    stub = ast.parse((ROOT / "gemkit" / "__init__.pyi").read_text())
    return {
        alias.asname or alias.name: node.module
        for node in stub.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }


def test_the_api_reference_documents_every_name_gemkit_exports(site):
    pages = "".join(p.read_text() for p in (site / "api").rglob("index.html"))
    missing = [  # defined in the module the stub names, or in one of its submodules
        f"{module}.{name}"
        for name, module in public_names().items()
        if not re.search(rf'id="{re.escape(module)}(\.\w+)*\.{name}"', pages)
    ]
    assert missing == [], "add their modules to a docs/api/ page"
