"""Shared setup for the training tests: the toy env family and the example scripts.

Modules that need torch skip themselves when the `train` extra (torch, transformers) is absent.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load_example(name: str) -> ModuleType:
    """Import `examples/<name>.py` as a module (the examples are scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(f"gemkit_example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while building the class
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def example():
    """`example("rebn")` imports `examples/rebn.py`."""
    return load_example
