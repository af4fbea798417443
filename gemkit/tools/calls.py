"""Finding tool calls in an action: every call format models write, or a message saying why not.

`parse_action(action, tools)` returns the calls and the malformed call attempts of one action,
in the order they appear, or the action's text as a final answer when it holds no call
attempt. A *call attempt* is, outside `<think>...</think>` reasoning:

- `tag`: `<NAME>` or `</NAME>` for a registered tool NAME. The content fills the tool's one
  string argument (`<python>print(1)</python>`), or is a JSON object of arguments
  (`<add>{"a": 1, "b": 2}</add>`). Tags of unregistered names are ordinary text.
- `hermes` (Hermes, Qwen): `<tool_call>` or `</tool_call>`, holding
  `{"name": ..., "arguments": {...}}` (arguments may also be a JSON string), or a JSON list.
- `openai`: an assistant message dict with a non-empty `tool_calls` list.
- `json`: a bare JSON object `{"name": ..., "arguments": {...}}` (also `"parameters"`, or the
  OpenAI `{"type": "function", "function": {...}}` form), alone, inside prose, or alone in a
  ```json fence, as small models write it. An object naming a registered tool in any other
  way (`{"tool": "search", "query": ...}`) is *ambiguous*: answered with a message saying how
  to call, never taken as the final answer. Objects that name no tool are plain data.
- `llama`: `<function=NAME>{"arg": ...}</function>` (Llama 3.1).
- `mistral`: `[TOOL_CALLS]` followed by a JSON list of calls or `NAME[ARGS]{...}`.
- `pythonic`: a reply that is only `search(query="x")` or `[a(x=1), b(y=2)]` (Llama 3.2/4).
- `fence` (off by default: code tasks answer in fenced blocks): a ```python block, run by
  the `python` tool. `ToolEnvWrapper` turns it on for a reply that holds no final answer
  (`run_fenced_code`), outside envs whose answers are code.

Nothing here raises on model output: every problem becomes a `MalformedCall` whose message says
what was wrong and shows the expected format.
"""

from __future__ import annotations

import ast
import difflib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from gemkit.answers import extract_answer
from gemkit.tools.base import Tool

