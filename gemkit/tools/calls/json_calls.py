"""Bare JSON calls (`{"name": ..., "arguments": ...}`) alone, in prose or in a fence."""

from __future__ import annotations

import re
from typing import Any

from gemkit.tools.base import Tool
from gemkit.tools.calls.check import _call_objects, _load_json
from gemkit.tools.calls.describe import example_call
from gemkit.tools.calls.model import MalformedCall, ToolCall, _clip
from gemkit.tools.calls.scan import Span, _balanced_end, _python_literal, _Work

#: a key naming the tool in the JSON calls models write (`"name": "search"`)
_NAME_KEY = re.compile(r"""["'](?:name|function|tool|tool_name)["']\s*:""")
_NAME_VALUE = re.compile(
    r"""["'](?:name|function|tool|tool_name)["']\s*:\s*["']([^"'\n]{1,128})["']"""
)
#: how a key naming a tool ends: a cheap test for whether a text may hold a JSON call at all
_KEY_ENDS = ('name"', "name'", 'tool"', "tool'", 'function"', "function'")
#: keys of a bare JSON call; anything else makes the object data, not a call
_CALL_KEYS = frozenset({"name", "arguments", "parameters", "id", "type"})
_FENCE_BEFORE = re.compile(r"```[A-Za-z_]*[ \t]*\n?[ \t]*\Z")
_FENCE_AFTER = re.compile(r"\A\s*```")


def _call_shape(obj: dict[str, Any], tools: dict[str, Tool]) -> str | None:
    """What a JSON object is: `call`, `ambiguous` (it names a tool, but in no format gemkit
    runs), or None (plain data, such as an answer)."""
    inner = obj.get("function")
    if isinstance(inner, dict) and set(obj) <= {"type", "function", "id"}:
        obj = inner
    name = obj.get("name")
    if isinstance(name, str) and set(obj) <= _CALL_KEYS:
        if "arguments" in obj or "parameters" in obj or name in tools:
            return "call"
    named = [obj.get(k) for k in ("name", "tool", "tool_name", "function")]
    if any(isinstance(v, str) and v in tools for v in named):
        return "ambiguous"
    return None


def _ambiguous(tools: dict[str, Tool], obj: dict[str, Any], raw: str) -> MalformedCall:
    name = next(
        v
        for k in ("name", "tool", "tool_name", "function")
        if isinstance(v := obj.get(k), str) and v in tools
    )
    return MalformedCall(
        f"this JSON names the tool {name} but is not a call gemkit can run (a JSON call has "
        'exactly "name" and "arguments"). To call it, write '
        f"{example_call(tools[name], 'hermes')}; to answer, reply without a tool's JSON.",
        _clip(raw),
        "ambiguous",
        name,
        format="json",
    )


def _json_span(
    tools: dict[str, Tool], body: str, key: re.Match[str], lo: int, hi: int, work: _Work
) -> Span | None:
    """The JSON call whose name key `key` matched, or an error for a broken one naming a tool."""
    named = _NAME_VALUE.match(body, key.start())
    tool_name = named.group(1) if named is not None and named.group(1) in tools else None
    start = key.start()
    for _ in range(4):  # the object may open before a nested value: try the braces to the left
        start = body.rfind("{", lo, start)
        if start < 0:
            return None
        if start not in work.memo:
            decoded = work.decode(body, start, hi)
            if decoded is None and tool_name and body[start + 1 : start + 80].lstrip()[:1] == "'":
                decoded = _python_literal(body, start, hi, work)
            work.memo[start] = decoded
        decoded = work.memo[start]
        if decoded is None:
            if tool_name is None or work.left < 0:
                return None
            end = _balanced_end(body, start, hi, work) or hi
            _, err = _load_json(body[start:end], f"the call of {tool_name}")
            error = MalformedCall(
                f"{err}\nExpected: {example_call(tools[tool_name], 'hermes')}",
                _clip(body[start:end]),
                "json",
                tool_name,
                format="json",
            )
            return start, end, [error]
        obj, end = decoded
        if end > key.start():
            break
    else:
        return None
    if end > hi or not isinstance(obj, dict):
        return None
    shape = _call_shape(obj, tools)
    if shape is None:
        return None
    raw = body[start:end]
    items: list[ToolCall | MalformedCall] = (
        _call_objects(tools, obj, raw, "json") if shape == "call" else [_ambiguous(tools, obj, raw)]
    )
    before, after = _FENCE_BEFORE.search(body, lo, start), _FENCE_AFTER.match(body[end:hi])
    if before is not None and after is not None:  # a call alone in a ```json fence
        start, end = before.start(), end + after.end()
        for item in items:
            item.raw = body[start:end] if isinstance(item, ToolCall) else item.raw
    return start, end, items


def _scan_json(
    tools: dict[str, Tool], body: str, gaps: list[tuple[int, int]], work: _Work
) -> list[Span]:
    """Bare JSON calls (`{"name": ..., "arguments": ...}`, alone, in prose or in a fence)."""
    spans: list[Span] = []
    for lo, hi in gaps:
        pos = lo
        while work.left >= 0 and (key := _NAME_KEY.search(body, pos, hi)) is not None:
            span = _json_span(tools, body, key, lo, hi, work)
            if span is None:
                pos = key.end()
                continue
            spans.append(span)
            pos = span[1]
    return spans


def _may_hold_json_call(body: str) -> bool:
    # one-character tests first: each is a memchr, the key test reads the text six times
    if "{" not in body or ":" not in body or ('"' not in body and "'" not in body):
        return False
    return any(k in body for k in _KEY_ENDS)
