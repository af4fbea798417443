"""Tools: typed functions an agent can call, call parsing, and the wrapper that runs them.

Names below are imported on first use, so `import gemkit.tools` stays cheap. Built-in tools
are also reachable by name (`"python"`, `"search"`, `"access"`) through `resolve_tool`.
"""

from __future__ import annotations

import difflib
import importlib
from typing import TYPE_CHECKING, Any

from gemkit.tools.base import Tool, ToolError, ToolResult

#: tool name -> "module:Class" built with no arguments; modules are imported on first use
TOOL_NAMES: dict[str, str] = {
    "python": "gemkit.tools.python:PythonTool",
    "search": "gemkit.tools.search:SearchTool",
    "access": "gemkit.tools.search:AccessTool",
}

_EXPORTS: dict[str, str] = {
    "FunctionTool": "gemkit.tools.function",
    "tool": "gemkit.tools.function",
    "ToolCall": "gemkit.tools.calls",
    "MalformedCall": "gemkit.tools.calls",
    "ParsedAction": "gemkit.tools.calls",
    "parse_action": "gemkit.tools.calls",
    "ToolEnvWrapper": "gemkit.tools.wrapper",
    "wrap_with_tools": "gemkit.tools.wrapper",
}

__all__ = [
    "TOOL_NAMES",
    "FunctionTool",
    "MalformedCall",
    "ParsedAction",
    "Tool",
    "ToolCall",
    "ToolEnvWrapper",
    "ToolError",
    "ToolResult",
    "parse_action",
    "resolve_tool",
    "tool",
    "wrap_with_tools",
]

if TYPE_CHECKING:  # pragma: no cover
    from gemkit.tools.calls import MalformedCall, ParsedAction, ToolCall, parse_action
    from gemkit.tools.function import FunctionTool, tool
    from gemkit.tools.wrapper import ToolEnvWrapper, wrap_with_tools


def resolve_tool(name: str, **kwargs: Any) -> Tool:
    """Build a built-in tool by name (see `TOOL_NAMES`); unknown names list the known ones."""
    target = TOOL_NAMES.get(name)
    if target is None:
        close = difflib.get_close_matches(name, list(TOOL_NAMES), n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ToolError(
            f"unknown tool name {name!r}; known names: {', '.join(sorted(TOOL_NAMES))}.{hint} "
            "Pass a Tool object or a typed function for anything else."
        )
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
        cls = getattr(module, attr)
    except (ImportError, AttributeError) as e:
        raise ToolError(
            f"tool {name!r} is not available in this install ({target} could not be loaded: "
            f"{e}). Install the extra it needs or pass a Tool object instead."
        ) from e
    return cls(**kwargs)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'gemkit.tools' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
