"""`parse_action` and `parse_text`: every format's calls in one action, in order, or its answer."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gemkit.answers import extract_answer
from gemkit.tools.base import Tool
from gemkit.tools.calls.describe import tool_map
from gemkit.tools.calls.json_calls import _may_hold_json_call, _scan_json
from gemkit.tools.calls.markers import _scan_marked
from gemkit.tools.calls.messages import _message_text, _openai_items
from gemkit.tools.calls.model import DEFAULT_FORMATS, FORMATS, ParsedAction
from gemkit.tools.calls.pythonic import _pythonic_span
from gemkit.tools.calls.scan import _gaps, _Work


def strip_reasoning(text: str) -> str:
    """Drop `<think>` blocks: closed ones, a leading one opened by the chat template, an open one."""
    # a find loop rather than a regex: linear time even on junk with thousands of <think>
    kept: list[str] = []
    pos = 0
    while True:
        start = text.find("<think>", pos)
        if start < 0:
            kept.append(text[pos:])
            break
        kept.append(text[pos:start])
        end = text.find("</think>", start + len("<think>"))
        if end < 0:
            break  # an unclosed block: the rest is reasoning
        pos = end + len("</think>")
    visible = "".join(kept)
    if "</think>" in visible:
        visible = visible.rsplit("</think>", 1)[1]
    return visible


def parse_text(
    text: str, tools: Mapping[str, Tool] | Iterable[Tool], formats: Iterable[str] = DEFAULT_FORMATS
) -> ParsedAction:
    """Parse a text action (reasoning blocks ignored); see the module docstring."""
    tools = tool_map(tools)
    formats = tuple(formats)
    body = strip_reasoning(text)
    work = _Work(len(body))
    spans = _scan_marked(tools, body, formats, work)
    if "json" in formats and tools and _may_hold_json_call(body):
        spans += _scan_json(tools, body, _gaps(spans, len(body)), work)
    if "pythonic" in formats and not spans:
        spans += _pythonic_span(tools, body)
    spans.sort(key=lambda s: s[0])
    items = [item for _, _, found in spans for item in found]
    return ParsedAction(items, None if items else text)


def is_code_for_python(text: str, tools: Mapping[str, Tool] | Iterable[Tool]) -> bool:
    """Whether a reply with no call attempt is code meant for the `python` tool: it holds a
    ```python block and no final answer (`\\boxed{}`, `<answer>`), and a python tool is offered.

    `ToolEnvWrapper` then parses it with the `fence` format (`run_fenced_code`).
    """
    if "```py" not in text or "python" not in tool_map(tools):
        return False
    return extract_answer(strip_reasoning(text)) is None


def parse_action(
    action: Any,
    tools: Mapping[str, Tool] | Iterable[Tool],
    formats: Iterable[str] = DEFAULT_FORMATS,
) -> ParsedAction:
    """Parse one action (text, or an OpenAI assistant message dict) into calls or an answer.

    A message with `tool_calls` yields those calls (its text content is not searched); a
    message without them is parsed as its text content, which is also the final answer.
    """
    formats = tuple(formats)
    unknown = [f for f in formats if f not in FORMATS]
    if unknown:
        raise ValueError(f"unknown call formats {unknown}; expected some of {list(FORMATS)}")
    tools = tool_map(tools)
    if hasattr(action, "model_dump") and not isinstance(action, dict):
        action = action.model_dump()
    if isinstance(action, Mapping):
        tool_calls = action.get("tool_calls")
        if "openai" in formats and isinstance(tool_calls, list) and tool_calls:
            return ParsedAction(_openai_items(tools, tool_calls), None)
        return parse_text(_message_text(action.get("content")), tools, formats)
    if not isinstance(action, str):
        action = "" if action is None else str(action)
    return parse_text(action, tools, formats)
