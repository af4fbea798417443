"""Call parsing: every call format, several calls in order, and a clear message per error kind."""

from __future__ import annotations

import json

import pytest

from gemkit.tools import MalformedCall, ToolCall, parse_action, tool
from gemkit.tools.calls import signature, strip_reasoning


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
def echo(text: str) -> str:
    """Echo text."""
    return text


@tool
def python(code: str, timeout: float = 5.0) -> str:
    """Run Python code."""
    return code


@tool
def search(query: str, k: int = 3) -> str:
    """Search."""
    return query


TOOLS = [add, echo, python, search]


def parse(action, formats=("tag", "hermes", "openai")):
    return parse_action(action, TOOLS, formats)


def only_call(action, **kw) -> ToolCall:
    parsed = parse(action, **kw)
    assert parsed.errors == [] and len(parsed.calls) == 1, parsed.items
    return parsed.calls[0]


def only_error(action, **kw) -> MalformedCall:
    parsed = parse(action, **kw)
    assert parsed.calls == [] and len(parsed.errors) == 1, parsed.items
    assert parsed.answer is None
    return parsed.errors[0]


# -- formats -----------------------------------------------------------------------------------


def test_tag_fills_the_single_required_string_argument():
    call = only_call("Let me look. <search>capital of France</search>")
    assert (call.name, call.arguments, call.format) == (
        "search",
        {"query": "capital of France"},
        "tag",
    )
    assert call.raw == "<search>capital of France</search>"
    assert call.args is not None and call.args.k == 3


def test_tag_code_keeps_indentation_and_drops_surrounding_blank_lines():
    code = "for i in range(2):\n    print(i)"
    assert only_call(f"<python>\n{code}\n</python>").arguments == {"code": code}
    indented = "    x = 1\n    y = 2"
    assert only_call(f"<python>\n\n{indented}\n  </python>").arguments == {"code": indented}


def test_tag_of_a_tool_with_several_arguments_takes_a_json_object():
    call = only_call('<add>{"a": 1, "b": 2}</add>')
    assert (call.name, call.arguments) == ("add", {"a": 1, "b": 2})


def test_tags_of_unregistered_names_are_ordinary_text():
    text = "Use <b>bold</b> and <code>x</code>; the answer is \\boxed{4}."
    parsed = parse(text)
    assert parsed.items == [] and parsed.answer == text


def test_hermes_call_with_object_or_string_arguments():
    obj = only_call('<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>')
    text = only_call(
        '<tool_call>{"name": "add", "arguments": "{\\"a\\": 2, \\"b\\": 3}"}</tool_call>'
    )
    params = only_call('<tool_call>{"name": "add", "parameters": {"a": 2, "b": 3}}</tool_call>')
    assert obj.arguments == text.arguments == params.arguments == {"a": 2, "b": 3}
    assert obj.format == "hermes" and obj.id is None


def test_hermes_list_of_calls_in_one_block():
    parsed = parse(
        '<tool_call>[{"name": "echo", "arguments": {"text": "a"}},'
        ' {"name": "echo", "arguments": {"text": "b"}}]</tool_call>'
    )
    assert [c.arguments["text"] for c in parsed.calls] == ["a", "b"]


def test_openai_tool_calls_with_ids():
    message = {
        "role": "assistant",
        "content": "Let me compute. <echo>ignored: tool_calls win</echo>",
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "add", "arguments": '{"a": 1, "b": 1}'},
            },
            {
                "id": "c2",
                "type": "function",
                "function": {"name": "echo", "arguments": {"text": "x"}},
            },
        ],
    }
    parsed = parse(message)
    assert [(c.id, c.name, c.arguments, c.format) for c in parsed.calls] == [
        ("c1", "add", {"a": 1, "b": 1}, "openai"),
        ("c2", "echo", {"text": "x"}, "openai"),
    ]
    assert json.loads(parsed.calls[0].raw)["id"] == "c1"


def test_openai_message_without_tool_calls_is_parsed_as_its_content():
    call = only_call({"role": "assistant", "content": "<echo>hi</echo>", "tool_calls": []})
    assert call.arguments == {"text": "hi"}
    parts = {
        "role": "assistant",
        "content": [{"type": "text", "text": "Paris"}],
        "tool_calls": None,
    }
    assert parse(parts).answer == "Paris"


def test_fenced_python_block_only_when_the_fence_format_is_on():
    text = "Run this:\n```python\nprint(6 * 7)\n```\n"
    assert parse(text).answer == text  # default formats: a fenced block is a final answer
    call = only_call(text, formats=("tag", "fence"))
    assert (call.name, call.arguments, call.format) == ("python", {"code": "print(6 * 7)"}, "fence")


