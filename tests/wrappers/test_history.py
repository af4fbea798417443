"""Observation-history wrappers: what the agent sees of the episode so far."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from gemkit.core import Env, Wrapper
from gemkit.errors import GemkitError
from gemkit.wrappers import ChatHistory, ConcatHistory, LastObservation, WindowedHistory
from gemkit.wrappers.context import tool_pairing_errors


class Echo(Env):
    """Task 'task', then each observation says which action it got; ends on 'stop'."""

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.n = 0
        return "task", {}

    def step(self, action):
        self.n += 1
        return f"obs{self.n}<{action}>", 0.0, action == "stop", False, {}


class FakeTools(Wrapper):
    """Answers Hermes tool calls like ToolEnvWrapper does: `info["tool_results"]`."""

    def step(self, action):
        names = [
            json.loads(b.split("</tool_call>")[0])["name"] for b in action.split("<tool_call>")[1:]
        ]
        if not names:
            return self.env.step(action)
        self.calls = getattr(self, "calls", 0) + 1
        results = [
            {
                "tool_call_id": f"t{self.calls}_{i}",
                "name": n,
                "content": f"{n} says hi",
                "is_error": False,
            }
            for i, n in enumerate(names)
        ]
        obs = "\n".join(r["content"] for r in results)
        return obs, 0.0, False, False, {"tool_results": results, "tool_calls": len(results)}


def call(name: str, **args: Any) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': args})}\n</tool_call>"


def test_last_observation_is_the_identity():
    env = LastObservation(Echo())
    assert env.reset() == ("task", {})
    assert env.step("a")[0] == "obs1<a>"
    assert env.step("b")[0] == "obs2<b>"


def test_concat_history_holds_task_actions_and_observations_in_order():
    env = ConcatHistory(Echo())
    env.reset()
    env.step("a")
    obs = env.step("b")[0]
    assert obs == "task\n\nAction: a\n\nObservation: obs1<a>\n\nAction: b\n\nObservation: obs2<b>"


def test_concat_history_templates_are_configurable_and_reset_clears_history():
    env = ConcatHistory(
        Echo(), action_template="|A:{action}", observation_template="|O:{observation}"
    )
    env.reset()
    env.step("a")
    assert env.reset()[0] == "task"
    assert env.step("z")[0] == "task|A:z|O:obs1<z>"


def test_windowed_history_keeps_the_task_and_newest_whole_entries_within_chars():
    env = WindowedHistory(
        Echo(),
        max_chars=30,
        action_template="|A:{action}",
        observation_template="|O:{observation}",
        omitted_marker="|...",
    )
    env.reset()
    assert env.step("a")[0] == "task|A:a|O:obs1<a>"  # 15 chars of history: fits
    env.step("b")
    obs = env.step("c")[0]
    # history "|A:a|O:obs1<a>|A:b|O:obs2<b>|A:c|O:obs3<c>" is 42 chars; budget 30 - 4 (marker)
    assert obs == "task|...|O:obs2<b>|A:c|O:obs3<c>"


def test_windowed_history_cuts_a_single_oversized_entry_from_its_start():
    env = WindowedHistory(
        Echo(),
        max_chars=12,
        action_template="|A:{action}",
        observation_template="|O:{observation}",
        omitted_marker="|...",
    )
    env.reset()
    obs = env.step("x" * 40)[0]
    assert obs.startswith("task|...")
    assert len(obs) - len("task") == 12
    assert obs.endswith("xxxxx>")


def test_windowed_history_counts_tokens_with_the_given_counter():
    words = lambda text: len(text.split())  # noqa: E731 - a one-line counter
    env = WindowedHistory(Echo(), max_tokens=6, counter=words, omitted_marker=" [cut]")
    env.reset()
    env.step("a")
    obs = env.step("b")[0]
    # entries: " Action: a", " Observation: obs1<a>", " Action: b", " Observation: obs2<b>"
    # (2 words each); 6 - 1 (marker) leaves room for the newest two entries
    assert obs == "task [cut]\n\nAction: b\n\nObservation: obs2<b>"


def test_windowed_history_needs_exactly_one_budget():
    with pytest.raises(GemkitError, match="exactly one of max_chars= or max_tokens="):
        WindowedHistory(Echo())
    with pytest.raises(GemkitError, match="positive int"):
        WindowedHistory(Echo(), max_chars=0)


def test_chat_history_builds_system_task_assistant_and_user_messages():
    env = ChatHistory(Echo(), system_prompt="be brief")
    obs, _ = env.reset()
    assert obs == [{"role": "system", "content": "be brief"}, {"role": "user", "content": "task"}]
    obs = env.step("a")[0]
    assert obs == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": "a"},
        {"role": "user", "content": "obs1<a>"},
    ]


def test_chat_history_turns_tool_results_into_tool_messages_paired_with_calls():
    env = ChatHistory(FakeTools(Echo()))
    env.reset()
    action = "Let me look.\n" + call("search", q="paris") + "\n" + call("page", url="u")
    obs = env.step(action)[0]
    assert obs == [
        {"role": "user", "content": "task"},
        {
            "role": "assistant",
            "content": "Let me look.",
            "tool_calls": [
                {
                    "id": "t1_0",
                    "type": "function",
                    "function": {"name": "search", "arguments": '{"q": "paris"}'},
                },
                {
                    "id": "t1_1",
                    "type": "function",
                    "function": {"name": "page", "arguments": '{"url": "u"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "t1_0", "name": "search", "content": "search says hi"},
        {"role": "tool", "tool_call_id": "t1_1", "name": "page", "content": "page says hi"},
    ]
    obs = env.step("final")[0]
    assert obs[-2:] == [
        {"role": "assistant", "content": "final"},
        {"role": "user", "content": "obs1<final>"},
    ]
    assert tool_pairing_errors(obs) == []


def test_chat_history_accepts_assistant_message_actions_and_keeps_their_reasoning():
    inner = FakeTools(Echo())
    env = ChatHistory(inner)
    env.reset()
    action = {
        "role": "assistant",
        "content": None,
        "reasoning_content": "I should search",
        "tool_calls": [
            {"id": "x", "type": "function", "function": {"name": "search", "arguments": '{"q": 1}'}}
        ],
    }
    obs = env.step(action)[0]
    assert obs[1] == {
        "role": "assistant",
        "content": None,
        "reasoning_content": "I should search",
        "tool_calls": [
            {
                "id": "t1_0",
                "type": "function",
                "function": {"name": "search", "arguments": '{"q": 1}'},
            }
        ],
    }
    assert obs[2]["tool_call_id"] == "t1_0"


def test_chat_history_observations_are_snapshots_not_live_views():
    env = ChatHistory(Echo())
    first, _ = env.reset()
    env.step("a")
    assert first == [{"role": "user", "content": "task"}]


def test_chat_history_async_steps_match_sync_steps():
    async def play() -> list:
        env = ChatHistory(FakeTools(Echo()))
        await env.areset()
        await env.astep(call("search", q=1))
        return (await env.astep("done"))[0]

    sync = ChatHistory(FakeTools(Echo()))
    sync.reset()
    sync.step(call("search", q=1))
    assert asyncio.run(play()) == sync.step("done")[0]


def test_history_wrappers_stay_sync_over_sync_envs():
    assert ChatHistory(Echo()).runs_sync()
    assert ConcatHistory(Echo()).runs_sync()
    assert LastObservation(Echo()).runs_sync()


# -- with the real tool wrapper underneath -----------------------------------------------------


def lookup(query: str) -> str:
    """Look something up.

    Args:
        query: what to look for.
    """
    return f"found {query}"


def tool_chat() -> ChatHistory:
    from gemkit.tools.wrapper import ToolEnvWrapper

    env = ChatHistory(ToolEnvWrapper(Echo(), [lookup], instructions=False))
    env.reset()
    return env


@pytest.mark.parametrize(
    "action",
    [
        'I will look it up.\n{"name": "lookup", "arguments": {"query": "x"}}',
        'I will look it up.\n```json\n{"name": "lookup", "arguments": {"query": "x"}}\n```',
        'I will look it up. <function=lookup>{"query": "x"}</function>',
    ],
    ids=["bare-json", "json-fence", "llama"],
)
def test_a_call_in_any_format_becomes_tool_calls_and_leaves_only_the_prose(action):
    obs = tool_chat().step(action)[0]
    assert obs[1] == {
        "role": "assistant",
        "content": "I will look it up.",
        "tool_calls": [
            {"id": "call_0", "type": "function",
             "function": {"name": "lookup", "arguments": '{"query": "x"}'}}
        ],
    }  # fmt: skip
    assert obs[2] == {
        "role": "tool",
        "tool_call_id": "call_0",
        "name": "lookup",
        "content": "found x",
    }


def test_a_native_call_keeps_the_server_id_through_the_tool_wrapper():
    action = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "srv-7", "type": "function",
             "function": {"name": "lookup", "arguments": '{"query": "y"}'}}
        ],
    }  # fmt: skip
    obs = tool_chat().step(action)[0]
    assert obs[1]["tool_calls"][0]["id"] == "srv-7" and obs[2]["tool_call_id"] == "srv-7"
    assert tool_pairing_errors(obs) == []


def test_a_tool_wrapper_above_the_history_is_refused_with_the_right_order():
    from gemkit.tools.base import ToolError
    from gemkit.tools.wrapper import ToolEnvWrapper

    wrong = ToolEnvWrapper(ChatHistory(Echo()), [lookup])
    with pytest.raises(ToolError, match=r"ChatHistory\(ToolEnvWrapper\(env\)\)"):
        wrong.reset()


@pytest.mark.parametrize(
    "action",
    [
        '<tool_call>{"name": "lookup", "arguments": {"query": "x",}}</tool_call>',
        '{"name": "lookup", "arguments": {"query": x}}',
        '<tool_call>{"name": "lookup", "arguments": {"query": "x"}}',
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "srv-1", "type": "function",
             "function": {"name": "lookup", "arguments": '{"query": x}'}}]},
    ],
    ids=["hermes-bad-json", "bare-bad-json", "unclosed", "native-bad-arguments"],
)  # fmt: skip
def test_a_malformed_call_keeps_what_the_model_wrote_as_json_arguments(action):
    obs = tool_chat().step(action)[0]
    (call,) = obs[1]["tool_calls"]
    arguments = json.loads(call["function"]["arguments"])  # still JSON: servers parse it
    assert set(arguments) == {"unparsed"} and arguments["unparsed"]
    wrote = action if isinstance(action, str) else action["tool_calls"][0]["function"]["arguments"]
    assert wrote[:20] in arguments["unparsed"]
    assert obs[2]["role"] == "tool" and obs[2]["content"].startswith("Error:")
    assert tool_pairing_errors(obs) == []


def test_real_servers_take_the_unparsed_form_where_llama_cpp_refuses_the_raw_text():
    from pathlib import Path

    real = Path(__file__).parents[1] / "data" / "real-model"
    rows = {
        (kind, r["probe"]): r
        for kind in ("vllm", "llama-cpp")
        for r in map(json.loads, (real / f"{kind}-probes.jsonl").read_text().splitlines())
    }
    assert rows["llama-cpp", "raw_arguments"]["status"] == 500  # the next request would fail
    assert rows["llama-cpp", "unparsed_arguments"]["status"] == 200
    assert rows["vllm", "unparsed_arguments"]["status"] == 200
    # vLLM renders text that is not JSON as {}: 27 tokens fewer, what the model wrote is gone
    assert (
        rows["vllm", "raw_arguments"]["response"]["count"]
        < (rows["vllm", "unparsed_arguments"]["response"]["count"])
    )
    sent = rows["llama-cpp", "unparsed_arguments"]["request"]["messages"][1]["tool_calls"][0]
    wrote = json.loads(sent["function"]["arguments"])["unparsed"]
    obs = tool_chat().step(wrote.replace("python", "lookup"))[0]
    recorded = json.loads(obs[1]["tool_calls"][0]["function"]["arguments"])
    assert recorded == {"unparsed": wrote.replace("python", "lookup")}
