"""`gemkit eval --context`: every model call counted, summaries on their own budget, and a
strategy that cannot act says so."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from gemkit.cli import main as cli
from gemkit.envs.games.guess_the_number import GuessTheNumberExpert
from gemkit.llm import HeuristicTokenCounter, LLMClient, LLMPolicy
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


PADDING = " ".join(["hmm"] * 100)


def wordy_model(request: dict) -> str:
    """100 words of thinking aloud, then the turn's number as the guess (8 turns: a long chat)."""
    messages = request["messages"]
    if messages[-1]["content"] == SUMMARY_PROMPT:
        return SUMMARY
    return f"{PADDING} {sum(m['role'] == 'user' for m in messages)}"


def test_summaries_are_counted_and_have_their_own_budget_within_the_window(tmp_path):
    # the summary request holds the whole chat: its budget is the window's room, never the
    # 1024 --max-summary-tokens asks for past a 1000-token window, nor the policy's
    with ScriptedOpenAIServer(wordy_model) as srv:
        code = run_eval(
            srv, tmp_path, "--context", "summary", "--max-context", "1000", "--max-tokens", "150"
        )
        bodies = [r.body for r in srv.answered]
    assert code == 0
    summaries = [b for b in bodies if b["messages"][-1]["content"] == SUMMARY_PROMPT]
    moves = [b for b in bodies if b["messages"][-1]["content"] != SUMMARY_PROMPT]
    assert summaries and moves
    assert {b["max_tokens"] for b in moves} == {150}
    episodes = rows(tmp_path)
    edits = [e for r in episodes for t in r["turns"] for e in t["info"].get("context_edits", [])]
    assert len(edits) == len(summaries), "every summary call is one recorded edit"
    counter = HeuristicTokenCounter()  # the scripted server has no /tokenize
    for body, edit in zip(summaries, edits, strict=True):
        assert body["max_tokens"] == edit["summary_budget"]
        assert 1 <= edit["summary_budget"] < 1024
        assert counter.count_messages(body["messages"]) + body["max_tokens"] <= 1000
        # the 14-word summary is whole where its budget holds it, cut and flagged where not
        assert edit["summary_truncated"] is (edit["summary_budget"] < 14)
    notes = {e["inserted_messages"][0]["message"]["content"] for e in edits}
    assert all(SUMMARY[:9] in n for n in notes)  # whole, or cut at its budget
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
    assert stats["mean_summary_tokens"] > 0
    assert stats["summaries_truncated"] == sum(e["summary_truncated"] for e in edits)


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
