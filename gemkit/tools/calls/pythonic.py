"""Pythonic calls: a reply that is only `search(query="x")` or `[a(x=1), b(y=2)]`."""

from __future__ import annotations

import ast
import re
from typing import Any

from gemkit.tools.base import Tool
from gemkit.tools.calls.check import _check_call, _generic_example
from gemkit.tools.calls.describe import tag_field
from gemkit.tools.calls.model import MalformedCall, ToolCall, _clip
from gemkit.tools.calls.scan import _LITERAL_LIMIT, Span

_PYTHONIC_START = re.compile(r"\[?\s*(?P<name>[A-Za-z_]\w*)\s*\(")


def _pythonic_span(tools: dict[str, Tool], body: str) -> list[Span]:
    """A reply that is only `search(query="x")` or `[a(x=1), b(y=2)]` (Llama 3.2 and 4)."""
    text = body.strip()
    m = _PYTHONIC_START.match(text)
    if m is None or m.group("name") not in tools or len(text) > _LITERAL_LIMIT:
        return []
    try:
        node = ast.parse(text, mode="eval").body
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return []
    nodes = node.elts if isinstance(node, (ast.List, ast.Tuple)) else [node]
    calls = [
        (c, c.func.id) for c in nodes if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)
    ]
    if not calls or len(calls) != len(nodes):
        return []
    items: list[ToolCall | MalformedCall] = []
    for c, name in calls:
        raw = ast.get_source_segment(text, c) or text
        args, problem = _pythonic_args(tools.get(name), c)
        if problem:
            items.append(
                MalformedCall(
                    f"{name}(...): {problem}. Expected: {_generic_example(tools, 'hermes')}",
                    _clip(raw),
                    "arguments",
                    name,
                    format="pythonic",
                )
            )
            continue
        items.append(_check_call(tools, name, args, raw=raw, fmt="pythonic"))
    offset = body.find(text)
    return [(offset, offset + len(text), items)]


def _pythonic_args(tool: Tool | None, call: ast.Call) -> tuple[dict[str, Any], str]:
    args: dict[str, Any] = {}
    try:
        if call.args:
            field_name = tag_field(tool) if tool is not None else None
            if len(call.args) != 1 or field_name is None:
                return {}, "pass the arguments by name, e.g. name=value"
            args[field_name] = ast.literal_eval(call.args[0])
        for kw in call.keywords:
            if kw.arg is None:
                return {}, "**arguments cannot be read; pass each argument by name"
            args[kw.arg] = ast.literal_eval(kw.value)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return {}, "argument values must be literals (strings, numbers, lists, dicts)"
    return args, ""
