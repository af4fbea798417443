"""gemkit eval and both synth modes, run against a real small model's recorded replies.

The replay server answers each request with what Qwen2.5-Coder-0.5B replied to the same (or
the most similar) request. Each run must finish without a crash, run or answer every call
shape the model wrote, and keep no record whose text drifted from its logical form.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gemkit.cli import main as cli
from gemkit.llm.token_counters import HeuristicTokenCounter
from gemkit.synth.qa.agent import world_refs
from gemkit.synth.qa.verify import check_text
from gemkit.synth.world import build_world
from gemkit.testing import ReplayOpenAIServer
from gemkit.tools.base import Tool, ToolResult
from gemkit.tools.calls import DEFAULT_FORMATS, is_code_for_python, parse_action
from gemkit.tools.search import SearchTool
from gemkit.wrappers.context import SUMMARY_PROMPT

FIXTURES = Path(__file__).resolve().parents[1] / "data" / "real-model"
EVAL = sorted(FIXTURES.glob("eval-*.jsonl"))

#: fixture -> (env id, extra eval arguments it was recorded with)
RUNS = {
    "e1_math": ("math:Builtin-v0", []),
    "e2_gtn": ("game:GuessTheNumber-v0-easy", []),
    "e3_qa": ("qa:Builtin-v0", ["--tools", "search"]),
    "e4_trip": ("toolworld:TripPlanning-v0", []),
    "e9_summary": (
        "game:GuessTheNumber-v0-easy",
        # recorded with --max-context 300 and a 1024-token summary budget: each summary
        # request held the whole chat, past that window; 600 leaves room for a summary
        ["--context", "summary", "--max-context", "600", "--max-tokens", "128"],
    ),
    # llama.cpp, 2026-12-03: ```python blocks without an answer (run as calls), bare JSON calls
    "e10_math_python": ("math:Builtin-v0", ["--tools", "python", "--max-tokens", "400"]),
}


def calls_in(action, tools: list[Tool]):
    """The call attempts `ToolEnvWrapper` finds in a reply (a ```python block without an
    answer included, where a python tool is offered)."""
    parsed = parse_action(action, tools)
    text = action if isinstance(action, str) else ""
    if not parsed.has_calls and is_code_for_python(text, tools):
        parsed = parse_action(action, tools, (*DEFAULT_FORMATS, "fence"))
    return parsed


def rows(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "episodes.jsonl").read_text().splitlines()]


class Named(Tool):
    """A stand-in for a tool the recording's prompt offered (only its name matters here)."""

    parallel_safe = True

    def __init__(self, name: str):
        from pydantic import BaseModel, ConfigDict

        class Any_(BaseModel):
            model_config = ConfigDict(extra="allow")

        self.name, self.Args = name, Any_  # type: ignore[misc]

    async def call(self, args):  # pragma: no cover - never run
        return ToolResult("")


def offered_tools(observation) -> list[Tool]:
    """The tools a recorded prompt lists in its <tools> block."""
    text = json.dumps(observation)
    block = text.split("<tools>")[-1].split("</tools>")[0] if "<tools>" in text else ""
    return [Named(n) for n in dict.fromkeys(re.findall(r'\\"name\\": \\"(\w+)\\"', block))]


@pytest.mark.parametrize("name", list(RUNS))
def test_eval_against_recorded_replies_runs_or_answers_every_reply(tmp_path, name):
    env_id, extra = RUNS[name]
    with ReplayOpenAIServer(EVAL) as srv:
        code = cli(
            ["eval", env_id, "--base-url", srv.base_url, "--model", "qwen", "-n", "3",
             "--concurrency", "1", "--out", str(tmp_path), *extra]
        )  # fmt: skip
        bodies = [r.body for r in srv.answered]
    assert code == 0
    episodes = rows(tmp_path)
    assert len(episodes) == 3 and all(e["error"] is None for e in episodes)
    for e in episodes:
        for t in e["turns"]:
            tools = offered_tools(t["observation"])
            parsed = calls_in(t["action"], tools)
            # a call attempt was run or answered with a message; anything else was the answer
            assert bool(t["info"].get("tool_calls")) == parsed.has_calls
            if not parsed.has_calls:
                assert t["terminated"] or t["truncated"] or "turn" in t["info"]
    if name == "e3_qa":
        # the recording's prompt lost the tool instructions; now they reach the model
        assert all("# Tools" in b["messages"][0]["content"] for b in bodies)
    if name == "e9_summary":
        summaries = [b for b in bodies if b["messages"][-1]["content"] == SUMMARY_PROMPT]
        assert summaries and all(1 <= b["max_tokens"] < 1024 for b in summaries)
        counter = HeuristicTokenCounter()  # the replay server has no /tokenize
        assert all(
            counter.count_messages(b["messages"]) + b["max_tokens"] <= 600 for b in summaries
        )
        assert all(sum(r["tokens"].values()) > 0 for r in episodes)


def test_every_recorded_eval_reply_is_a_call_a_message_or_an_answer():
    shapes = {"call": 0, "message": 0, "answer": 0, "json_answer": 0}
    for path in EVAL:
        for line in path.read_text().splitlines():
            for t in json.loads(line)["turns"]:
                parsed = calls_in(t["action"], offered_tools(t["observation"]) or [SearchTool])
                action = t["action"].strip()
                if parsed.calls:
                    shapes["call"] += 1
                elif parsed.errors:
                    shapes["message"] += 1
                elif action.startswith(("[", "{", "```")):
                    shapes["json_answer"] += 1  # trip plans: a list of days, not a call
                else:
                    shapes["answer"] += 1
    # e10 (--tools python): 6 replies of bare JSON calls; 2 ```python blocks without an answer,
    # call attempts (errors here only because the stand-in tools have no `code` argument: the
    # run's python tool ran them); and `{code:"..."}`, which names no tool and is no JSON,
    # graded as the answer it reads as
    assert shapes == {"call": 6, "message": 2, "answer": 51, "json_answer": 7}


def test_synth_qa_llm_against_recorded_replies_keeps_no_drifted_record(tmp_path, capsys):
    recording = FIXTURES / "synth-qa-exchanges.jsonl"
    with ReplayOpenAIServer([recording]) as srv:
        code = cli(["synth", "qa", "--llm", srv.base_url, "--model", "qwen", "-n", "1",
                    "--out", str(tmp_path)])  # fmt: skip
        coverage = srv.replay.coverage()
        replay = srv.replay
    assert code == 0
    # the recording was made before the seeds lost their redundant clauses and the realizer
    # varied their wording (issue #18), and before every seed clause had to do work (#28),
    # so no request now matches a recorded one exactly (6 of 82 after #18, 20+ before); each
    # is still answered by a real reply of the same kind
    assert coverage["nearest"] >= 40 and coverage["recordings_used"] >= 40, coverage
    drifted = "In which city did Pouharn Propim work for Doukirnvel Works and was born in 1928?"
    served = {s.exchange for s in replay.served}
    drift_replies = {i for i, e in enumerate(replay.exchanges) if "Pouharn" in str(e.reply.content)}
    assert drift_replies & served, "the run never met the model's drifted rewrite"
    records = tmp_path / "qa.jsonl"  # made with the first record kept
    kept = [json.loads(x) for x in records.read_text().splitlines()] if records.exists() else []
    shown = capsys.readouterr().out.replace("\n", "")
    if not kept:  # the summary names no record file it did not write
        assert "records:" not in shown and "no record kept" in shown, shown[-300:]
    assert drifted not in {r["question"] for r in kept}, "the recorded run kept this one"
    if kept:
        world = build_world(10_000, 0)
        for r in kept:
            support = [
                {**s, "fact": i}
                for s in r["supporting_facts"]
                for i in world.sentence_facts.get((s["doc_id"], s["text"]), [])
            ]
            verdict = check_text(
                r["question"], r["logical_form"], support, world, world_refs(world)
            )
            assert verdict["passed"], verdict["problems"]
    rejected = (tmp_path / "rejected.jsonl").read_text()
    assert "text and logical form disagree" in rejected


def test_synth_tasks_llm_against_recorded_replies_ends_and_logs_its_progress(tmp_path):
    recording = FIXTURES / "synth-tasks-exchanges.jsonl"
    with ReplayOpenAIServer([recording]) as srv:
        code = cli(["synth", "tasks", "--llm", srv.base_url, "--model", "qwen", "-n", "1",
                    "--k", "0", "--max-level", "1", "--no-export", "--out", str(tmp_path)])  # fmt: skip
        requests = len(srv.answered)
        shapes = [len(r.body["messages"]) for r in srv.answered]
    assert code == 0
    rejected = [json.loads(x) for x in (tmp_path / "rejected.jsonl").read_text().splitlines()]
    assert len(rejected) == 3, "at most 3N task ids"
    assert requests <= 3 * 4, "each conversation ends within 1 + max_repairs replies"
    assert set(shapes) <= {2, 4}, "a request holds the first ask and the last exchange only"
    ended = [r["reason"] for r in rejected]
    endings = ("a program it had already sent, again", "no level-1 program verified in 3 repairs")
    assert all(x.endswith(endings) for x in ended), ended
    log = (tmp_path / "progress.log").read_text().splitlines()
    assert len(log) >= requests and any("the program cannot run" in x for x in log)
