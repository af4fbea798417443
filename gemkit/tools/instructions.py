"""The tool instructions a prompt gets: the schemas, how to write a call, and the call limit."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from gemkit.tools.base import Tool
from gemkit.tools.calls.describe import tag_field
from gemkit.tools.calls.model import DEFAULT_FORMATS


def tool_instructions(
    tools: Sequence[Tool],
    schemas: Sequence[dict[str, Any]] | None = None,
    *,
    formats: Sequence[str] = DEFAULT_FORMATS,
    max_tool_uses: int | None = None,
    template: str | None = None,
) -> str:
    """The tool instructions for a prompt: the schemas, how to write a call, and the limit.

    `template` replaces the default text, `{tools}` standing for the schema block. Only the
    tag and Hermes formats are taught; the others are accepted when a model writes them.
    """
    schemas = [t.openai_schema() for t in tools] if schemas is None else schemas
    schema_block = (
        "<tools>\n" + "\n".join(json.dumps(s, ensure_ascii=False) for s in schemas) + "\n</tools>"
    )
    if template is not None:
        return template.replace("{tools}", schema_block)
    ways = []
    if "hermes" in formats:
        ways.append(
            '<tool_call>{"name": "<tool name>", "arguments": {<arguments as JSON>}}</tool_call>'
        )
    if "tag" in formats:
        ways += [f"<{t.name}>...</{t.name}>" for t in tools if tag_field(t)]
    if "fence" in formats and any(t.name == "python" for t in tools):
        ways.append("a ```python code block (runs the python tool)")
    lines = [
        "# Tools",
        "",
        "You may call the tools below before you answer. Their function schemas:",
        schema_block,
        "",
    ]
    if ways:
        lines.append("To call a tool, write" + (" one of:" if len(ways) > 1 else ":"))
        lines += [f"- {w}" for w in ways]
    lines.append(
        "You may make several calls in one message; their results come back, in order, "
        "in the next message."
    )
    if max_tool_uses is not None:
        lines.append(f"You can make at most {max_tool_uses} tool calls in all.")
    lines.append("When you are ready, give your final answer without calling a tool.")
    return "\n".join(lines)
