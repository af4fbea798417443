"""Tools: typed functions an agent can call, call parsing, and the wrapper that runs them.

The names listed in `__init__.pyi` are imported on first use, so `import gemkit.tools` stays
cheap. Built-in tools are also reachable by name (`"python"`, `"search"`, `"access"`) through
`resolve_tool`.
"""

from __future__ import annotations

import difflib
import importlib
from typing import Any

from gemkit._lazy import lazy_exports
from gemkit.tools.base import Tool as Tool
from gemkit.tools.base import ToolError as ToolError
from gemkit.tools.base import ToolResult as ToolResult

#: tool name -> "module:Class" built with no arguments; modules are imported on first use
TOOL_NAMES: dict[str, str] = {
    "python": "gemkit.tools.python:PythonTool",
    "search": "gemkit.tools.search:SearchTool",
    "access": "gemkit.tools.search:AccessTool",
}


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


__getattr__, __dir__, _names = lazy_exports(__name__, __file__)
__all__ = sorted({*_names, "TOOL_NAMES", "resolve_tool"})
