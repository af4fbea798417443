"""What may stand for a tool (an object, a class, a built-in name, a typed function), as a `Tool`."""

from __future__ import annotations

import copy
from typing import Any, cast

from gemkit.tools.base import Tool, ToolError
from gemkit.tools.function import tool


def as_tool(item: Any) -> Tool:
    """A `Tool` from a Tool object or class, a built-in tool name, or a typed function."""
    if isinstance(item, Tool):
        return item
    if all(hasattr(item, a) for a in ("name", "Args", "call", "openai_schema")) and not (
        isinstance(item, type)
    ):
        return cast(Tool, item)  # duck-typed tool from another library
    if isinstance(item, type) and issubclass(item, Tool):
        return item()
    if isinstance(item, str):
        from gemkit.tools import resolve_tool

        return resolve_tool(item)
    if callable(item):
        made: Tool = tool(item)
        return made
    raise ToolError(
        f"cannot use {item!r} as a tool: pass a Tool object, a typed function, or a built-in "
        "tool name such as 'python'"
    )


def clone_tool(t: Tool) -> Tool:
    """`t.clone()`, with a clear error for tools that hold live resources and cannot copy."""
    try:
        return t.clone() if hasattr(t, "clone") else copy.deepcopy(t)
    except Exception as e:
        raise ToolError(
            f"cannot clone tool {getattr(t, 'name', t)!r} ({type(e).__name__}: {e}); tools "
            "that hold processes, sessions or connections must implement clone() returning "
            "a fresh, unstarted copy"
        ) from e
