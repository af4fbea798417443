"""What a step's tool results become: the next observation, and the records of its calls."""

from __future__ import annotations

from typing import Any

from gemkit.tools.base import ToolResult
from gemkit.tools.calls.model import MalformedCall, ToolCall


def render_results(
    items: list[ToolCall | MalformedCall],
    ids: list[str],
    results: list[ToolResult],
    truncated: bool,
    *,
    max_tool_uses: int | None,
    tool_uses: int,
) -> str:
    """One block per call attempt, in order, then what the call limit means now."""
    n = len(items)
    blocks = []
    for k, (item, result) in enumerate(zip(items, results, strict=True)):
        label = "error" if result.is_error else "result"
        where = f" {k + 1}/{n}" if n > 1 else ""
        name = item.name or "unparsed call"
        blocks.append(f"[tool {label}{where}: {name} (id {ids[k]})]\n{result.text}")
    if truncated:
        blocks.append(
            "The tool-call limit was exceeded again after a warning: the episode is over."
        )
    elif (
        max_tool_uses is not None
        and tool_uses >= max_tool_uses
        and not any(r.metadata.get("refused") for r in results)
    ):
        blocks.append(
            f"You have used all {max_tool_uses} tool calls: give your final answer "
            "now, without calling a tool."
        )
    return "\n\n".join(blocks)


def call_records(
    items: list[ToolCall | MalformedCall], ids: list[str], results: list[ToolResult]
) -> dict[str, list[dict[str, Any]]]:
    """`info["tool_results"]` (for chat-history wrappers) and `info["parsed_calls"]`."""
    return {
        "tool_results": [
            {
                "tool_call_id": ids[k],
                "name": item.name or "",
                "content": result.text,
                "is_error": result.is_error,
            }
            for k, (item, result) in enumerate(zip(items, results, strict=True))
        ],
        "parsed_calls": [
            {
                "id": ids[k],
                "name": item.name or "",
                "arguments": item.arguments if isinstance(item, ToolCall) else None,
                "format": item.format,
                "raw": item.raw,
            }
            for k, item in enumerate(items)
        ],
    }
