"""`gemkit filter`: k tool-free and k tool-using attempts per item, against a scripted model.

The scripted model's replies fix each item's accuracies: per item it knows how often it
answers right with tools, in how many tool turns, and whether it answers without them, so
every keep-or-drop verdict is known before the run.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gemkit.cli import main
from gemkit.errors import GemkitError
from gemkit.synth.difficulty_filter import (
    SYSTEM,
    FilterConfig,
    FilterError,
    drop_kind,
    run_filter,
)
from gemkit.synth.qa.run import RunConfig, run
from gemkit.testing import Reply, ScriptedOpenAIServer

K = 8
#: item -> (tool-using attempts that answer right, tool turns they take, right without tools)
PLAN = {0: (8, 2, False), 1: (0, 2, False), 2: (2, 2, False), 3: (2, 1, False), 4: (3, 3, True)}
EXPECTED = {
    0: "too easy",
    1: "never solved",
    2: None,  # kept: 2/8 with tools, two tool turns, never without
    3: "one tool turn",
    4: "solved without tools",
}


@pytest.fixture(scope="module")
def qa_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("qa")
    run(out, RunConfig(n=5, world_size=400, seed=1, min_inject=1, min_fuzz=1), export=False)
    return out


def scripted(folder: Path):
    """A model that follows `PLAN` for the records of `folder` (attempts told apart by number)."""
    records = [json.loads(x) for x in (folder / "qa.jsonl").read_text().splitlines()]
    by_question = {r["question"]: (i, r["answer"]) for i, r in enumerate(records)}
    started: dict[tuple[int, bool], int] = {}

    def reply(body: dict):
        messages = body["messages"]
        first = next(m["content"] for m in messages if m["role"] == "user")
        item, answer = next(v for q, v in by_question.items() if q in first)
        right, turns, closed_book_right = PLAN[item]
        if messages[0]["content"] == SYSTEM["closed_book"]:
            return f"\\boxed{{{answer if closed_book_right else 'Nobody'}}}"
        history = json.dumps(messages)  # the queries ride in the calls' arguments
        seen = re.findall(r"attempt (\d+)", history)
        if not seen:  # a new attempt: number it, and carry the number in its queries
            n = started.get((item, True), 0)
            started[(item, True)] = n + 1
        else:
            n = int(seen[0])
        calls = sum(m["role"] == "tool" for m in messages)
        if calls < turns:
            query = f"attempt {n} step {calls}"
            return Reply(tool_calls=[{"name": "search", "arguments": {"query": query}}])
        return f"\\boxed{{{answer if n < right else 'Nobody'}}}"

    return reply


def test_the_filter_keeps_what_is_hard_but_solvable_with_tools(qa_folder, tmp_path):
    with ScriptedOpenAIServer(scripted(qa_folder)) as srv:
        config = FilterConfig(
            str(qa_folder), str(tmp_path / "f"), srv.base_url, "m", k=K, concurrency=4
        )
        summary = run_filter(config)
    got = {v["item"]: v for v in summary.verdicts}
    assert {i: None if v["kept"] else drop_kind(v["reason"]) for i, v in got.items()} == EXPECTED
    assert got[2]["tool_accuracy"] == 0.25 and got[2]["min_tool_turns"] == 2
    assert got[0]["tool_accuracy"] == 1.0 and got[1]["tool_accuracy"] == 0.0
    assert got[4]["closed_book_accuracy"] == 1.0
    assert summary.dropped == {
        "too easy": 1,
        "never solved": 1,
        "one tool turn": 1,
        "solved without tools": 1,
    }
    kept = [json.loads(x) for x in (tmp_path / "f" / "qa.jsonl").read_text().splitlines()]
    source = [json.loads(x) for x in (qa_folder / "qa.jsonl").read_text().splitlines()]
    assert kept == [source[2]]  # the record itself, unchanged
    assert (tmp_path / "f" / "corpus.jsonl").read_text() == (qa_folder / "corpus.jsonl").read_text()
    attempts = (tmp_path / "f" / "attempts.jsonl").read_text().splitlines()
    assert len(attempts) == 5 * 2 * K


def test_the_kept_folder_plays_as_a_qa_env(qa_folder, tmp_path):
    import gemkit

    with ScriptedOpenAIServer(scripted(qa_folder)) as srv:
        run_filter(FilterConfig(str(qa_folder), str(tmp_path / "f"), srv.base_url, "m", k=K))
    env = gemkit.make("qa:Synth-v0", path=str(tmp_path / "f"))
    obs, _ = env.reset(seed=0)
    assert json.loads((qa_folder / "qa.jsonl").read_text().splitlines()[2])["question"] in obs


def test_a_resumed_filter_plays_only_the_missing_attempts(qa_folder, tmp_path):
    out = tmp_path / "f"
    with ScriptedOpenAIServer(scripted(qa_folder)) as srv:
        first = run_filter(FilterConfig(str(qa_folder), str(out), srv.base_url, "m", k=K))
        lines = (out / "attempts.jsonl").read_text().splitlines()
        # as a kill would leave it: the last 7 attempts never written, the verdicts not yet
        (out / "attempts.jsonl").write_text("\n".join(lines[:-7]) + "\n")
        (out / "verdicts.jsonl").write_text("")
        before = len(srv.requests)
        again = run_filter(FilterConfig(str(qa_folder), str(out), srv.base_url, "m", k=K))
    assert again.attempts_played == 7 and again.attempts_resumed == len(lines) - 7
    assert len(srv.requests) > before
    assert [v["kept"] for v in again.verdicts] == [v["kept"] for v in first.verdicts]


def test_other_settings_on_the_same_folder_are_refused(qa_folder, tmp_path):
    out = tmp_path / "f"
    with ScriptedOpenAIServer(scripted(qa_folder)) as srv:
        run_filter(FilterConfig(str(qa_folder), str(out), srv.base_url, "m", k=2))
        with pytest.raises(GemkitError, match="settings"):
            run_filter(FilterConfig(str(qa_folder), str(out), srv.base_url, "m", k=3))


def test_a_task_folder_is_filtered_through_the_toolworld_env(tmp_path):
    from gemkit.synth.tasks.run import RunConfig as TaskConfig
    from gemkit.synth.tasks.run import run_synthesis

    tasks = tmp_path / "tasks"
    run_synthesis(TaskConfig(n=2, out=tasks, min_level=1, max_level=1, k=0, export=False))
    records = [json.loads(x) for x in (tasks / "tasks.jsonl").read_text().splitlines()]

    def reply(body: dict):
        if body["messages"][0]["content"] == SYSTEM["closed_book"]:
            return "[]"  # no plan without the database
        if not any(m["role"] == "tool" for m in body["messages"]):
            return Reply(tool_calls=[{"name": "get_all_cities", "arguments": {}}])
        prompt = body["messages"][1]["content"]
        record = next(r for r in records if r["task"]["prompt"] in prompt)
        plan = record["reference_answer"]
        return Reply(tool_calls=[{"name": "submit_result", "arguments": {"plan": plan}}])

    with ScriptedOpenAIServer(reply) as srv:
        summary = run_filter(FilterConfig(str(tasks), str(tmp_path / "f"), srv.base_url, "m", k=2))
    # the reference plan after one look-up: always right, in two tool turns: too easy
    assert [v["tool_accuracy"] for v in summary.verdicts] == [1.0, 1.0]
    assert [v["closed_book_accuracy"] for v in summary.verdicts] == [0.0, 0.0]
    assert summary.dropped == {"too easy": 2}
    assert (tmp_path / "f" / "db").is_symlink()


def test_a_folder_that_is_no_dataset_is_one_clear_line(tmp_path, capsys):
    assert (
        main(
            [
                "filter",
                str(tmp_path),
                "--out",
                str(tmp_path / "f"),
                "--llm",
                "http://127.0.0.1:9/v1",
                "--model",
                "m",
            ]
        )
        == 2
    )
    err = capsys.readouterr().out
    assert "is not a dataset to filter" in err and "Traceback" not in err
    with pytest.raises(FilterError, match="max-accuracy"):
        FilterConfig(str(tmp_path), str(tmp_path), "u", "m", max_accuracy=0)


@pytest.mark.parametrize("flag", ["--k", "--concurrency", "--max-tokens", "--limit"])
def test_a_count_of_zero_is_a_usage_error(tmp_path, capsys, flag):
    argv = ["filter", str(tmp_path), "--out", str(tmp_path / "f"), "--llm", "http://127.0.0.1:9/v1",
            "--model", "m", flag, "0"]  # fmt: skip
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2 and "expected a number >= 1" in capsys.readouterr().err
    assert not (tmp_path / "f").exists()


# -- the episode shape: the one `gemkit eval` plays -------------------------------------------


def _search_then_answer(body: dict):
    """One search, then a wrong answer: enough to see how the tool result comes back."""
    if any(m["role"] == "tool" for m in body["messages"]) or "[tool result" in json.dumps(body):
        return "\\boxed{Nobody}"
    return Reply(tool_calls=[{"name": "search", "arguments": {"query": "anything"}}])


def _bodies(fmt: str, qa_folder: Path, tmp_path: Path) -> list[dict]:
    with ScriptedOpenAIServer(_search_then_answer) as srv:
        run_filter(
            FilterConfig(str(qa_folder), str(tmp_path / fmt), srv.base_url, "m", k=1, limit=1,
                         tool_format=fmt, concurrency=1)
        )  # fmt: skip
        return [r.body for r in srv.chat_requests]


def _tool_mode(bodies: list[dict]) -> list[dict]:
    return [b for b in bodies if b["messages"][0]["content"] == SYSTEM["tools"]]


def test_the_filter_sends_the_tools_once_and_returns_results_as_tool_messages(qa_folder, tmp_path):
    text = _tool_mode(_bodies("text", qa_folder, tmp_path))
    first, after = text[0], text[1]
    # text mode: the tools are in the prompt, and not also in the request's tools= list
    assert "tools" not in first and "search" in first["messages"][1]["content"]
    assert [m["role"] for m in after["messages"]] == ["system", "user", "assistant", "tool"]
    call = after["messages"][2]["tool_calls"][0]
    assert (
        after["messages"][3]["tool_call_id"] == call["id"] and call["function"]["name"] == "search"
    )
    native = _tool_mode(_bodies("native", qa_folder, tmp_path))
    # native mode: the tools= list, and no schema text in the prompt
    assert [t["function"]["name"] for t in native[0]["tools"]] == ["search", "access"]
    assert native[0]["messages"][1]["content"] != first["messages"][1]["content"]
    assert '"name": "search"' not in native[0]["messages"][1]["content"]
    assert [m["role"] for m in native[1]["messages"]] == ["system", "user", "assistant", "tool"]


@pytest.mark.parametrize("fmt", ["text", "native"])
def test_the_filter_and_eval_build_the_same_requests(qa_folder, fmt):
    """One code path: the env and policy eval's own wiring builds send what the filter's do."""
    import argparse
    import asyncio

    from gemkit.cli.eval import _wrappers
    from gemkit.episode_shape import chat_policy, wrapped
    from gemkit.llm import LLMClient
    from gemkit.rollout import run_episode
    from gemkit.synth.difficulty_filter import Pinned, make_env, open_dataset

    data = open_dataset(qa_folder)
    args = argparse.Namespace(tool_format=fmt, system_prompt=SYSTEM["tools"], context="none",
                              max_context=32_000, max_summary_tokens=1024)  # fmt: skip

    async def play(env, srv) -> list[dict]:
        async with LLMClient(base_url=srv.base_url, model="m", max_retries=0) as client:
            await run_episode(Pinned(env, 0), chat_policy(client, fmt), env_id="qa", seed=3)
        return [r.body for r in srv.chat_requests]

    with ScriptedOpenAIServer(_search_then_answer) as srv:
        through_filter = asyncio.run(play(make_env(data, "tools", fmt), srv))
    with ScriptedOpenAIServer(_search_then_answer) as srv:
        eval_env = wrapped(data.make_env(True), _wrappers(args, None))
        through_eval = asyncio.run(play(eval_env, srv))
    assert len(through_filter) == 2 and through_filter == through_eval


def test_a_model_that_solves_nothing_is_said_to_leave_difficulty_unjudged(
    qa_folder, tmp_path, capsys
):
    with ScriptedOpenAIServer(lambda body: "\\boxed{Nobody}") as srv:
        code = main(["filter", str(qa_folder), "--out", str(tmp_path / "f"), "--llm", srv.base_url,
                     "--model", "weak", "--k", "2"])  # fmt: skip
    shown = capsys.readouterr().out.replace("\n", " ")
    assert code == 1
    assert "no tool-using attempt solved any of the 5 items with weak" in " ".join(shown.split())
    assert "cannot judge difficulty" in shown
    summary = json.loads((tmp_path / "f" / "summary.json").read_text())
    assert summary["judged"] is False and summary["solved"] == 0 and summary["kept"] == 0
