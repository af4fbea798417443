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

The package, one concern a file: `model` (what a parse returns), `describe` (a tool as the
model sees it), `check` (a found call checked against its tool), `scan` (what the scanners
share), one file per format family (`markers`: tag, Hermes, fence, Llama, Mistral;
`json_calls`; `pythonic`; `messages`: OpenAI `tool_calls`) and `parse`, which runs them.
"""

from __future__ import annotations

from gemkit.tools.calls.check import summarize_validation
from gemkit.tools.calls.describe import example_call, signature, tag_field, tool_map
from gemkit.tools.calls.model import DEFAULT_FORMATS, FORMATS, MalformedCall, ParsedAction, ToolCall
from gemkit.tools.calls.parse import is_code_for_python, parse_action, parse_text, strip_reasoning

__all__ = [
    "DEFAULT_FORMATS",
    "FORMATS",
    "MalformedCall",
    "ParsedAction",
    "ToolCall",
    "example_call",
    "is_code_for_python",
    "parse_action",
    "parse_text",
    "signature",
    "strip_reasoning",
    "summarize_validation",
    "tag_field",
    "tool_map",
]