def test_several_calls_across_formats_come_back_in_order():
    text = (
        '<echo>first</echo> then <tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>'
        " and <search>third</search>"
    )
    assert [c.name for c in parse(text).calls] == ["echo", "add", "search"]


def test_a_tag_inside_another_call_is_content_not_a_call():
    call = only_call('<python>print("<echo>x</echo>")</python>')
    assert call.arguments["code"] == 'print("<echo>x</echo>")'


def test_disabled_formats_are_ordinary_text():
    text = '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>'
    assert parse(text, formats=("tag",)).answer == text
    assert parse("<echo>x</echo>", formats=("hermes",)).answer == "<echo>x</echo>"
    with pytest.raises(ValueError, match="unknown call formats"):
        parse("x", formats=("xml",))


def test_reasoning_blocks_are_ignored_for_call_detection():
    text = "<think>maybe <echo>draft</echo>?</think>The answer is 4."
    parsed = parse(text)
    assert parsed.items == [] and parsed.answer == text  # the inner env gets the whole text
    assert only_call("<think>plan</think><echo>go</echo>").arguments == {"text": "go"}
    # a chat template that opened <think> itself: only text after </think> counts
    assert only_call("plan <echo>draft</echo></think><echo>go</echo>").arguments == {"text": "go"}
    assert parse("<echo>go</echo><think>unfinished <echo>x</echo>").calls[0].arguments == {
        "text": "go"
    }
    assert strip_reasoning("a<think>b</think>c<think>d") == "ac"


# -- errors ------------------------------------------------------------------------------------


def test_malformed_json_says_where_and_shows_the_expected_format():
    err = only_error('<tool_call>{"name": "add", "arguments": {"a": 1 "b": 2}}</tool_call>')
    assert err.kind == "json" and err.format == "hermes"
    assert (
        "malformed JSON in <tool_call> at line 1, column 38: Expecting ',' delimiter" in err.message
    )
    assert '{"a": 1 "b": 2}}\n' in err.message and "^" in err.message
    assert (
        'Expected: <tool_call>{"name": "add", "arguments": {"a": 0, "b": 0}}</tool_call>'
        in err.message
    )


def test_malformed_arguments_string_is_reported():
    err = only_error('<tool_call>{"name": "add", "arguments": "{a: 1}"}</tool_call>')
    assert err.kind == "json" and 'the "arguments" string of add' in err.message
    message = {
        "role": "assistant",
        "tool_calls": [{"id": "c9", "function": {"name": "add", "arguments": "{'a': 1}"}}],
    }
    err = only_error(message)
    assert (err.kind, err.id, err.name) == ("json", "c9", "add")
    assert "line 1, column 2" in err.message


def test_unknown_tool_lists_the_available_ones():
    err = only_error('<tool_call>{"name": "serch", "arguments": {"query": "x"}}</tool_call>')
    assert err.kind == "unknown_tool" and err.name == "serch"
    assert err.message == (
        "unknown tool 'serch'. Did you mean 'search'? Available tools: add, echo, python, search."
    )


def test_wrong_type_is_summarized_with_the_expected_signature():
    err = only_error('<tool_call>{"name": "add", "arguments": {"a": 1, "b": "two"}}</tool_call>')
    assert err.kind == "arguments"
    assert err.message.startswith(
        "wrong arguments for add: 'b': Input should be a valid integer, unable to parse string "
        'as an integer (got "two"). Expected add(a: integer, b: integer), e.g. <tool_call>'
    )
    assert err.message.count("\n") == 0


def test_missing_and_unexpected_arguments_are_named():
    err = only_error('<tool_call>{"name": "add", "arguments": {"a": 1, "c": 3}}</tool_call>')
    assert "missing argument 'b'" in err.message and "unexpected argument 'c'" in err.message
    err = only_error('<tool_call>{"name": "search", "arguments": {}}</tool_call>')
    assert err.message.startswith("wrong arguments for search: missing argument 'query'.")
    assert "Expected search(query: string, k: integer = 3)" in err.message


def test_missing_closing_tag():
    err = only_error("<search>capital of France")
    assert (err.kind, err.name) == ("unclosed", "search")
    assert err.message == (
        "missing closing tag </search> after <search>. Expected: <search>...</search>"
    )
    err = only_error('<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}')
    assert err.kind == "unclosed" and "</tool_call>" in err.message
    assert only_error("```python\nprint(1)", formats=("fence",)).kind == "unclosed"


