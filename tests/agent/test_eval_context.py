"""`gemkit eval --context`: every model call counted, summaries on their own budget, and a
strategy that cannot act says so."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from gemkit.cli import main as cli
from gemkit.envs.games.guess_the_number import GuessTheNumberExpert
from gemkit.llm import LLMClient, LLMPolicy
from gemkit.registry import make
from gemkit.rollout import run_episode
from gemkit.testing import ScriptedOpenAIServer
from gemkit.wrappers import ChatHistory, SummaryContext
from gemkit.wrappers.context import SUMMARY_PROMPT

ENV = "game:GuessTheNumber-v0-easy"
SUMMARY = "I guessed several numbers and narrowed the range; keep searching between the bounds"


def model(request: dict) -> str:
    """Binary search over the chat's feedback; a fixed summary when asked for one."""
    messages = request["messages"]
    if messages[-1]["content"] == SUMMARY_PROMPT:
        return SUMMARY
    expert = GuessTheNumberExpert(low=1, high=20)
    action = ""
    for m in messages:
        if m["role"] == "user":
            action = expert.choose(m["content"])
    return action


def rows(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "episodes.jsonl").read_text().splitlines()]


def run_eval(srv: ScriptedOpenAIServer, out: Path, *extra: str) -> int:
    args = ["eval", ENV, "--base-url", srv.base_url, "--model", "m", "-n", "2"]
    return cli([*args, "--concurrency", "1", "--out", str(out), *extra])


def test_summaries_are_counted_and_not_cut_by_the_policy_budget(tmp_path):
    with ScriptedOpenAIServer(model) as srv:
        code = run_eval(
            srv, tmp_path, "--context", "summary", "--max-context", "120", "--max-tokens", "3"
        )
        bodies = [r.body for r in srv.answered]
    assert code == 0
    summaries = [b for b in bodies if b["messages"][-1]["content"] == SUMMARY_PROMPT]
    moves = [b for b in bodies if b["messages"][-1]["content"] != SUMMARY_PROMPT]
    assert summaries and moves
    assert {b["max_tokens"] for b in summaries} == {1024}
    assert {b["max_tokens"] for b in moves} == {3}
    episodes = rows(tmp_path)
    edits = [e for r in episodes for t in r["turns"] for e in t["info"].get("context_edits", [])]
    assert len(edits) == len(summaries), "every summary call is one recorded edit"
    notes = {e["inserted_messages"][0]["message"]["content"] for e in edits}
    assert all(SUMMARY in n for n in notes) and not any(e["summary_truncated"] for e in edits)
    for r in episodes:
        policy = sum(
            t["usage"]["prompt_tokens"] + t["usage"]["completion_tokens"] for t in r["turns"]
        )
        summary = sum(
            e["usage"]["prompt_tokens"] + e["usage"]["completion_tokens"]
            for t in r["turns"]
            for e in t["info"].get("context_edits", [])
        )
        assert sum(r["tokens"].values()) == policy + summary
        assert r["token_sources"]["summary"]["calls"] == sum(
            len(t["info"].get("context_edits", [])) for t in r["turns"]
        )
    stats = json.loads((tmp_path / "summary.json").read_text())[ENV]
    assert stats["mean_summary_tokens"] > 0 and stats["summaries_truncated"] == 0


def test_discard_on_an_env_without_tools_warns_in_the_run(tmp_path, capsys):
    with ScriptedOpenAIServer(model) as srv:
        code = run_eval(srv, tmp_path, "--context", "discard-75", "--max-context", "60")
    assert code == 0
    out = capsys.readouterr().out
    assert "could not keep the chat within --max-context" in " ".join(out.split())
    stats = json.loads((tmp_path / "summary.json").read_text())[ENV]
    assert stats["context_warnings"] == 2
    reasons = {
        w["reason"].split(":")[0]
        for r in rows(tmp_path)
        for t in r["turns"]
        for w in t["info"].get("context_warnings", [])
    }
    assert reasons == {"over budget and nothing to edit"}


def test_a_policy_that_also_summarises_keeps_its_own_turn_usage():
    async def play() -> tuple:
        async with ScriptedOpenAIServer(model) as srv:
            client = LLMClient(base_url=srv.base_url, model="m")
            policy = LLMPolicy(client)
            env = SummaryContext(
                ChatHistory(make(ENV)), summarizer=policy, max_context=120, template="{summary}"
            )
            episode = await run_episode(env, policy, env_id=ENV, seed=0)
            await client.close()
            return episode, [r.body for r in srv.answered]

    episode, bodies = asyncio.run(play())
    assert episode.error is None
    moves = [b for b in bodies if b["messages"][-1]["content"] != SUMMARY_PROMPT]
    # the server counts prompt words; each turn's usage is its own move's, not a summary's
    expected = [sum(len(m["content"].split()) for m in b["messages"]) for b in moves]
    assert [t.usage["prompt_tokens"] for t in episode.turns] == expected
    assert episode.token_sources["summary"]["calls"] == len(bodies) - len(moves) > 0
