"""Run a solution with nothing but the tools: a tools-only facade and a restricted interpreter.

A solution may call tools and compute; it may not reach the database, the file system or any
other module. Two layers enforce it:

1. a static check of the source: no `import`, no names or attributes that start with `_`
   (which closes `__class__`, `__globals__`, `__closure__`, `__subclasses__`, ...), no
   `str.format`/`format_map` (which walk attributes from inside a string), no `global`;
2. a curated `__builtins__` without `open`, `__import__`, `eval`, `exec`, `compile`,
   `getattr`, `globals`, `vars`, `type`, `breakpoint`, `input`, ...

The facade the solution receives holds its tools in a closure-free, slot-less object whose
only public attributes are the tool functions; each returns plain data (dicts, lists, str).
This module imports only the standard library, so the sandbox harness can ship it as a file.
"""

from __future__ import annotations

import ast
import builtins
from collections.abc import Callable, Mapping
from typing import Any

#: builtins a solution may use (pure computation, no I/O, no introspection)
SAFE_BUILTINS = (
    "abs all any bool dict divmod enumerate filter float frozenset int isinstance len list map "
    "max min next range repr reversed round set sorted str sum tuple zip ValueError KeyError "
    "IndexError TypeError Exception StopIteration ArithmeticError ZeroDivisionError True False "
    "None print"
).split()

#: attribute names refused even without a leading underscore
BANNED_ATTRIBUTES = {
    "format",
    "format_map",
    "mro",
    "gi_frame",
    "gi_code",
    "cr_frame",
    "cr_code",
    "ag_frame",
    "ag_code",
    "f_builtins",
    "f_code",
    "f_globals",
    "f_locals",
    "f_back",
    "tb_frame",
}
BANNED_NAMES = {"open", "eval", "exec", "compile", "getattr", "setattr", "delattr", "globals"}
BANNED_NAMES |= {"locals", "vars", "dir", "type", "breakpoint", "input", "help", "memoryview"}
BANNED_NAMES |= {"object", "super", "classmethod", "staticmethod", "property", "id", "hasattr"}


class SolutionViolation(Exception):
    """A solution tried to reach something other than its tools (the message says what)."""


class ToolBudgetExceeded(SolutionViolation):
    """A solution made more tool calls than it is allowed."""


def check_source(source: str, *, filename: str = "<solution>") -> None:
    """Raise `SolutionViolation` naming the first forbidden construct in `source`."""
    try:
        tree = ast.parse(source, filename=filename)
    except SyntaxError as e:
        raise SolutionViolation(f"{filename}: syntax error at line {e.lineno}: {e.msg}") from e
    for node in ast.walk(tree):
        where = f"{filename} line {getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Import | ast.ImportFrom):
            if isinstance(node, ast.ImportFrom) and node.module == "__future__":
                continue
            raise SolutionViolation(f"{where}: imports are not allowed; use only the tools")
        if isinstance(node, ast.Global | ast.Nonlocal):
            raise SolutionViolation(f"{where}: 'global'/'nonlocal' is not allowed")
        if isinstance(node, ast.Attribute):
            if node.attr.startswith("_") or node.attr in BANNED_ATTRIBUTES:
                raise SolutionViolation(f"{where}: attribute {node.attr!r} is not allowed")
        if isinstance(node, ast.Name):
            if node.id.startswith("_") or node.id in BANNED_NAMES:
                raise SolutionViolation(f"{where}: name {node.id!r} is not allowed")
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            if node.name.startswith("_"):
                raise SolutionViolation(f"{where}: names starting with '_' are not allowed")
        if isinstance(node, ast.arg) and node.arg.startswith("_"):
            raise SolutionViolation(f"{where}: names starting with '_' are not allowed")


def safe_builtins() -> dict[str, Any]:
    """The builtins a solution sees: `SAFE_BUILTINS` only (no `__import__`, no `open`)."""
    table = {name: getattr(builtins, name) for name in SAFE_BUILTINS if hasattr(builtins, name)}
    table["print"] = _no_print
    return table