def test_closing_tag_without_opening_tag():
    err = only_error('{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>')
    assert err.kind == "unopened"
    assert err.message.startswith("found </tool_call> without an opening <tool_call>. Expected:")


def test_tag_with_several_arguments_needs_a_json_object():
    err = only_error("<add>1 + 2</add>")
    assert err.kind == "json" and err.name == "add"
    assert err.message.startswith("add takes arguments add(a: integer, b: integer); malformed JSON")
    assert err.message.endswith('Expected: <add>{"a": 0, "b": 0}</add>')
    assert only_error("<add>[1, 2]</add>").kind == "format"


def test_call_shapes_that_are_not_calls():
    assert only_error("<tool_call>[1, 2]</tool_call>").kind == "format"
    no_name = only_error('<tool_call>{"arguments": {}}</tool_call>')
    assert no_name.kind == "format" and "no tool name" in no_name.message
    not_obj = only_error('<tool_call>{"name": "add", "arguments": [1, 2]}</tool_call>')
    assert "arguments of add must be a JSON object" in not_obj.message
    bad_entry = only_error({"role": "assistant", "tool_calls": ["add(1, 2)"]})
    assert bad_entry.kind == "format" and '"function" object' in bad_entry.message


def test_good_calls_and_errors_keep_their_order():
    text = "<echo>a</echo><tool_call>{oops}</tool_call><echo>b</echo>"
    kinds = [type(i).__name__ for i in parse(text).items]
    assert kinds == ["ToolCall", "MalformedCall", "ToolCall"]


def test_non_string_actions_do_not_raise():
    assert parse(None).answer == ""
    assert parse(42).answer == "42"


def test_signature_shows_types_and_defaults():
    assert signature(search) == "search(query: string, k: integer = 3)"


def test_json_nested_too_deeply_is_a_json_error():
    deep = only_error("<tool_call>" + "[" * 100_000 + "</tool_call>")
    assert deep.kind == "json" and "nested too deeply" in deep.message


# -- the call formats real models write (default formats) ---------------------------------------

QUERY = {"query": "Dunmere Company"}
SEARCH_JSON = json.dumps({"name": "search", "arguments": QUERY})

#: (shape, text or message) -> each is run as the search call above
RUN = [
    ("hermes/qwen tags", f"<tool_call>\n{SEARCH_JSON}\n</tool_call>"),
    ("hermes, arguments as a string", json.dumps({"name": "search", "arguments": json.dumps(QUERY)}).join(["<tool_call>", "</tool_call>"])),
    ("bare json", SEARCH_JSON),
    ("bare json after prose", f"I need to look this up first.\n{SEARCH_JSON}"),
    ("json fence", f"Let me search.\n```json\n{SEARCH_JSON}\n```"),
    ("bare fence", f"```\n{SEARCH_JSON}\n```"),
    ("json list", f"[{SEARCH_JSON}]"),
    ("llama 3.1 parameters", json.dumps({"name": "search", "parameters": QUERY})),
    ("openai wire form as text", json.dumps({"type": "function", "function": {"name": "search", "arguments": json.dumps(QUERY)}})),
    ("python dict", "{'name': 'search', 'arguments': {'query': 'Dunmere Company'}}"),
    ("llama <function=>", '<function=search>{"query": "Dunmere Company"}</function>'),
    ("llama <function=> unclosed", '<function=search>{"query": "Dunmere Company"}'),
    ("mistral list", f"[TOOL_CALLS] [{SEARCH_JSON}]"),
    ("mistral named", '[TOOL_CALLS]search[ARGS]{"query": "Dunmere Company"}'),
    ("pythonic", 'search(query="Dunmere Company")'),
    ("pythonic list", '[search(query="Dunmere Company")]'),
    ("pythonic positional", 'search("Dunmere Company")'),
    ("tag", "<search>Dunmere Company</search>"),
    ("openai tool_calls", {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "search", "arguments": json.dumps(QUERY)}}]}),
    ("reasoning then bare json", f"<think>which tool?</think>{SEARCH_JSON}"),
]  # fmt: skip

