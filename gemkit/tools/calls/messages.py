"""Calls in an OpenAI assistant message's `tool_calls` list."""

from __future__ import annotations

import json
from typing import Any

from gemkit.tools.base import Tool
from gemkit.tools.calls.check import _check_call, _generic_example, _load_json
from gemkit.tools.calls.model import MalformedCall, ToolCall, _clip


def _message_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return str(content)


def _openai_items(tools: dict[str, Tool], tool_calls: list[Any]) -> list[ToolCall | MalformedCall]:
    out: list[ToolCall | MalformedCall] = []
    for tc in tool_calls:
        if hasattr(tc, "model_dump"):
            tc = tc.model_dump()
        raw = _clip(json.dumps(tc, ensure_ascii=False, default=str), 2000)
        fn = tc.get("function") if isinstance(tc, dict) else None
        call_id = tc.get("id") if isinstance(tc, dict) else None
        call_id = call_id if isinstance(call_id, str) else None
        if not isinstance(fn, dict):
            out.append(
                MalformedCall(
                    'each entry of tool_calls needs a "function" object with "name" and '
                    f'"arguments". Expected: {_generic_example(tools, "openai")}',
                    raw,
                    "format",
                    id=call_id,
                    format="openai",
                )
            )
            continue
        name, arguments = fn.get("name"), fn.get("arguments")
        arguments = "{}" if arguments is None else arguments
        if isinstance(arguments, str):
            arguments, err = _load_json(arguments or "{}", f'the "arguments" string of {name}')
            if err is not None:
                out.append(
                    MalformedCall(
                        f'{err}\n"arguments" must be a JSON object encoded as a string.',
                        raw,
                        "json",
                        name if isinstance(name, str) else None,
                        call_id,
                        "openai",
                    )
                )
                continue
        out.append(_check_call(tools, name, arguments, raw=raw, fmt="openai", call_id=call_id))
    return out
