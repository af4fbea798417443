"""Lazy package exports, listed once: in the package's `__init__.pyi` stub.

A package whose public names would pull in heavy modules (gymnasium, pydantic, aiohttp)
lists them as re-exports in its stub, `from gemkit.core import Env as Env`, which type
checkers and editors read, and ends its `__init__.py` with

    __getattr__, __dir__, EXPORTS = lazy_exports(__name__, __file__)

so each name is imported from its module on first use. The stub is read with a regular
expression, not `ast`: `import gemkit` stays at a few milliseconds.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

_FROM = re.compile(r"^from[ \t]+([\w.]+)[ \t]+import[ \t]+(\([^)]*\)|[^\n]*)", re.M)


def stub_exports(stub: str) -> dict[str, tuple[str, str]]:
    """Bound name -> (module, name in it) of each `from MODULE import NAME [as ALIAS]`."""
    out: dict[str, tuple[str, str]] = {}
    for module, names in _FROM.findall(stub):
        if module == "__future__":
            continue
        for item in re.sub(r"#[^\n]*", "", names).strip("()").split(","):
            parts = item.split()
            if parts:  # `Env`, or `Env as Env`: bound to the last word, taken from the first
                out[parts[-1]] = (module, parts[0])
    return out


def lazy_exports(
    package: str, init_file: str
) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """`__getattr__`, `__dir__` and the sorted export names of `package`, from its stub."""
    stub = Path(init_file).with_suffix(".pyi")
    exports = stub_exports(stub.read_text(encoding="utf-8"))
    names = sorted(exports)
    namespace = importlib.import_module(package).__dict__

    def __getattr__(name: str) -> Any:
        where = exports.get(name)
        if where is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(where[0]), where[1])
        namespace[name] = value  # later lookups skip this function
        return value

    def __dir__() -> list[str]:
        return sorted({*names, *(k for k in namespace if not k.startswith("_"))})

    return __getattr__, __dir__, names
