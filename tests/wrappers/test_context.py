"""Context management: each strategy on small hand-written chats, then protocol properties."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gemkit.core import Env, Wrapper
from gemkit.errors import GemkitError
from gemkit.llm import LLMClient
from gemkit.policy import ScriptedPolicy
from gemkit.testing import ScriptedOpenAIServer
from gemkit.wrappers import (
    ChatHistory,
    DiscardAllContext,
    DiscardContext,
    SummaryContext,
    ThinkingRetention,
    tool_pairing_errors,
)
from gemkit.wrappers.context import discard_turns, drop_old_reasoning, strip_think, tool_turns

# -- hand-written chat pieces ------------------------------------------------------------------

SYS = {"role": "system", "content": "sys"}
TASK = {"role": "user", "content": "task"}


def A(turn: int, calls: int = 1, **extra: Any) -> dict:
    """Assistant message of `turn` calling `calls` tools (ids c<turn>_<j>)."""
    tool_calls = [
        {
            "id": f"c{turn}_{j}",
            "type": "function",
            "function": {"name": "search", "arguments": "{}"},
        }
        for j in range(calls)
    ]
    return {"role": "assistant", "content": None, "tool_calls": tool_calls, **extra}


def T(turn: int, j: int = 0) -> dict:
    """Tool result answering call j of `turn`."""
    return {
        "role": "tool",
        "tool_call_id": f"c{turn}_{j}",
        "name": "search",
        "content": f"r{turn}_{j}",
    }


def U(text: str) -> dict:
    return {"role": "user", "content": text}


def SAY(text: str, **extra: Any) -> dict:
    return {"role": "assistant", "content": text, **extra}


# -- pure edits --------------------------------------------------------------------------------


def test_tool_turns_group_each_call_message_with_all_its_results():
    chat = [SYS, TASK, A(1, 2), T(1, 0), T(1, 1), A(2), T(2), SAY("done"), U("ok")]
    assert tool_turns(chat) == [[2, 3, 4], [5, 6]]
    assert tool_turns(chat, include_plain=True) == [[2, 3, 4], [5, 6], [7, 8]]


def test_discard_75_percent_drops_the_oldest_three_of_four_turns():
    chat = [SYS, TASK, A(1, 2), T(1, 0), T(1, 1), A(2), T(2), A(3), T(3), A(4), T(4)]
    kept, removed = discard_turns(chat, 0.75)
    assert kept == [SYS, TASK, A(4), T(4)]
    assert removed == [2, 3, 4, 5, 6, 7, 8]


def test_discard_75_percent_of_eight_turns_keeps_the_newest_two():
    chat = [TASK] + [m for i in range(1, 9) for m in (A(i), T(i))]
    kept, _ = discard_turns(chat, 0.75)
    assert kept == [TASK, A(7), T(7), A(8), T(8)]


def test_discard_keeps_user_messages_and_plain_answers_between_turns():
    chat = [
        SYS,
        TASK,
        A(1),
        T(1),
        SAY("so far so good"),
        U("hint: try page 2"),
        A(2),
        T(2),
        A(3),
        T(3),
    ]
    kept, removed = discard_turns(chat, 0.75)
    # 3 turns: floor(0.75 * 3) = 2 dropped, the newest kept; the exchange in between stays
    assert kept == [SYS, TASK, SAY("so far so good"), U("hint: try page 2"), A(3), T(3)]
    assert removed == [2, 3, 6, 7]


def test_discard_all_drops_every_turn_but_the_newest():
    chat = [SYS, TASK, A(1), T(1), A(2, 3), T(2, 0), T(2, 1), T(2, 2), A(3), T(3)]
    assert discard_turns(chat, 1.0)[0] == [SYS, TASK, A(3), T(3)]


def test_discard_all_with_keep_last_zero_restarts_from_the_task():
    chat = [SYS, TASK, A(1), T(1), A(2), T(2)]
    assert discard_turns(chat, 1.0, keep_last=0) == ([SYS, TASK], [2, 3, 4, 5])


def test_discard_never_drops_the_only_turn():
    chat = [TASK, A(1), T(1)]
    assert discard_turns(chat, 0.75) == ([TASK, A(1), T(1)], [])


def test_discard_with_plain_turns_drops_old_exchanges_of_a_tool_free_chat():
    chat = [TASK, SAY("1"), U("no"), SAY("2"), U("no"), SAY("3"), U("no"), SAY("4"), U("higher")]
    kept, removed = discard_turns(chat, 0.75, include_plain=True)
    assert kept == [TASK, SAY("4"), U("higher")]
    assert removed == [1, 2, 3, 4, 5, 6]


def test_strip_think_removes_blocks_and_a_prompt_opened_block():
    assert strip_think("<think>plan</think>Answer") == "Answer"
    assert strip_think("a<think>x</think>b<think>y</think>c") == "abc"
    assert strip_think("plan opened by the template</think>\n\nAnswer") == "Answer"
    assert strip_think("no thinking") == "no thinking"


def test_reasoning_is_kept_while_only_tool_results_follow():
    chat = [TASK, A(1, reasoning_content="r1"), T(1), A(2, content="<think>r2</think>"), T(2)]
    assert drop_old_reasoning(chat) == (chat, [])


def test_reasoning_is_dropped_once_a_new_user_message_arrives():
    chat = [
        TASK,
        A(1, reasoning_content="r1"),
        T(1),
        SAY("<think>r2</think>My answer: 3"),
        U("Wrong, try again"),
        A(3, reasoning_content="r3"),
        T(3),
    ]
    new, edited = drop_old_reasoning(chat)
    assert new == [
        TASK,
        A(1),
        T(1),
        SAY("My answer: 3"),
        U("Wrong, try again"),
        A(3, reasoning_content="r3"),
        T(3),
    ]
    assert edited == [1, 3]
    assert chat[1]["reasoning_content"] == "r1", "the input chat is not changed in place"


def test_pairing_check_finds_orphans_and_unanswered_calls():
    assert tool_pairing_errors([TASK, A(1, 2), T(1, 0), T(1, 1)]) == []
    assert tool_pairing_errors([TASK, T(1)]) == [
        "message 1: tool result 'c1_0' answers no open call"
    ]
    assert tool_pairing_errors([TASK, A(1, 2), T(1, 0), U("x")]) == [
        "message 3: calls ['c1_1'] have no result"
    ]
    assert tool_pairing_errors([TASK, A(1)]) == ["end of chat: calls ['c1_0'] have no result"]


# -- wrappers on a small env -------------------------------------------------------------------


class Echo(Env):
    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.n = 0
        return "task", {}

    def step(self, action):
        self.n += 1
        return f"obs{self.n}", 0.0, action == "stop", False, {}


class FakeTools(Wrapper):
    """Answers each `<tool_call>` like ToolEnvWrapper: `info["tool_results"]`, ids t<step>_<j>."""

    def reset(self, *, seed=None, options=None):
        self.calls = 0
        return self.env.reset(seed=seed, options=options)

    def step(self, action):
        names = [
            json.loads(b.split("</tool_call>")[0])["name"] for b in action.split("<tool_call>")[1:]
        ]
        if not names:
            return self.env.step(action)
        self.calls += 1
        results = [
            {
                "tool_call_id": f"t{self.calls}_{j}",
                "name": n,
                "content": f"res{self.calls}",
                "is_error": False,
            }
            for j, n in enumerate(names)
        ]
        return (
            "tool output",
            0.0,
            False,
            False,
            {"tool_results": results, "tool_calls": len(results)},
        )


SEARCH = '<tool_call>\n{"name": "search", "arguments": {}}\n</tool_call>'


def tA(i: int, content: str | None = None) -> dict:
    """The assistant message ChatHistory records for the i-th SEARCH call."""
    call = {"id": f"t{i}_0", "type": "function", "function": {"name": "search", "arguments": "{}"}}
    return {"role": "assistant", "content": content, "tool_calls": [call]}


def tT(i: int) -> dict:
    return {"role": "tool", "tool_call_id": f"t{i}_0", "name": "search", "content": f"res{i}"}


def overhead_only(text: str) -> int:
    """A counter under which every message costs exactly the 4-token overhead."""
    return 0


def stack(wrapper: type, **kwargs: Any) -> Any:
    return wrapper(ChatHistory(FakeTools(Echo())), counter=overhead_only, **kwargs)


def test_discard_context_fires_at_the_trigger_and_records_the_edit():
    env = stack(DiscardContext, max_context=40)  # fires at 0.8 * 40 = 32 tokens = 8 messages
    env.reset()
    for _ in range(3):
        obs, _, _, _, info = env.step(SEARCH)
        assert "context_edits" not in info
    assert len(obs) == 7
    obs, _, _, _, info = env.step(SEARCH)
    assert obs == [TASK, tA(4), tT(4)]
    assert info["context_edits"] == [
        {
            "strategy": "discard",
            "step": 4,
            "tokens_before": 36,
            "tokens_after": 12,
            "messages_before": 9,
            "messages_after": 3,
            "removed_messages": [1, 2, 3, 4, 5, 6],
            "fraction": 0.75,
        }
    ]
    # the next step continues from the edited chat
    obs = env.step(SEARCH)[0]
    assert obs == [TASK, tA(4), tT(4), tA(5), tT(5)]
    assert env.history.messages == obs


def test_discard_all_context_keeps_only_the_task_and_newest_turn():
    env = stack(DiscardAllContext, max_context=20)  # fires at 16 tokens = 4 messages
    env.reset()
    env.step(SEARCH)
    obs, _, _, _, info = env.step(SEARCH)
    assert obs == [TASK, tA(2), tT(2)]
    assert info["context_edits"][0]["strategy"] == "discard_all"
    assert info["context_edits"][0]["removed_messages"] == [1, 2]


def test_discard_with_fraction_one_is_discard_all():
    env = stack(DiscardContext, max_context=20, fraction=1.0)
    env.reset()
    env.step(SEARCH)
    obs, _, _, _, info = env.step(SEARCH)
    assert obs == [TASK, tA(2), tT(2)]
    assert info["context_edits"][0]["strategy"] == "discard_all"


def test_summary_context_restarts_from_task_and_summary():
    seen = []

    def summarize(messages: list) -> str:
        seen.append(messages)
        return (
            f"<think>private</think>I searched {sum(m['role'] == 'tool' for m in messages)} times"
        )

    env = stack(
        SummaryContext, summarizer=summarize, max_context=25, template="S: {summary}"
    )  # 20 tokens
    env.reset()
    env.step(SEARCH)
    obs, _, _, _, info = env.step(SEARCH)
    assert seen == [[TASK, tA(1), tT(1), tA(2), tT(2)]]
    assert obs == [TASK, U("S: I searched 2 times")]
    assert info["context_edits"] == [
        {
            "strategy": "summary",
            "step": 2,
            "tokens_before": 20,
            "tokens_after": 8,
            "messages_before": 5,
            "messages_after": 2,
            "removed_messages": [1, 2, 3, 4],
            "inserted_messages": [{"index": 1, "message": U("S: I searched 2 times")}],
        }
    ]
    obs = env.step(SEARCH)[0]
    assert obs == [TASK, U("S: I searched 2 times"), tA(3), tT(3)]


def test_summary_by_a_policy_gets_the_chat_and_the_summary_prompt():
    policy = ScriptedPolicy(["progress noted"])
    env = stack(SummaryContext, summarizer=policy, max_context=20, template="{summary}")
    env.reset()
    env.step(SEARCH)
    assert env.step(SEARCH)[0] == [TASK, U("progress noted")]


def test_summary_by_an_llm_client_sync_and_async():
    with ScriptedOpenAIServer(["<think>hmm</think>Two searches, nothing yet."] * 2) as srv:
        client = LLMClient(base_url=srv.base_url, model="m")

        env = stack(
            SummaryContext,
            summarizer=client,
            max_context=100,
            trigger=0.2,
            prompt="SUMMARISE",
            template="{summary}",
        )
        env.reset()
        env.step(SEARCH)
        assert env.step(SEARCH)[0] == [TASK, U("Two searches, nothing yet.")]

        async def play() -> list:
            await env.areset()
            await env.astep(SEARCH)
            obs = (await env.astep(SEARCH))[0]
            await client.close()
            return obs

        assert asyncio.run(play()) == [TASK, U("Two searches, nothing yet.")]
    sent = srv.answered[0].body["messages"]
    assert sent[:-1] == [TASK, tA(1), tT(1), tA(2), tT(2)]
    assert sent[-1] == U("SUMMARISE")
    assert not env.runs_sync()


def test_a_cloned_summary_stack_shares_the_client_and_copies_the_chat():
    with ScriptedOpenAIServer([]) as srv:
        client = LLMClient(base_url=srv.base_url, model="m")
        env = stack(SummaryContext, summarizer=client, max_context=1000)
        env.reset()
        env.step(SEARCH)
        twin = env.clone()
    assert twin.summarizer is client
    twin.step(SEARCH)
    assert len(twin.history.messages) == 5 and len(env.history.messages) == 3


def test_thinking_retention_drops_reasoning_only_after_a_new_user_message():
    env = ThinkingRetention(ChatHistory(FakeTools(Echo())), counter=lambda text: len(text.split()))
    env.reset()
    obs, _, _, _, info = env.step("<think>look it up</think>" + SEARCH)
    assert obs == [TASK, tA(1, "<think>look it up</think>"), tT(1)]
    assert "context_edits" not in info
    obs, _, _, _, info = env.step(
        {"role": "assistant", "content": "It is 4", "reasoning_content": "found it"}
    )
    assert obs == [
        TASK,
        tA(1),
        tT(1),
        {"role": "assistant", "content": "It is 4"},
        U("obs1"),
    ]
    assert info["context_edits"] == [
        {
            "strategy": "thinking_retention",
            "step": 2,
            # 4 per message + words (reasoning, content, call name and arguments):
            # (4+1) + (4+5) + (4+1) + (4+5) + (4+1) before; the <think> and reasoning words go
            "tokens_before": 33,
            "tokens_after": 28,
            "messages_before": 5,
            "messages_after": 5,
            "removed_messages": [],
            "edited_messages": [1, 3],
        }
    ]


def test_stacked_strategies_edit_one_history_and_both_record():
    inner = ThinkingRetention(ChatHistory(FakeTools(Echo())), counter=overhead_only)
    env = DiscardContext(inner, max_context=30, counter=overhead_only)  # 24 tokens = 6 messages
    env.reset()
    env.step("<think>a</think>" + SEARCH)
    env.step("<think>b</think>" + SEARCH)
    obs, _, _, _, info = env.step("<think>c</think>answer")
    # 7 messages (28 tokens) passed 24: the first turn went; the reasoning before "obs1" too
    assert obs == [TASK, tA(2), tT(2), SAY("answer"), U("obs1")]
    assert [e["strategy"] for e in info["context_edits"]] == ["thinking_retention", "discard"]


def test_no_edit_after_the_episode_ends():
    env = stack(DiscardContext, max_context=5)  # over budget from the start
    env.reset()
    info = env.step("stop")[4]
    assert "context_edits" not in info


def test_context_wrappers_need_a_chat_history_underneath():
    with pytest.raises(
        GemkitError, match=r"wrap the env as DiscardContext\(ChatHistory\(env\), ...\)"
    ):
        DiscardContext(Echo(), max_context=100)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_context": 0}, "max_context must be a positive number"),
        ({"max_context": 100, "trigger": 1.5}, "trigger must be a fraction"),
        ({"max_context": 100, "fraction": 0}, "fraction must be in"),
    ],
)
def test_bad_budgets_are_clear_errors(kwargs, message):
    with pytest.raises(GemkitError, match=message):
        DiscardContext(ChatHistory(Echo()), **kwargs)


def test_summary_needs_a_usable_summarizer():
    with pytest.raises(
        GemkitError, match="summarizer must be an LLMClient, a Policy, or a function"
    ):
        SummaryContext(ChatHistory(Echo()), summarizer=42, max_context=100)


# -- properties --------------------------------------------------------------------------------


@st.composite
def chats(draw: st.DrawFn) -> list[dict]:
    chat = [SYS, TASK] if draw(st.booleans()) else [TASK]
    for i in range(draw(st.integers(0, 12))):
        kind = draw(st.sampled_from(["tool", "tool", "plain", "user"]))
        thinking = {"reasoning_content": f"r{i}"} if draw(st.booleans()) else {}
        if kind == "tool":
            n = draw(st.integers(1, 3))
            chat += [A(i, n, **thinking)] + [T(i, j) for j in range(n)]
        elif kind == "plain":
            chat += [SAY(f"<think>t{i}</think>a{i}"), U(f"o{i}")]
        else:
            chat += [U(f"u{i}")]
    return chat


def is_subsequence(small: list, big: list) -> bool:
    it = iter(big)
    return all(any(m == b for b in it) for m in small)


@settings(max_examples=100, deadline=None, database=None)
@given(chats(), st.sampled_from([0.25, 0.5, 0.75, 1.0]), st.integers(0, 2), st.booleans())
def test_discard_never_orphans_a_tool_message_or_a_call(chat, fraction, keep_last, plain):
    kept, removed = discard_turns(chat, fraction, keep_last=keep_last, include_plain=plain)
    assert tool_pairing_errors(kept) == []
    assert kept[: chat.index(TASK) + 1] == chat[: chat.index(TASK) + 1]
    assert [m for i, m in enumerate(chat) if i not in set(removed)] == kept
    assert all(
        m["role"] in ("assistant", "tool", "user") for i, m in enumerate(chat) if i in removed
    )
    assert is_subsequence(kept, chat)


@settings(max_examples=100, deadline=None, database=None)
@given(chats())
def test_reasoning_drop_keeps_the_protocol_and_the_newest_turns(chat):
    new, edited = drop_old_reasoning(chat)
    assert tool_pairing_errors(new) == []
    assert len(new) == len(chat)
    last_user = max(i for i, m in enumerate(chat) if m["role"] == "user")
    assert all(i < last_user for i in edited)
    assert new[last_user:] == chat[last_user:]
    assert not any(
        "reasoning_content" in m or "<think>" in (m.get("content") or "") for m in new[:last_user]
    )


@settings(max_examples=60, deadline=None, database=None)
@given(st.lists(st.sampled_from(["search", "search2", "answer"]), max_size=15), st.integers(20, 80))
def test_every_observation_of_a_managed_episode_is_a_valid_chat(moves, max_context):
    actions = {
        "search": SEARCH,
        "search2": SEARCH + "\n" + SEARCH.replace("search", "page"),
        "answer": "hm",
    }
    env = DiscardContext(ChatHistory(FakeTools(Echo())), max_context=max_context, fraction=0.75)
    env.reset()
    for move in moves:
        obs = env.step(actions[move])[0]
        assert tool_pairing_errors(obs) == []
        assert obs[0] == TASK


# -- accounting: every model call counted, summaries on their own budget, no silent limit -------


def plain_stack(wrapper: type, **kwargs: Any) -> Any:
    """A tool-free chat: the env answers each action with a user message."""
    return wrapper(ChatHistory(Echo()), counter=overhead_only, **kwargs)


def test_a_client_summary_has_its_own_budget_and_records_its_usage():
    summary = "one two three four five six seven eight nine ten"
    with ScriptedOpenAIServer([summary]) as srv:
        # the client's own default budget (for short policy moves) would cut the summary
        client = LLMClient(base_url=srv.base_url, model="m", max_tokens=3)
        env = stack(
            SummaryContext, summarizer=client, max_context=100, trigger=0.2,
            max_summary_tokens=64, template="{summary}",
        )  # fmt: skip
        env.reset()
        env.step(SEARCH)
        _, _, _, _, info = env.step(SEARCH)
        body = srv.answered[0].body
    # its own budget, not the client's 3, and bounded: the summary after the task must stay
    # under the trigger (20 tokens - 8 for the task and the note), the request in the window
    (edit,) = info["context_edits"]
    assert body["max_tokens"] == edit["summary_budget"] == 12
    assert edit["inserted_messages"][0]["message"]["content"] == summary
    assert edit["summary_truncated"] is False
    prompt_words = sum(len((m["content"] or "").split()) for m in body["messages"])
    assert edit["usage"] == {"prompt_tokens": prompt_words, "completion_tokens": 10}


def test_a_summary_cut_at_its_budget_is_kept_and_flagged():
    with ScriptedOpenAIServer(["a b c d e f g h"]) as srv:
        client = LLMClient(base_url=srv.base_url, model="m")
        env = stack(
            SummaryContext, summarizer=client, max_context=100, trigger=0.2,
            max_summary_tokens=3, template="{summary}",
        )  # fmt: skip
        env.reset()
        env.step(SEARCH)
        _, _, _, _, info = env.step(SEARCH)
    (edit,) = info["context_edits"]
    assert edit["summary_truncated"] is True
    assert edit["inserted_messages"][0]["message"]["content"] == "a b c"


def test_discard_on_a_chat_without_tool_calls_warns_instead_of_doing_nothing_silently(caplog):
    env = plain_stack(DiscardContext, max_context=10)  # fires at 8 tokens = 2 messages
    env.reset()
    _, _, _, _, info = env.step("go")
    assert "context_edits" not in info
    (warning,) = info["context_warnings"]
    assert warning["strategy"] == "discard" and warning["step"] == 1
    assert "include_plain=True" in warning["reason"] and "over budget" in warning["reason"]
    _, _, _, _, info = env.step("again")
    assert len(info["context_warnings"]) == 1 and len(env.warnings) == 2
    assert sum("include_plain=True" in r.message for r in caplog.records) == 1, "logged once"


def test_a_tool_using_chat_over_budget_is_not_called_one_without_tools():
    env = stack(DiscardContext, max_context=5)  # one tool-call turn, kept by keep_last=1
    env.reset()
    _, _, _, _, info = env.step(SEARCH)
    (warning,) = info["context_warnings"]
    assert "1 tool-call turn(s) and keep_last=1: none may be dropped" in warning["reason"]
    assert "only plain turns" not in warning["reason"] and "without tools" not in warning["reason"]


def test_discard_with_plain_turns_acts_and_gives_no_warning():
    env = plain_stack(DiscardContext, max_context=20, include_plain=True)
    env.reset()
    env.step("go")
    _, _, _, _, info = env.step("again")
    assert info["context_edits"] and "context_warnings" not in info


def test_a_summary_budget_is_bounded_by_the_window_the_request_leaves():
    # the request holds the chat (5 messages: 20 tokens) and the prompt (4): a 30-token window
    # leaves 6 for the reply, whatever max_summary_tokens asks (it asked 1024 > the window)
    with ScriptedOpenAIServer(["a b c d e f g h"]) as srv:
        client = LLMClient(base_url=srv.base_url, model="m")
        env = stack(SummaryContext, summarizer=client, max_context=30, trigger=0.6,
                    template="{summary}")  # fmt: skip
        env.reset()
        env.step(SEARCH)
        _, _, _, _, info = env.step(SEARCH)
        body = srv.answered[0].body
    (edit,) = info["context_edits"]
    assert body["max_tokens"] == edit["summary_budget"] == 6
    assert edit["summary_truncated"] is True


def test_no_room_for_a_summary_asks_for_none_and_says_why():
    with ScriptedOpenAIServer([]) as srv:
        client = LLMClient(base_url=srv.base_url, model="m")
        env = stack(SummaryContext, summarizer=client, max_context=20, template="{summary}")
        env.reset()
        env.step(SEARCH)
        _, _, _, _, info = env.step(SEARCH)
        assert srv.chat_requests == [], "a request over the window would be refused"
    assert "context_edits" not in info
    (warning,) = info["context_warnings"]
    assert (
        "no room for a summary: the request (24 tokens) fills the window (20)"
        in (warning["reason"])
    )


def test_a_summary_that_leaves_the_chat_over_budget_warns():
    env = stack(SummaryContext, summarizer=lambda m: "x", max_context=5, template="{summary}")
    env.reset()
    _, _, _, _, info = env.step(SEARCH)
    assert info["context_edits"][0]["strategy"] == "summary"
    (warning,) = info["context_warnings"]
    assert warning["reason"].startswith("still over budget after the summary edit")


def test_no_warning_within_budget_or_after_the_episode_ends():
    env = plain_stack(DiscardContext, max_context=1000)
    env.reset()
    assert "context_warnings" not in env.step("go")[4]
    tight = plain_stack(DiscardContext, max_context=10)
    tight.reset()
    assert "context_warnings" not in tight.step("stop")[4], "no model call follows the end"
