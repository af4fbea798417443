"""Finding tool calls in an action: tag, Hermes/Qwen, OpenAI `tool_calls` and fenced formats.

`parse_action(action, tools)` returns the calls and the malformed call attempts of one action,
in the order they appear, or the action's text as a final answer when it holds no call
attempt. A *call attempt* is, outside `<think>...</think>` reasoning:

- `tag`: `<NAME>` or `</NAME>` for a registered tool NAME. The content fills the tool's one
  string argument (`<python>print(1)</python>`), or is a JSON object of arguments
  (`<add>{"a": 1, "b": 2}</add>`). Tags of unregistered names are ordinary text.
- `hermes`: `<tool_call>` or `</tool_call>`, holding `{"name": ..., "arguments": {...}}`
  (arguments may also be a JSON string), or a JSON list of such objects.
- `openai`: an assistant message dict with a non-empty `tool_calls` list.
- `fence` (off by default: code tasks answer in fenced blocks): a ```python block, run by
  the `python` tool.

Nothing here raises on model output: every problem becomes a `ParseError` whose message says
what was wrong and shows the expected format.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from gemkit.tools.base import Tool

FORMATS = ("tag", "hermes", "openai", "fence")
DEFAULT_FORMATS = ("tag", "hermes", "openai")
_CLIP = 160


@dataclass
class ToolCall:
    """One well-formed call: tool name, arguments, the text it came from, and its call id.

    `args` holds the arguments validated by the tool's `Args` model. `id` is set for OpenAI
    calls; `ToolEnvWrapper` numbers the others.
    """

    name: str
    arguments: dict[str, Any]
    raw: str
    id: str | None = None
    format: str = ""
    args: BaseModel | None = field(default=None, repr=False, compare=False)


@dataclass
class ParseError:
    """A malformed call attempt; `message` says what was wrong and the expected format.

    `kind` is one of `json`, `unknown_tool`, `arguments`, `unclosed`, `unopened`, `format`.
    """

    message: str
    raw: str
    kind: str
    name: str | None = None
    id: str | None = None
    format: str = ""


@dataclass
class ParsedAction:
    """The calls and errors of one action in order, or its final answer when it has neither."""

    items: list[ToolCall | ParseError]
    answer: str | None

    @property
    def calls(self) -> list[ToolCall]:
        """The well-formed calls."""
        return [i for i in self.items if isinstance(i, ToolCall)]

    @property
    def errors(self) -> list[ParseError]:
        """The malformed call attempts."""
        return [i for i in self.items if isinstance(i, ParseError)]

    @property
    def has_calls(self) -> bool:
        """True when the action attempted at least one tool call (well-formed or not)."""
        return bool(self.items)


# -- helpers shared with the wrapper's instructions ---------------------------------------------


def tool_map(tools: Mapping[str, Tool] | Iterable[Tool]) -> dict[str, Tool]:
    """Tools by name."""
    if isinstance(tools, Mapping):
        return dict(tools)
    return {t.name: t for t in tools}


def _is_str_annotation(annotation: Any) -> bool:
    if annotation is str:
        return True
    if get_origin(annotation) is Union or type(annotation).__name__ == "UnionType":
        args = [a for a in get_args(annotation) if a is not type(None)]
        return args == [str]
    return False


def tag_field(tool: Tool) -> str | None:
    """The argument a `<NAME>content</NAME>` tag fills: the tool's one (required) str field.

    A tool may choose it by setting a `tag_field` attribute.
    """
    explicit = getattr(tool, "tag_field", None)
    if isinstance(explicit, str) and explicit:
        return explicit
    fields = tool.Args.model_fields
    required = [n for n, f in fields.items() if f.is_required()]
    candidates = required or list(fields)
    if len(candidates) != 1:
        return None
    info = fields[candidates[0]]
    return (info.alias or candidates[0]) if _is_str_annotation(info.annotation) else None


def _sample(prop: dict[str, Any]) -> Any:
    if "enum" in prop and prop["enum"]:
        return prop["enum"][0]
    kind = prop.get("type")
    if kind is None and "anyOf" in prop:
        kinds = [p.get("type") for p in prop["anyOf"] if p.get("type") != "null"]
        kind = kinds[0] if kinds else None
    return {"string": "...", "integer": 0, "number": 0.0, "boolean": False, "array": []}.get(
        kind, {}
    )


def example_call(tool: Tool, fmt: str = "hermes") -> str:
    """A well-formed call of `tool` in format `fmt`, with placeholder argument values."""
    field_name = tag_field(tool)
    if fmt == "tag" and field_name is not None:
        return f"<{tool.name}>...</{tool.name}>"
    if fmt == "fence":
        return "```python\n...\n```"
    schema = tool.json_schema()
    required = schema.get("required", [])
    props = schema.get("properties", {})
    args = {name: _sample(props.get(name, {})) for name in required}
    args_json = json.dumps(args, ensure_ascii=False)
    if fmt == "tag":
        return f"<{tool.name}>{args_json}</{tool.name}>"
    if fmt == "openai":
        return (
            '{"type": "function", "function": {"name": "'
            + tool.name
            + '", "arguments": '
            + json.dumps(args_json, ensure_ascii=False)
            + "}}"
        )
    return '<tool_call>{"name": "' + tool.name + '", "arguments": ' + args_json + "}</tool_call>"


def _type_name(prop: dict[str, Any]) -> str:
    if "enum" in prop:
        return " | ".join(json.dumps(v, ensure_ascii=False) for v in prop["enum"])
    if "anyOf" in prop:
        return " | ".join(_type_name(p) for p in prop["anyOf"])
    if "$ref" in prop:
        return prop["$ref"].rsplit("/", 1)[-1]
    kind = prop.get("type", "any")
    if kind == "array" and isinstance(prop.get("items"), dict):
        return f"list[{_type_name(prop['items'])}]"
    return str(kind)


def signature(tool: Tool) -> str:
    """`name(a: integer, b: string = "x")`: the tool's arguments in one line."""
    schema = tool.json_schema()
    required = set(schema.get("required", []))
    parts = []
    for name, prop in schema.get("properties", {}).items():
        part = f"{name}: {_type_name(prop)}"
        if name not in required and "default" in prop:
            part += f" = {json.dumps(prop['default'], ensure_ascii=False)}"
        elif name not in required:
            part += " (optional)"
        parts.append(part)
    return f"{tool.name}({', '.join(parts)})"