def _no_print(*args: Any, **kwargs: Any) -> None:
    """Solutions may keep their `print` calls; output is dropped."""


class ToolFacade:
    """The only object a solution gets: one method per tool, returning plain data.

    The tools are kept in a dict owned by a hidden function's default argument, not as an
    attribute; the restricted interpreter refuses every `_` name, so the solution can neither
    list nor walk to them.
    """

    def __init__(
        self, tools: Mapping[str, Callable[..., Any]], *, max_calls: int | None = None
    ) -> None:
        counter = {"calls": 0}
        for name, fn in tools.items():
            if not name.isidentifier() or name.startswith("_"):
                raise ValueError(f"tool name {name!r} cannot be a facade method")
            self.__dict__[name] = _bind(name, fn, counter, max_calls)
        self.__dict__["tool_names"] = tuple(tools)
        self.__dict__["calls"] = _Counter(counter)

    def __setattr__(self, name: str, value: Any) -> None:
        raise SolutionViolation("the tools facade is read-only")


class _Counter:
    __slots__ = ("_c",)

    def __init__(self, counter: dict[str, int]):
        self._c = counter

    def __call__(self) -> int:
        return self._c["calls"]


def _bind(
    name: str, fn: Callable[..., Any], counter: dict[str, int], max_calls: int | None
) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        counter["calls"] += 1
        if max_calls is not None and counter["calls"] > max_calls:
            raise ToolBudgetExceeded(f"more than {max_calls} tool calls")
        return fn(*args, **kwargs)

    call.__name__ = name
    return call


_CHECKED: dict[tuple[str, str], Any] = {}


def _compiled(source: str, filename: str) -> Any:
    # checking and compiling cost more than running a small solution: do it once per source
    key = (filename, source)
    if key not in _CHECKED:
        check_source(source, filename=filename)
        try:
            _CHECKED[key] = compile(source, filename, "exec")
        except Exception as e:
            raise SolutionViolation(f"{filename}: cannot compile: {e}") from e
        if len(_CHECKED) > 256:
            _CHECKED.pop(next(iter(_CHECKED)))
    return _CHECKED[key]


def load_restricted(
    source: str, *, filename: str = "<solution>", preload: tuple[str, ...] = ()
) -> dict[str, Any]:
    """Check and execute `source` (after each `preload` source) in one restricted namespace."""
    namespace: dict[str, Any] = {"__builtins__": safe_builtins(), "__name__": "solution"}
    for i, extra in enumerate((*preload, source)):
        name = filename if i == len(preload) else f"{filename}[preload {i}]"
        code = _compiled(extra, name)
        try:
            exec(code, namespace)  # noqa: S102 - checked source, curated builtins
        except SolutionViolation:
            raise
        except Exception as e:
            raise SolutionViolation(f"{name}: failed to load: {type(e).__name__}: {e}") from e
    return namespace


def run_solution(
    source: str,
    facade: ToolFacade,
    task: Mapping[str, Any],
    *,
    entry: str = "solve",
    filename: str = "<solution>",
    preload: tuple[str, ...] = (),
) -> Any:
    """Run `entry(tools, task)` from `source` with only the facade; return its answer.

    Raises `SolutionViolation` when the source reaches beyond the tools; other exceptions
    from the solution propagate unchanged (the caller reports them).
    """
    namespace = load_restricted(source, filename=filename, preload=preload)
    fn = namespace.get(entry)
    if not callable(fn):
        raise SolutionViolation(f"{filename}: no function {entry!r}(tools, task) defined")
    try:
        return fn(facade, _plain_copy(task))
    except NameError as e:
        raise SolutionViolation(f"{filename}: {e} (only the tools and safe builtins exist)") from e


def _plain_copy(value: Any) -> Any:
    # the task reaches the solution as fresh plain containers: nothing shared with the caller
    if isinstance(value, Mapping):
        return {str(k): _plain_copy(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain_copy(v) for v in value]
    return value
