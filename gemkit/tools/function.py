"""Function tools: `@tool` turns a typed Python function (sync or async) into a `Tool`.

The argument model comes from the signature (pydantic `create_model`: defaults, `Optional`,
`Literal`, lists, nested models, `Annotated[..., Field(...)]`), the description from the
docstring's summary, and per-argument descriptions from a Google (`Args:`), NumPy
(`Parameters` + dashes) or Sphinx (`:param x:`) section.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import json
import logging
import os
import re
import typing
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Any, overload

from pydantic import BaseModel, ConfigDict, Field, create_model
from pydantic_core import to_jsonable_python

from gemkit.tools.base import Tool, ToolError, ToolResult

log = logging.getLogger(__name__)

#: the names OpenAI accepts for a function
NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")

_ARGS_HEADERS = {
    "args",
    "arguments",
    "parameters",
    "params",
    "keyword args",
    "keyword arguments",
    "other parameters",
}
_GOOGLE_ITEM_RE = re.compile(r"^\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_NUMPY_ITEM_RE = re.compile(r"^\*{0,2}(\w+)\s*(?::.*)?$")
_SPHINX_RE = re.compile(r"^:param\s+(?:[^:]*\s)?\*{0,2}(\w+)\s*:\s*(.*)$")
_SECTION_RE = re.compile(r"^[A-Z][A-Za-z ]*:$")

_executor: ThreadPoolExecutor | None = None


def _thread_pool() -> ThreadPoolExecutor:
    # A pool of our own, not the loop's default executor: `asyncio.run` waits for the default
    # executor at shutdown, so a timed-out sync tool would otherwise hang the sync `step`.
    global _executor
    if _executor is None:
        _executor = ThreadPoolExecutor(
            max_workers=min(32, (os.cpu_count() or 1) + 4), thread_name_prefix="gemkit-tool"
        )
    return _executor


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """Split a docstring into its summary (first paragraph) and per-argument descriptions."""
    if not doc or not doc.strip():
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    summary: list[str] = []
    for i, line in enumerate(lines):
        stripped = line.strip()
        if not stripped or _is_header(lines, i):
            break
        summary.append(stripped)
    params: dict[str, str] = {}
    params.update(_sphinx_params(lines))
    params.update(_numpy_params(lines))
    params.update(_google_params(lines))
    return " ".join(summary), params


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _is_header(lines: list[str], i: int) -> bool:
    stripped = lines[i].strip()
    if stripped.endswith(":") and stripped[:-1].strip().lower() in _ARGS_HEADERS:
        return True
    nxt = lines[i + 1].strip() if i + 1 < len(lines) else ""
    return bool(stripped) and len(nxt) >= 3 and set(nxt) == {"-"}


def _google_params(lines: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    i = 0
    while i < len(lines):
        stripped = lines[i].strip()
        if not (stripped.endswith(":") and stripped[:-1].strip().lower() in _ARGS_HEADERS):
            i += 1
            continue
        base = _indent(lines[i])
        item_indent: int | None = None
        current: str | None = None
        i += 1
        while i < len(lines):
            line = lines[i]
            if not line.strip():
                i += 1
                continue
            ind = _indent(line)
            if ind <= base:
                break
            if item_indent is None:
                item_indent = ind
            m = _GOOGLE_ITEM_RE.match(line.strip()) if ind == item_indent else None
            if m:
                current = m.group(1)
                out[current] = m.group(2).strip()
            elif current is not None and ind > item_indent:
                out[current] = f"{out[current]} {line.strip()}".strip()
            i += 1
    return out


def _numpy_params(lines: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    i = 0
    while i + 1 < len(lines):
        header = lines[i].strip().lower()
        underline = lines[i + 1].strip()
        if header not in _ARGS_HEADERS or len(underline) < 3 or set(underline) != {"-"}:
            i += 1
            continue
        base = _indent(lines[i])
        current: str | None = None
        i += 2
        while i < len(lines):
            line = lines[i]
            if not line.strip():
                i += 1
                continue
            ind = _indent(line)
            if ind <= base and _is_header(lines, i):
                break
            if ind <= base:
                m = _NUMPY_ITEM_RE.match(line.strip())
                if not m:
                    break
                current = m.group(1)
                out[current] = ""
            elif current is not None:
                out[current] = f"{out[current]} {line.strip()}".strip()
            i += 1
    return out


def _sphinx_params(lines: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in lines:
        m = _SPHINX_RE.match(line.strip())
        if m:
            out[m.group(1)] = m.group(2).strip()
    return out


def _field_name(param: str, taken: set[str]) -> str:
    # pydantic refuses leading underscores and warns on names that shadow BaseModel members;
    # such parameters get a safe field name and keep their own name as the alias.
    if param.isidentifier() and not param.startswith("_") and not hasattr(BaseModel, param):
        return param
    base = "arg_" + param.lstrip("_")
    name = base
    while name in taken or hasattr(BaseModel, name):
        name += "_"
    return name


def build_args_model(fn: Callable[..., Any], name: str, docs: dict[str, str]) -> type[BaseModel]:
    """The pydantic argument model of `fn`'s signature (extra arguments forbidden)."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError) as e:
        raise ToolError(f"cannot read the signature of {fn!r}: {e}") from e
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception as e:
        raise ToolError(
            f"cannot resolve the type hints of {name}: {e}. Define the types it names at "
            "module level (or import them) so `typing.get_type_hints` can see them."
        ) from e
    fields: dict[str, Any] = {}
    for param in sig.parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ToolError(
                f"tool {name}: *args/**kwargs ({param}) have no JSON schema; "
                "list each argument with a type instead"
            )
        annotation = hints.get(param.name, Any)
        description = docs.get(param.name)
        field_name = _field_name(param.name, set(fields))
        alias = None if field_name == param.name else param.name
        extra: dict[str, Any] = {"description": description or None}
        if alias:
            extra.update(alias=alias, title=alias.replace("_", " ").strip().title() or alias)
        # the parameter's own Field(...) default, if any, is merged over the docstring's text
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[field_name] = (Annotated[annotation, Field(**extra)], default)
    try:
        return create_model(
            f"{name}_args",
            __config__=ConfigDict(extra="forbid", arbitrary_types_allowed=False),
            **fields,
        )
    except Exception as e:
        raise ToolError(
            f"tool {name}: cannot build an argument model from its signature: {e}"
        ) from e


