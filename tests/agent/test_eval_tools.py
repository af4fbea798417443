"""`gemkit eval --tools`: the exact messages a model server receives on every turn.

A scripted OpenAI-protocol server plays the model: it calls the tool once, then answers. Each
test checks the whole request of each turn: the question with the tool instructions (or the
native `tools=` list), then the question, the call and its result, in order.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gemkit.cli import main as cli
from gemkit.testing import Reply, ScriptedOpenAIServer
from gemkit.tools.instructions import tool_instructions
from gemkit.tools.python import PythonTool

bwrap = pytest.importorskip("shutil").which("bwrap")

CODE = "print(6 * 7)"


def rows(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "episodes.jsonl").read_text().splitlines()]


def eval_once(server: ScriptedOpenAIServer, env_id: str, tools: str, out: Path, *extra: str) -> int:
    return cli(
        [
            "eval", env_id, "--base-url", server.base_url, "--model", "m", "-n", "1",
            "--concurrency", "1", "--tools", tools, "--out", str(out), *extra,
        ]
    )  # fmt: skip


def tools_text(tools: list) -> str:
    """The instructions `ToolEnvWrapper` appends to the task for these tools (10 calls)."""
    return "\n\n" + tool_instructions(tools, max_tool_uses=10)


def python_schema() -> dict:
    return PythonTool().openai_schema()


@pytest.mark.skipif(bwrap is None, reason="the python tool's sandbox needs bubblewrap (bwrap)")
def test_eval_tools_python_sends_instructions_question_call_and_result_in_order(tmp_path):
    call = '<tool_call>{"name": "python", "arguments": {"code": "' + CODE + '"}}</tool_call>'
    with ScriptedOpenAIServer([call, "The answer is \\boxed{42}."]) as srv:
        assert eval_once(srv, "math:Builtin-v0", "python", tmp_path) == 0
        bodies = [r.body for r in srv.chat_requests]
    assert len(bodies) == 2
    first, second = bodies
    question = first["messages"][0]["content"].split("\n\n# Tools")[0]
    task = question + tools_text([PythonTool()])
    assert first["messages"] == [{"role": "user", "content": task}]
    assert "tools" not in first, "prompt-text tools send no native tools= list"
    assert second["messages"] == [
        {"role": "user", "content": task},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_0",
                    "type": "function",
                    "function": {"name": "python", "arguments": json.dumps({"code": CODE})},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_0", "name": "python", "content": "42"},
    ]
    (row,) = rows(tmp_path)
    assert row["num_turns"] == 2 and row["tool_calls"] == 1
    assert row["turns"][-1]["terminated"] is True


@pytest.mark.skipif(bwrap is None, reason="the python tool's sandbox needs bubblewrap (bwrap)")
def test_eval_tools_python_native_sends_the_tools_list_and_keeps_the_call_id(tmp_path):
    script = [
        Reply(tool_calls=[{"id": "abc", "name": "python", "arguments": {"code": CODE}}]),
        "\\boxed{42}",
    ]
    with ScriptedOpenAIServer(script) as srv:
        code = eval_once(srv, "math:Builtin-v0", "python", tmp_path, "--tool-format", "native")
        assert code == 0
        bodies = [r.body for r in srv.chat_requests]
    first, second = bodies
    question = first["messages"][0]["content"]
    assert "# Tools" not in question, "native tools are not described again in the prompt"
    assert first["messages"] == [{"role": "user", "content": question}]
    assert first["tools"] == second["tools"] == [python_schema()]
    assert second["messages"] == [
        {"role": "user", "content": question},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "abc",
                    "type": "function",
                    "function": {"name": "python", "arguments": json.dumps({"code": CODE})},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "abc", "name": "python", "content": "42"},
    ]


def search_reply(request: dict) -> Reply | str:
    """Search for the question once, then answer with the first result's title."""
    messages = request["messages"]
    if messages[-1]["role"] != "tool":
        question = messages[-1]["content"].split("\n")[0]
        args = {"query": question}
        if request.get("tools"):
            return Reply(tool_calls=[{"name": "search", "arguments": args}])
        return "<tool_call>" + json.dumps({"name": "search", "arguments": args}) + "</tool_call>"
    return "\\boxed{I do not know}"


@pytest.mark.parametrize("fmt", ["text", "native"])
def test_eval_tools_search_sends_question_call_and_result_in_order(tmp_path, fmt):
    with ScriptedOpenAIServer(search_reply) as srv:
        assert eval_once(srv, "qa:Builtin-v0", "search", tmp_path, "--tool-format", fmt) == 0
        bodies = [r.body for r in srv.chat_requests]
    assert len(bodies) == 2
    first, second = bodies
    task = first["messages"][0]["content"]
    question = task.split("\n")[0]
    (row,) = rows(tmp_path)
    result = row["turns"][0]["info"]["tool_results"][0]
    assert result["name"] == "search" and not result["is_error"]
    assert result["content"].startswith("1. "), "numbered search results came back"
    if fmt == "text":
        assert "# Tools" in task and '"name": "search"' in task
        assert "tools" not in first
    else:
        assert "# Tools" not in task
        assert [t["function"]["name"] for t in first["tools"]] == ["search"]
    assert first["messages"] == [{"role": "user", "content": task}]
    call_id = second["messages"][1]["tool_calls"][0]["id"]
    assert second["messages"] == [
        {"role": "user", "content": task},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": "search", "arguments": json.dumps({"query": question})},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call_id, "name": "search", "content": result["content"]},
    ]
    assert row["num_turns"] == 2 and row["tool_calls"] == 1


def test_native_mode_reports_calls_the_server_left_in_the_text_and_sends_tool_choice(
    tmp_path, capsys
):
    # a real Qwen2.5-Coder-0.5B behind vLLM's hermes parser writes bare JSON: the parser
    # leaves it in the content and gemkit's text fallback runs it; the report must say so
    bare = '{"name": "search", "arguments": {"query": "capital"}}'
    with ScriptedOpenAIServer([bare, "\\boxed{I do not know}"]) as srv:
        code = eval_once(
            srv, "qa:Builtin-v0", "search", tmp_path, "--tool-format", "native",
            "--tool-choice", "required",
        )  # fmt: skip
        bodies = [r.body for r in srv.chat_requests]
    assert code == 0
    assert all(b["tool_choice"] == "required" for b in bodies)
    summary = json.loads((tmp_path / "summary.json").read_text())
    (s,) = [v for k, v in summary.items() if k.startswith("qa:")] or [summary]
    assert s["native_tool_calls"] == 0 and s["text_tool_calls"] == 1
    out = capsys.readouterr().out
    assert "1 of 1 tool calls came as text" in " ".join(out.split())


def test_tool_choice_without_native_tools_is_refused_in_one_line(tmp_path, capsys):
    with ScriptedOpenAIServer([]) as srv:
        code = eval_once(srv, "qa:Builtin-v0", "search", tmp_path, "--tool-choice", "required")
    err = capsys.readouterr()
    assert code != 0
    assert "--tool-choice required needs --tool-format native" in err.out + err.err
    assert "Traceback" not in err.out + err.err