FORMATS = ("tag", "hermes", "openai", "json", "llama", "mistral", "pythonic", "fence")
DEFAULT_FORMATS = ("tag", "hermes", "openai", "json", "llama", "mistral", "pythonic")
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
class MalformedCall:
    """A malformed call attempt; `message` says what was wrong and the expected format.

    `kind` is one of `json`, `unknown_tool`, `arguments`, `unclosed`, `unopened`, `format`,
    `ambiguous` (JSON that names a tool in no call format).
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

    items: list[ToolCall | MalformedCall]
    answer: str | None

    @property
    def calls(self) -> list[ToolCall]:
        """The well-formed calls."""
        return [i for i in self.items if isinstance(i, ToolCall)]

    @property
    def errors(self) -> list[MalformedCall]:
        """The malformed call attempts."""
        return [i for i in self.items if isinstance(i, MalformedCall)]

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


# -- the scanner ----------------------------------------------------------------------------------

_DECODER = json.JSONDecoder()
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
_MISTRAL_NAMED = re.compile(r"\s*(?P<name>[A-Za-z_][\w.-]{0,127})\[ARGS\]")
_PYTHONIC_START = re.compile(r"\[?\s*(?P<name>[A-Za-z_]\w*)\s*\(")
_LITERAL_LIMIT = 100_000  # longest Python-literal call text tried (literal_eval is not linear)

Span = tuple[int, int, list[ToolCall | MalformedCall]]


def _scanner(
    tools: dict[str, Tool], formats: Iterable[str], body: str = ""
) -> re.Pattern[str] | None:
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
    # markers absent from the text stay out of the pattern: an alternation without a common
    # first character is scanned position by position (10x slower on a long answer)
    if "llama" in formats and "<function=" in body:
        alternatives.append(r"<function=(?P<fn>[^>\s]{1,128})>")
    if "mistral" in formats and "[TOOL_CALLS]" in body:
        alternatives.append(r"(?P<mistral>\[TOOL_CALLS\])")
    return re.compile("|".join(alternatives)) if alternatives else None


def _fence_span(tools: dict[str, Tool], body: str, m: re.Match[str]) -> Span:
    end = body.find("```", m.end())
    if end < 0:
        error = MalformedCall(
            "missing closing ``` after ```python. Expected:\n```python\n...\n```",
            _clip(body[m.start() :]),
            "unclosed",
            "python",
            format="fence",
        )
        return m.start(), len(body), [error]
    fenced = _tag_items(tools, "python", body[m.end() : end], body[m.start() : end + 3])
    for item in fenced:
        item.format = "fence"
    return m.start(), end + 3, fenced


def _tag_span(tools: dict[str, Tool], body: str, m: re.Match[str]) -> Span:
    tag = m.group("tag")
    fmt = "hermes" if tag == "tool_call" else "tag"
    owner = None if fmt == "hermes" else tag
    if m.group("close"):
        error = MalformedCall(
            f"found </{tag}> without an opening <{tag}>. Expected: {_tag_example(tools, tag)}",
            m.group(0),
            "unopened",
            owner,
            format=fmt,
        )
        return m.start(), m.end(), [error]
    close = f"</{tag}>"
    end = body.find(close, m.end())
    if end < 0:
        error = MalformedCall(
            f"missing closing tag {close} after <{tag}>. Expected: {_tag_example(tools, tag)}",
            _clip(body[m.start() :]),
            "unclosed",
            owner,
            format=fmt,
        )
        return m.start(), len(body), [error]
    raw = body[m.start() : end + len(close)]
    content = body[m.end() : end]
    if fmt == "hermes":
        return m.start(), end + len(close), _hermes_items(tools, content, raw)
    return m.start(), end + len(close), _tag_items(tools, tag, content, raw)


class _Work:
    """What one parse may still spend on decoding, and what decoding from each `{` gave.

    Decoding reads a growing window, so a broken object costs about its own size; the budget
    (a few times the text's length) bounds junk built to make every key start a decode, and
    the memo stops a long object being decoded again for each key inside it.
    """

    def __init__(self, size: int):
        self.left = 8 * size + 1_000_000
        self.memo: dict[int, tuple[Any, int] | None] = {}

    def spend(self, chars: int) -> bool:
        """Charge `chars` of reading; False once the budget is gone."""
        self.left -= chars
        return self.left >= 0

    def decode(self, body: str, pos: int, stop: int | None = None) -> tuple[Any, int] | None:
        """The JSON value starting at `pos` (after blanks) and where it ends, or None."""
        stop = len(body) if stop is None else stop
        while pos < stop and body[pos] in " \t\r\n":
            pos += 1
        window = 2048
        while True:
            end = min(stop, pos + window)
            if not self.spend(end - pos):
                return None
            chunk = body[pos:end]
            try:
                value, used = _DECODER.raw_decode(chunk)
                return value, pos + used
            except json.JSONDecodeError as e:
                # JSON fails at the same place in a prefix as in the whole text, unless the
                # failure is the prefix ending: only then is a wider window worth reading
                cut = e.pos >= len(chunk) - 1 or e.msg.startswith("Unterminated")
                if end >= stop or not cut:
                    return None
            except (RecursionError, ValueError):
                return None
            window *= 8


def _llama_span(tools: dict[str, Tool], body: str, m: re.Match[str], work: _Work) -> Span:
    # Llama 3.1's custom format: <function=NAME>{"arg": ...}</function>
    name = m.group("fn")
    close = body.find("</function>", m.end())
    if close >= 0:
        raw = body[m.start() : close + len("</function>")]
        data, err = _load_json(body[m.end() : close].strip() or "{}", f"<function={name}>")
        if err is not None:
            expected = _generic_example(tools, "hermes")
            return (
                m.start(),
                close + 11,
                [MalformedCall(f"{err}\nExpected: {expected}", raw, "json", name, format="llama")],
            )
        return m.start(), close + 11, [_check_call(tools, name, data, raw=raw, fmt="llama")]
    decoded = work.decode(body, m.end())
    if decoded is not None and isinstance(decoded[0], dict):  # the closing tag left off
        data, end = decoded
        return (
            m.start(),
            end,
            [_check_call(tools, name, data, raw=body[m.start() : end], fmt="llama")],
        )
    error = MalformedCall(
        f"missing </function> after <function={_clip(name, 60)}>. Expected: "
        f'<function={name}>{{"<argument>": ...}}</function>',
        _clip(body[m.start() :]),
        "unclosed",
        name,
        format="llama",
    )
    return m.start(), len(body), [error]


def _mistral_span(tools: dict[str, Tool], body: str, m: re.Match[str], work: _Work) -> Span:
    # Mistral: [TOOL_CALLS] [{"name": ..., "arguments": ...}] or [TOOL_CALLS]NAME[ARGS]{...}
    decoded = work.decode(body, m.end())
    if decoded is not None and isinstance(decoded[0], (list, dict)):
        data, end = decoded
        return m.start(), end, _call_objects(tools, data, body[m.start() : end], "mistral")
    items: list[ToolCall | MalformedCall] = []
    pos = m.end()
    while (named := _MISTRAL_NAMED.match(body, pos)) is not None:
        args = work.decode(body, named.end())
        if args is None:
            items.append(
                MalformedCall(
                    f"malformed JSON arguments after {named.group('name')}[ARGS]. Expected: "
                    f"{_generic_example(tools, 'hermes')}",
                    _clip(body[m.start() :]),
                    "json",
                    named.group("name"),
                    format="mistral",
                )
            )
            return m.start(), len(body), items
        data, pos = args
        raw = body[named.start() : pos].strip()
        items.append(_check_call(tools, named.group("name"), data, raw=raw, fmt="mistral"))
    if items:
        return m.start(), pos, items
    error = MalformedCall(
        "after [TOOL_CALLS] came no call: expected a JSON list of "
        '{"name": ..., "arguments": {...}} objects. Expected: '
        f"{_generic_example(tools, 'hermes')}",
        _clip(body[m.start() :]),
        "format",
        format="mistral",
    )
    return m.start(), len(body), [error]


def _scan_marked(
    tools: dict[str, Tool], body: str, formats: tuple[str, ...], work: _Work
) -> list[Span]:
    """Calls opened by a marker: tags, Hermes, fences, Llama `<function=>`, `[TOOL_CALLS]`."""
    scanner = _scanner(tools, formats, body)
    spans: list[Span] = []
    pos = 0
    while scanner is not None:
        m = scanner.search(body, pos)
        if m is None:
            break
        groups = m.groupdict()
        if groups.get("fence"):
            span = _fence_span(tools, body, m)
        elif groups.get("fn"):
            span = _llama_span(tools, body, m, work)
        elif groups.get("mistral"):
            span = _mistral_span(tools, body, m, work)
        else:
            span = _tag_span(tools, body, m)
        spans.append(span)
        pos = max(span[1], m.end())
    return spans


def _gaps(spans: list[Span], size: int) -> list[tuple[int, int]]:
    gaps, pos = [], 0
    for start, end, _ in sorted(spans, key=lambda s: s[0]):
        if start > pos:
            gaps.append((pos, start))
        pos = max(pos, end)
    if pos < size:
        gaps.append((pos, size))
    return gaps


def _balanced_end(text: str, start: int, stop: int, work: _Work) -> int | None:
    """The end of the bracketed value opening at `start` (quotes of both kinds skipped)."""
    depth, quote, i = 0, "", start
    while i < stop:
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 1
            elif ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
            if depth == 0:
                work.spend(i + 1 - start)
                return i + 1
        i += 1
    work.spend(i - start)
    return None


def _python_literal(text: str, start: int, stop: int, work: _Work) -> tuple[Any, int] | None:
    """A dict written as a Python literal (single quotes, True/None) at `start`, or None."""
    end = _balanced_end(text, start, min(stop, start + _LITERAL_LIMIT), work)
    if end is None or work.left < 0:
        return None
    try:
        value = ast.literal_eval(text[start:end])
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    return value, end


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
    items = (
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
    calls = node.elts if isinstance(node, (ast.List, ast.Tuple)) else [node]
    if not calls or not all(
        isinstance(c, ast.Call) and isinstance(c.func, ast.Name) for c in calls
    ):
        return []
    items: list[ToolCall | MalformedCall] = []
    for c in calls:
        name = c.func.id  # type: ignore[attr-defined]
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


def _may_hold_json_call(body: str) -> bool:
    # one-character tests first: each is a memchr, the key test reads the text six times
    if "{" not in body or ":" not in body or ('"' not in body and "'" not in body):
        return False
    return any(k in body for k in _KEY_ENDS)


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