def _clip(text: str, limit: int = _CLIP) -> str:
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} chars)"


# -- reasoning --------------------------------------------------------------------------------


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


# -- argument checks --------------------------------------------------------------------------


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
) -> ToolCall | ParseError:
    if not isinstance(name, str) or not name:
        return ParseError(
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
        return ParseError(
            f"unknown tool '{_clip(name, 60)}'.{hint} Available tools: {available}.",
            raw,
            "unknown_tool",
            name=name,
            id=call_id,
            format=fmt,
        )
    if not isinstance(arguments, dict):
        return ParseError(
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
        return ParseError(
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
) -> list[ToolCall | ParseError]:
    # examples are built only on error paths: they need the JSON schema, which is slow
    def expected() -> str:
        return _generic_example(tools, "hermes")

    data, err = _load_json(content.strip(), "<tool_call>")
    if err is not None:
        return [ParseError(f"{err}\nExpected: {expected()}", raw, "json", format=fmt)]
    many = isinstance(data, list) and data and all(isinstance(d, dict) for d in data)
    objects = data if many else [data]
    out: list[ToolCall | ParseError] = []
    for obj in objects:
        if not isinstance(obj, dict):
            out.append(
                ParseError(
                    '<tool_call> must hold a JSON object with "name" and "arguments", got '
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
                    ParseError(f"{err}\nExpected: {expected()}", raw, "json", name, format=fmt)
                )
                continue
        out.append(_check_call(tools, name, arguments, raw=raw, fmt=fmt))
    return out


def _tag_items(
    tools: dict[str, Tool], name: str, content: str, raw: str
) -> list[ToolCall | ParseError]:
    tool = tools[name]
    field_name = tag_field(tool)
    if field_name is not None:
        return [_check_call(tools, name, {field_name: _trim(content)}, raw=raw, fmt="tag")]
    data, err = _load_json(content.strip(), f"<{name}>")
    if err is not None or not isinstance(data, dict):
        why = err or "its content must be a JSON object of arguments."
        return [
            ParseError(
                f"{name} takes arguments {signature(tool)}; {why}\n"
                f"Expected: {example_call(tool, 'tag')}",
                raw,
                "json" if err else "format",
                name,
                format="tag",
            )
        ]
    return [_check_call(tools, name, data, raw=raw, fmt="tag")]


def _trim(content: str) -> str:
    # keep the first line's indentation of multi-line code; drop the blank lines around it
    if "\n" not in content.strip():
        return content.strip()
    lines = content.rstrip().split("\n")
    while lines and not lines[0].strip():
        lines.pop(0)
    return "\n".join(lines)


# -- the scanner ----------------------------------------------------------------------------------


def _scanner(tools: dict[str, Tool], formats: Iterable[str]) -> re.Pattern[str] | None:
    names: list[str] = []
    if "hermes" in formats:
        names.append("tool_call")
    if "tag" in formats:
        names += sorted((n for n in tools if n and n != "tool_call"), key=len, reverse=True)
    alternatives = []
    if names:
        alternatives.append(r"<(?P<close>/?)(?P<tag>" + "|".join(map(re.escape, names)) + r")>")
    if "fence" in formats and "python" in tools:
        alternatives.append(r"(?P<fence>```(?:python|py)\b[^\n]*\n?)")
    return re.compile("|".join(alternatives)) if alternatives else None


def parse_text(
    text: str, tools: Mapping[str, Tool] | Iterable[Tool], formats: Iterable[str] = DEFAULT_FORMATS
) -> ParsedAction:
    """Parse a text action (reasoning blocks ignored); see the module docstring."""
    tools = tool_map(tools)
    formats = tuple(formats)
    scanner = _scanner(tools, formats)
    body = strip_reasoning(text)
    items: list[ToolCall | ParseError] = []
    pos = 0
    while scanner is not None:
        m = scanner.search(body, pos)
        if m is None:
            break
        if m.groupdict().get("fence"):
            end = body.find("```", m.end())
            if end < 0:
                items.append(
                    ParseError(
                        "missing closing ``` after ```python. Expected:\n```python\n...\n```",
                        _clip(body[m.start() :]),
                        "unclosed",
                        "python",
                        format="fence",
                    )
                )
                break
            fenced = _tag_items(tools, "python", body[m.end() : end], body[m.start() : end + 3])
            for item in fenced:
                item.format = "fence"
            items += fenced
            pos = end + 3
            continue
        tag = m.group("tag")
        fmt = "hermes" if tag == "tool_call" else "tag"
        if m.group("close"):
            items.append(
                ParseError(
                    f"found </{tag}> without an opening <{tag}>. "
                    f"Expected: {_tag_example(tools, tag)}",
                    m.group(0),
                    "unopened",
                    None if fmt == "hermes" else tag,
                    format=fmt,
                )
            )
            pos = m.end()
            continue
        close = f"</{tag}>"
        end = body.find(close, m.end())
        if end < 0:
            items.append(
                ParseError(
                    f"missing closing tag {close} after <{tag}>. "
                    f"Expected: {_tag_example(tools, tag)}",
                    _clip(body[m.start() :]),
                    "unclosed",
                    None if fmt == "hermes" else tag,
                    format=fmt,
                )
            )
            break
        raw = body[m.start() : end + len(close)]
        content = body[m.end() : end]
        if fmt == "hermes":
            items += _hermes_items(tools, content, raw)
        else:
            items += _tag_items(tools, tag, content, raw)
        pos = end + len(close)
    return ParsedAction(items, None if items else text)


def _message_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return str(content)


def _openai_items(tools: dict[str, Tool], tool_calls: list[Any]) -> list[ToolCall | ParseError]:
    out: list[ToolCall | ParseError] = []
    for tc in tool_calls:
        if hasattr(tc, "model_dump"):
            tc = tc.model_dump()
        raw = _clip(json.dumps(tc, ensure_ascii=False, default=str), 2000)
        fn = tc.get("function") if isinstance(tc, dict) else None
        call_id = tc.get("id") if isinstance(tc, dict) else None
        call_id = call_id if isinstance(call_id, str) else None
        if not isinstance(fn, dict):
            out.append(
                ParseError(
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
                    ParseError(
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