def result_to_text(value: Any) -> ToolResult:
    """A function's return value as a `ToolResult`: str as is, anything else as JSON text."""
    if isinstance(value, ToolResult):
        return value
    if isinstance(value, str):
        return ToolResult(value)
    try:
        data = to_jsonable_python(value, fallback=repr)
        return ToolResult(json.dumps(data, ensure_ascii=False))
    except Exception:  # a value pydantic cannot walk (cycles): its repr still informs the model
        return ToolResult(repr(value))


class FunctionTool(Tool):
    """A `Tool` around a plain function; calling the object calls the function unchanged."""

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        parallel_safe: bool = True,
        thread: bool = True,
    ):
        if not callable(fn):
            raise ToolError(f"@tool needs a function, got {type(fn).__name__}")
        tool_name = name or getattr(fn, "__name__", "")
        if not isinstance(tool_name, str) or not NAME_RE.match(tool_name):
            raise ToolError(
                f"tool name {tool_name!r} is not valid: use 1-64 letters, digits, '_' or '-' "
                "(pass name=... to @tool)"
            )
        summary, docs = parse_docstring(inspect.getdoc(fn))
        self.fn = fn
        self.name = tool_name  # type: ignore[misc]
        self.description = summary if description is None else description  # type: ignore[misc]
        self.parallel_safe = parallel_safe  # type: ignore[misc]
        self.thread = thread
        self.Args = build_args_model(fn, tool_name, docs)  # type: ignore[misc]
        self._is_async = inspect.iscoroutinefunction(fn)
        sig = inspect.signature(fn)
        self._positional = [p.name for p in sig.parameters.values() if p.kind is p.POSITIONAL_ONLY]
        self._params = {
            fname: (info.alias or fname) for fname, info in self.Args.model_fields.items()
        }
        functools.update_wrapper(self, fn)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the wrapped function directly (no validation, no error capture)."""
        return self.fn(*args, **kwargs)

    async def call(self, args: BaseModel) -> ToolResult:
        """Run the function; exceptions become an error result naming the exception."""
        values = {param: getattr(args, fname) for fname, param in self._params.items()}
        positional = [values.pop(p) for p in self._positional]
        try:
            if self._is_async:
                value = await self.fn(*positional, **values)
            elif self.thread:
                ctx = contextvars.copy_context()
                call = functools.partial(ctx.run, self.fn, *positional, **values)
                value = await asyncio.get_running_loop().run_in_executor(_thread_pool(), call)
            else:
                value = self.fn(*positional, **values)
            if inspect.isawaitable(value):
                value = await value
        except Exception as e:
            log.debug("tool %s raised", self.name, exc_info=True)
            message = str(e) or "(no message)"
            return ToolResult(
                f"Error: {self.name} raised {type(e).__name__}: {message}",
                is_error=True,
                metadata={"exception": type(e).__name__},
            )
        return result_to_text(value)

    def __repr__(self) -> str:
        return f"<FunctionTool {self.name!r}>"


@overload
def tool(
    fn: Callable[..., Any],
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    parallel_safe: bool = True,
    thread: bool = True,
) -> FunctionTool: ...


@overload
def tool(
    fn: None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    parallel_safe: bool = True,
    thread: bool = True,
) -> Callable[[Callable[..., Any]], FunctionTool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    parallel_safe: bool = True,
    thread: bool = True,
) -> FunctionTool | Callable[[Callable[..., Any]], FunctionTool]:
    """Turn a typed function into a `Tool`: `@tool`, `@tool(name=...)` or `tool(fn)`.

    Sync functions run in a worker thread (`thread=True`) so they neither block the event
    loop nor escape the wrapper's timeout; a timed-out sync call keeps its thread until it
    returns, since Python cannot stop a thread. `parallel_safe=False` keeps the calls of
    this tool in one action sequential.
    """

    def wrap(f: Callable[..., Any]) -> FunctionTool:
        return FunctionTool(
            f, name=name, description=description, parallel_safe=parallel_safe, thread=thread
        )

    return wrap if fn is None else wrap(fn)