#: (shape, text, error kind) -> each is answered with a message, never taken as the answer
MESSAGE = [
    ("bare json cut short", '{"name": "search", "arguments": {"query": "Dunmere"}', "json"),
    ("json naming an unknown tool", '{"name": "lookup", "arguments": {"q": "x"}}', "unknown_tool"),
    ("json with flat arguments", '{"tool": "search", "query": "Dunmere"}', "ambiguous"),
    ("json with extra keys", '{"name": "search", "query": "x", "arguments": {}}', "ambiguous"),
    ("json with wrong arguments", '{"name": "search", "arguments": {"q": "x"}}', "arguments"),
    ("llama with broken json", "<function=search>{query: x}</function>", "json"),
    ("llama unknown tool", '<function=lookup>{"q": 1}</function>', "unknown_tool"),
    ("mistral without calls", "[TOOL_CALLS] nothing", "format"),
    ("pythonic with a variable", "search(query=q)", "arguments"),
    ("hermes unclosed", f"<tool_call>{SEARCH_JSON}", "unclosed"),
    ("openai broken arguments", {"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "search", "arguments": "{"}}]}, "json"),
]  # fmt: skip

#: (shape, text) -> final answers, even when they are JSON
ANSWER = [
    ("plan in a json fence", '```json\n[{"time": "2025-06-01", "city": "Seville", "hotel": "B"}]\n```'),
    ("plan as bare json", '[{"time": "2025-06-01", "city": "Florence", "hotel": ""}]'),
    ("object with a name that is no tool", '{"name": "Paris", "population": 2100000}'),
    ("basket items", '[{"name": "milk", "quantity": 2}, {"name": "rice", "quantity": 1}]'),
    ("boxed", "The answer is \\boxed{Paris}."),
    ("prose naming the tool", "I would search for it, but I know it: Paris."),
    ("code answer", "def search(query):\n    return query\n"),
]  # fmt: skip


def parse_default(action):
    return parse_action(action, TOOLS)


@pytest.mark.parametrize("shape,action", RUN, ids=[r[0] for r in RUN])
def test_every_known_call_shape_is_run(shape, action):
    parsed = parse_default(action)
    assert parsed.answer is None and parsed.errors == [], (shape, parsed.items)
    (call,) = parsed.calls
    assert (call.name, call.arguments) == ("search", QUERY)
    assert call.args is not None and call.args.query == "Dunmere Company"


@pytest.mark.parametrize("shape,action,kind", MESSAGE, ids=[m[0] for m in MESSAGE])
def test_broken_or_ambiguous_call_shapes_get_a_message(shape, action, kind):
    parsed = parse_default(action)
    assert parsed.answer is None and parsed.calls == [], (shape, parsed.items)
    (error,) = parsed.errors
    assert error.kind == kind
    # the message shows what to write instead (or which tools exist)
    assert any(w in error.message for w in ("Expected", "Available tools", "write", "must be"))


@pytest.mark.parametrize("shape,action", ANSWER, ids=[a[0] for a in ANSWER])
def test_json_answers_and_prose_stay_final_answers(shape, action):
    parsed = parse_default(action)
    assert parsed.items == [] and parsed.answer == action


def test_two_bare_json_calls_and_prose_keep_their_order():
    add_json = json.dumps({"name": "add", "arguments": {"a": 1, "b": 2}})
    parsed = parse_default(
        f'First {SEARCH_JSON}, then <function=add>{{"a": 3, "b": 4}}</function> and {add_json}'
    )
    assert [(c.name, c.format) for c in parsed.calls] == [
        ("search", "json"),
        ("add", "llama"),
        ("add", "json"),
    ]


def test_a_json_call_inside_a_hermes_block_is_parsed_once():
    parsed = parse_default(f"<tool_call>{SEARCH_JSON}</tool_call>")
    assert [c.format for c in parsed.calls] == ["hermes"]


def test_the_old_formats_alone_still_take_bare_json_as_the_answer():
    assert parse(SEARCH_JSON).answer == SEARCH_JSON


@pytest.mark.parametrize(
    "junk",
    [
        '{"name": "x", ' * 20_000,
        "{'name': 'search', " * 20_000,
        '{"name": "x' + ' {"name": "x' * 20_000,
        '{"name": "search", "arguments": {"code": "' + "a" * 300_000,
        "<function=search>" * 20_000,
        "[TOOL_CALLS]search[ARGS]" * 20_000,
        "[search(" * 5_000,
    ],
    ids=["keys", "python-keys", "open-strings", "long-string", "llama", "mistral", "pythonic"],
)
def test_junk_built_to_start_many_decodes_is_parsed_in_linear_work(junk):
    # no timing assert: the answer must come back, and never as a crash or a hang
    parsed = parse_default(junk)
    assert parsed.calls == [] or len(parsed.items) <= 1
