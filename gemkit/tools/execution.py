"""Running one tool call: under its time limit, a failure as an error result, a long output cut."""

from __future__ import annotations

import asyncio
import dataclasses
import logging

from gemkit.tools.base import Tool, ToolResult
from gemkit.tools.calls.model import ToolCall
from gemkit.tools.function import result_to_text

log = logging.getLogger(__name__)


async def run_call(
    t: Tool, call: ToolCall, timeout: float | None, limit: str, max_result_chars: int | None
) -> ToolResult:
    """`t`'s result for `call`, stopped after `timeout` s (`limit` names that limit)."""
    args = call.args if call.args is not None else t.Args.model_validate(call.arguments)
    try:
        result = await asyncio.wait_for(t.call(args), timeout)
    except asyncio.TimeoutError:
        return ToolResult(
            f"Error: {call.name} timed out after {timeout:.3g} s ({limit}) and was stopped.",
            is_error=True,
            metadata={"timeout": True},
        )
    except Exception as e:  # a broken tool is the model's observation, never a crash
        log.debug("tool %s raised", call.name, exc_info=True)
        return ToolResult(
            f"Error: {call.name} failed: {type(e).__name__}: {e}",
            is_error=True,
            metadata={"exception": type(e).__name__},
        )
    result = result_to_text(result)
    if max_result_chars is not None and len(result.text) > max_result_chars:
        cut = len(result.text) - max_result_chars
        result = dataclasses.replace(
            result,
            text=result.text[:max_result_chars] + f"\n[... {cut} more characters cut]",
            metadata={**result.metadata, "cut": cut},
        )
    return result
