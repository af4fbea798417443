"""The replay server: recorded real-model replies served back, exactly or by similarity."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from gemkit.errors import GemkitError
from gemkit.llm import LLMClient
from gemkit.testing import Exchange, ReplayOpenAIServer, Reply, load_exchanges
from gemkit.wrappers.context import SUMMARY_PROMPT

FIXTURES = Path(__file__).resolve().parents[1] / "data" / "real-model"


def chat(srv: ReplayOpenAIServer, messages: list[dict], **kw) -> object:
    async def go():
        async with LLMClient(base_url=srv.base_url, model="m", max_retries=0) as client:
            return await client.chat(messages, **kw)

    return asyncio.run(go())


def test_every_recording_loads_as_exchanges():
    # the *-probes.jsonl files hold single requests of record_probes.py, tested where used
    runs = [p for p in sorted(FIXTURES.glob("*.jsonl")) if not p.name.endswith("-probes.jsonl")]
    exchanges = load_exchanges(runs)
    kinds = {e.kind[:21] for e in exchanges}
    # 194 qa + 16 tasks + 66 eval turns + 10 summaries + 12 filter + 2 chats of record_tokens.py
    assert len(exchanges) == 300
    assert {"summary", "", "You make trivia quest", "You build tool-use ta"} <= kinds


def test_a_recorded_request_gets_its_recorded_reply_and_usage():
    path = FIXTURES / "synth-qa-exchanges.jsonl"
    row = json.loads(path.read_text().splitlines()[1])
    with ReplayOpenAIServer([path]) as srv:
        response = chat(srv, row["request"]["messages"])
    recorded = row["response"]
    assert response.content == recorded["choices"][0]["message"]["content"]
    assert response.usage.prompt_tokens == recorded["usage"]["prompt_tokens"]
    assert srv.replay.served[0].how == "exact"


def test_a_changed_request_gets_the_reply_to_the_most_similar_one_of_its_kind():
    path = FIXTURES / "synth-tasks-exchanges.jsonl"
    first = json.loads(path.read_text().splitlines()[1])
    messages = first["request"]["messages"]
    changed = [messages[0], {"role": "user", "content": messages[1]["content"] + " Please."}]
    with ReplayOpenAIServer([path]) as srv:
        response = chat(srv, changed)
    served = srv.replay.served[0]
    assert served.how == "nearest" and 0 < served.score < 2
    assert "```python" in response.content, "a program, as the model sent for this prompt"


def test_summary_requests_get_the_recorded_summaries_least_used_first(tmp_path):
    episode = {
        "key": "x#0", "env_id": "x", "turns": [
            {"observation": [{"role": "user", "content": "task"}], "action": "a1", "usage": {},
             "info": {"context_edits": [{"strategy": "summary", "inserted_messages": [
                 {"index": 1, "message": {"role": "user", "content":
                  "Summary of your work on this task so far:\nS1\n\nContinue from here."}}]}]}},
            {"observation": [{"role": "user", "content": "task"}], "action": "a2", "usage": {},
             "info": {"context_edits": [{"strategy": "summary", "inserted_messages": [
                 {"index": 1, "message": {"role": "user", "content": "plain S2"}}]}]}},
        ],
    }  # fmt: skip
    path = tmp_path / "episodes.jsonl"
    path.write_text(json.dumps(episode) + "\n")
    asked = [{"role": "user", "content": "task"}, {"role": "user", "content": SUMMARY_PROMPT}]
    with ReplayOpenAIServer([path]) as srv:
        got = [chat(srv, asked).content for _ in range(3)]
    assert sorted(got[:2]) == ["S1", "plain S2"] and got[2] in ("S1", "plain S2")


def test_replies_are_cut_at_max_tokens_and_objects_can_be_given_directly():
    ex = Exchange([{"role": "user", "content": "q"}], Reply("one two three four"), "inline")
    with ReplayOpenAIServer([ex]) as srv:
        response = chat(srv, [{"role": "user", "content": "q"}], max_tokens=2)
    assert (response.content, response.finish_reason) == ("one two", "length")


def test_unreadable_or_empty_recordings_are_clear_errors(tmp_path):
    with pytest.raises(GemkitError, match="cannot read the recording"):
        load_exchanges([tmp_path / "missing.jsonl"])
    (tmp_path / "empty.jsonl").write_text('{"path": "/health", "status": 200}\nnot json\n')
    with pytest.raises(GemkitError, match="hold no chat exchange"):
        load_exchanges([tmp_path / "empty.jsonl"])
