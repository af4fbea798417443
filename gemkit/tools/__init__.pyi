# The names of `gemkit.tools`, listed once: `__init__.py` imports the lazy ones on first use.
from typing import Any

from gemkit.tools.base import Tool as Tool
from gemkit.tools.base import ToolError as ToolError
from gemkit.tools.base import ToolResult as ToolResult
from gemkit.tools.calls import MalformedCall as MalformedCall
from gemkit.tools.calls import ParsedAction as ParsedAction
from gemkit.tools.calls import ToolCall as ToolCall
from gemkit.tools.calls import parse_action as parse_action
from gemkit.tools.function import FunctionTool as FunctionTool
from gemkit.tools.function import tool as tool
from gemkit.tools.wrapper import ToolEnvWrapper as ToolEnvWrapper
from gemkit.tools.wrapper import wrap_with_tools as wrap_with_tools

TOOL_NAMES: dict[str, str]

def resolve_tool(name: str, **kwargs: Any) -> Tool: ...
