"""Calls opened by a marker: tags, Hermes `<tool_call>`, ```python fences, Llama, Mistral."""

from __future__ import annotations

import re
from collections.abc import Iterable

from gemkit.tools.base import Tool
from gemkit.tools.calls.check import (
    _call_objects,
    _check_call,
    _generic_example,
    _hermes_items,
    _load_json,
    _tag_example,
    _tag_items,
)
from gemkit.tools.calls.model import MalformedCall, ToolCall, _clip
from gemkit.tools.calls.scan import Span, _Work

_MISTRAL_NAMED = re.compile(r"\s*(?P<name>[A-Za-z_][\w.-]{0,127})\[ARGS\]")


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
