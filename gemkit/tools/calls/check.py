"""Checking a found call against its tool, with messages that say what was wrong."""

from __future__ import annotations

import difflib
import json
from typing import Any

from pydantic import ValidationError

from gemkit.tools.base import Tool
from gemkit.tools.calls.describe import example_call, signature, tag_field
from gemkit.tools.calls.model import MalformedCall, ToolCall, _clip


def summarize_validation(error: ValidationError, limit: int = 3) -> str:
    """A pydantic validation error in one line: what was missing, unexpected or mistyped."""
    parts = []
    errors = error.errors(include_url=False)
    for e in errors[:limit]:
        loc = ".".join(str(p) for p in e.get("loc", ())) or "(arguments)"
        kind = e.get("type", "")
        if kind == "missing":
            parts.append(f"missing argument '{loc}'")
        elif kind == "extra_forbidden":
            parts.append(f"unexpected argument '{loc}'")
        else:
            got = _clip(json.dumps(e.get("input"), ensure_ascii=False, default=str), 40)
            parts.append(f"'{loc}': {e.get('msg', 'invalid')} (got {got})")
    if len(errors) > limit:
        parts.append(f"and {len(errors) - limit} more")
    return "; ".join(parts)


def _check_call(
    tools: dict[str, Tool],
    name: Any,
    arguments: Any,
    *,
    raw: str,
    fmt: str,
    call_id: str | None = None,
) -> ToolCall | MalformedCall:
    if not isinstance(name, str) or not name:
        return MalformedCall(
            f"the call has no tool name (got {_clip(json.dumps(name, default=str), 40)}). "
            f"Expected: {_generic_example(tools, fmt)}",
            raw,
            "format",
            id=call_id,
            format=fmt,
        )
    tool = tools.get(name)
    if tool is None:
        close = difflib.get_close_matches(name, list(tools), n=1)
        hint = f" Did you mean '{close[0]}'?" if close else ""
        available = ", ".join(sorted(tools)) or "(none)"
        return MalformedCall(
            f"unknown tool '{_clip(name, 60)}'.{hint} Available tools: {available}.",
            raw,
            "unknown_tool",
            name=name,
            id=call_id,
            format=fmt,
        )
    if not isinstance(arguments, dict):
        return MalformedCall(
            f"arguments of {name} must be a JSON object, got "
            f"{_clip(json.dumps(arguments, ensure_ascii=False, default=str), 60)}. "
            f"Expected: {example_call(tool, fmt)}",
            raw,
            "format",
            name=name,
            id=call_id,
            format=fmt,
        )
    try:
        args = tool.Args.model_validate(arguments)
    except ValidationError as e:
        return MalformedCall(
            f"wrong arguments for {name}: {summarize_validation(e)}. "
            f"Expected {signature(tool)}, e.g. {example_call(tool, fmt)}",
            raw,
            "arguments",
            name=name,
            id=call_id,
            format=fmt,
        )
    return ToolCall(name, arguments, raw, id=call_id, format=fmt, args=args)


def _tag_example(tools: dict[str, Tool], tag: str) -> str:
    return (
        _generic_example(tools, "hermes") if tag == "tool_call" else example_call(tools[tag], "tag")
    )


def _generic_example(tools: dict[str, Tool], fmt: str) -> str:
    if tools:
        return example_call(next(iter(tools.values())), fmt)
    return '<tool_call>{"name": "<tool>", "arguments": {...}}</tool_call>'


def _json_error(e: json.JSONDecodeError, text: str, what: str) -> str:
    lines = text.split("\n")  # json counts lines by "\n" only
    line = lines[e.lineno - 1] if 0 < e.lineno <= len(lines) else ""
    col = e.colno - 1
    start = max(0, col - 40)
    snippet = line[start : col + 40]
    caret = " " * (col - start) + "^"
    return (
        f"malformed JSON in {what} at line {e.lineno}, column {e.colno}: {e.msg}.\n"
        f"    {snippet}\n    {caret}"
    )


def _load_json(text: str, what: str) -> tuple[Any, str | None]:
    try:
        return json.loads(text), None
    except json.JSONDecodeError as e:
        return None, _json_error(e, text, what)
    except RecursionError:
        return None, f"malformed JSON in {what}: nested too deeply."
    except ValueError as e:  # e.g. an integer literal longer than Python's 4300-digit limit
        return None, f"malformed JSON in {what}: {_clip(str(e), 120)}"


def _hermes_items(
    tools: dict[str, Tool], content: str, raw: str, fmt: str = "hermes"
) -> list[ToolCall | MalformedCall]:
    data, err = _load_json(content.strip(), "<tool_call>")
    if err is not None:
        return [
            MalformedCall(
                f"{err}\nExpected: {_generic_example(tools, 'hermes')}", raw, "json", format=fmt
            )
        ]
    return _call_objects(tools, data, raw, fmt)


def _call_objects(
    tools: dict[str, Tool], data: Any, raw: str, fmt: str
) -> list[ToolCall | MalformedCall]:
    """The calls in decoded JSON: one `{"name", "arguments"}` object or a list of them."""

    # examples are built only on error paths: they need the JSON schema, which is slow
    def expected() -> str:
        return _generic_example(tools, "hermes")

    many = isinstance(data, list) and data and all(isinstance(d, dict) for d in data)
    objects = data if many else [data]
    out: list[ToolCall | MalformedCall] = []
    for obj in objects:
        if isinstance(obj, dict) and isinstance(obj.get("function"), dict):
            obj = obj["function"]  # the OpenAI wire form {"type": "function", "function": {...}}
        if not isinstance(obj, dict):
            out.append(
                MalformedCall(
                    'a call must be a JSON object with "name" and "arguments", got '
                    f"{_clip(json.dumps(obj, ensure_ascii=False, default=str), 60)}. "
                    f"Expected: {expected()}",
                    raw,
                    "format",
                    format=fmt,
                )
            )
            continue
        name = obj.get("name")
        arguments = obj.get("arguments", obj.get("parameters"))
        arguments = {} if arguments is None else arguments
        if isinstance(arguments, str):
            arguments, err = _load_json(arguments or "{}", f'the "arguments" string of {name}')
            if err is not None:
                out.append(
                    MalformedCall(f"{err}\nExpected: {expected()}", raw, "json", name, format=fmt)
                )
                continue
        out.append(_check_call(tools, name, arguments, raw=raw, fmt=fmt))
    return out


def _tag_items(
    tools: dict[str, Tool], name: str, content: str, raw: str
) -> list[ToolCall | MalformedCall]:
    tool = tools[name]
    field_name = tag_field(tool)
    if field_name is not None:
        # the advertised JSON form too: `<git_status>{"repo_path": "."}</git_status>`
        arguments = _json_arguments(tool, content)
        if arguments is None:
            arguments = {field_name: _trim(content)}
        return [_check_call(tools, name, arguments, raw=raw, fmt="tag")]
    data, err = _load_json(content.strip(), f"<{name}>")
    if err is not None or not isinstance(data, dict):
        why = err or "its content must be a JSON object of arguments."
        return [
            MalformedCall(
                f"{name} takes arguments {signature(tool)}; {why}\n"
                f"Expected: {example_call(tool, 'tag')}",
                raw,
                "json" if err else "format",
                name,
                format="tag",
            )
        ]
    return [_check_call(tools, name, data, raw=raw, fmt="tag")]


def _json_arguments(tool: Tool, content: str) -> dict[str, Any] | None:
    """The arguments when a tag's content is a JSON object of this tool's arguments, else None.

    Only an object whose keys are all argument names, the required ones included, counts: any
    other text (code that happens to be JSON, a query in braces) fills the tag field as is.
    """
    text = content.strip()
    if not (text.startswith("{") and text.endswith("}")):
        return None
    data, err = _load_json(text, "the tag")
    if err is not None or not isinstance(data, dict) or not data:
        return None
    fields = tool.Args.model_fields
    names = {f.alias or n for n, f in fields.items()} | set(fields)
    required = {f.alias or n for n, f in fields.items() if f.is_required()}
    return data if set(data) <= names and required <= set(data) else None


def _trim(content: str) -> str:
    # keep the first line's indentation of multi-line code; drop the blank lines around it
    if "\n" not in content.strip():
        return content.strip()
    lines = content.rstrip().split("\n")
    while lines and not lines[0].strip():
        lines.pop(0)
    return "\n".join(lines)
