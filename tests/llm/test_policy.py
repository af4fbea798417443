"""LLMPolicy: a chat model as a gemkit policy, against the scripted server."""

from __future__ import annotations

import json

from gemkit.core import Env, Wrapper
from gemkit.llm import LLMClient, LLMPolicy
from gemkit.policy import Policy
from gemkit.rollout import run_episode
from gemkit.testing import Reply, ScriptedOpenAIServer
from gemkit.wrappers import ChatHistory, ThinkingRetention
from gemkit.wrappers.context import tool_pairing_errors


def client_for(srv: ScriptedOpenAIServer) -> LLMClient:
    return LLMClient(base_url=srv.base_url, model="m", backoff_base=0.01)


async def test_string_observations_build_a_running_chat():
    async with ScriptedOpenAIServer(["guess 50", "guess 75"]) as srv, client_for(srv) as client:
        policy = LLMPolicy(client, system_prompt="You play games.")
        assert isinstance(policy, Policy)
        assert await policy.act("Guess a number.") == "guess 50"
        assert await policy.act("Higher.") == "guess 75"
    assert srv.chat_requests[1].body["messages"] == [
        {"role": "system", "content": "You play games."},
        {"role": "user", "content": "Guess a number."},
        {"role": "assistant", "content": "guess 50"},
        {"role": "user", "content": "Higher."},
    ]


async def test_reset_starts_a_new_chat_and_usage():
    async with ScriptedOpenAIServer(["a", "b"]) as srv, client_for(srv) as client:
        policy = LLMPolicy(client)
        await policy.act("one two")
        policy.reset()
        assert policy.usage.total_tokens == 0 and policy.last_response is None
        await policy.act("three")
    assert srv.chat_requests[1].body["messages"] == [{"role": "user", "content": "three"}]


async def test_message_list_observations_are_sent_as_is_with_the_system_prompt_first():
    chat = [
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": "x"},
        {"role": "user", "content": "y"},
    ]
    async with ScriptedOpenAIServer(["ok", "ok"]) as srv, client_for(srv) as client:
        await LLMPolicy(client).act(chat)
        await LLMPolicy(client, system_prompt="S").act(chat)
    assert srv.chat_requests[0].body["messages"] == chat
    assert srv.chat_requests[1].body["messages"] == [{"role": "system", "content": "S"}, *chat]


async def test_tool_calls_become_hermes_blocks_after_the_content():
    reply = Reply(
        content="Let me check.",
        tool_calls=[
            {"name": "search", "arguments": {"query": "capital of France"}},
            {"name": "python", "arguments": '{"code": "1+1"}'},
        ],
    )
    async with ScriptedOpenAIServer([reply]) as srv, client_for(srv) as client:
        action = await LLMPolicy(client).act("task")
    assert action == (
        "Let me check.\n"
        '<tool_call>\n{"name": "search", "arguments": {"query": "capital of France"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "python", "arguments": {"code": "1+1"}}\n</tool_call>'
    )


async def test_last_response_keeps_reasoning_and_usage_out_of_the_action():
    reply = Reply(content="4", reasoning_content="two and two")
    async with ScriptedOpenAIServer([reply, "ok"]) as srv, client_for(srv) as client:
        policy = LLMPolicy(client, temperature=0.2, max_tokens=64)
        assert await policy.act("2+2? answer") == "4"
        assert policy.last_response.reasoning_content == "two and two"
        assert policy.last_response.usage.completion_tokens == 4  # "4" + "two and two"
        await policy.act("thanks")
    assert policy.usage.prompt_tokens == 2 + 4  # "2+2? answer", then "2+2? answer" "4" "thanks"
    assert srv.chat_requests[0].body["temperature"] == 0.2
    assert srv.chat_requests[0].body["max_tokens"] == 64


class Quiz(Env):
    """One question; answering 'Paris' wins."""

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return "What is the capital of France? Use the search tool.", {}

    def step(self, action):
        win = "Paris" in action
        return ("Correct." if win else "Wrong."), float(win), True, False, {"success": win}


class OneTool(Wrapper):
    """Stands in for ToolEnvWrapper: answers a Hermes search call with a fixed result."""

    def step(self, action):
        if "<tool_call>" not in action:
            return self.env.step(action)
        call = json.loads(action.split("<tool_call>")[1].split("</tool_call>")[0])
        result = {
            "tool_call_id": "call_0",
            "name": call["name"],
            "content": "France: capital Paris",
            "is_error": False,
        }
        return (
            "France: capital Paris",
            0.0,
            False,
            False,
            {"tool_results": [result], "tool_calls": 1},
        )


async def test_an_episode_with_a_tool_call_sends_a_valid_tool_chat_to_the_model():
    replies = [
        Reply(tool_calls=[{"name": "search", "arguments": {"query": "France"}}]),
        "It is Paris.",
    ]
    async with ScriptedOpenAIServer(replies) as srv, client_for(srv) as client:
        env = ChatHistory(OneTool(Quiz()))
        episode = await run_episode(
            env, LLMPolicy(client, tools=[{"type": "function", "function": {"name": "search"}}])
        )
    assert episode.error is None
    assert episode.success
    second = srv.chat_requests[1].body
    assert second["messages"][1:] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_0",
                    "type": "function",
                    "function": {"name": "search", "arguments": '{"query": "France"}'},
                }
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "call_0",
            "name": "search",
            "content": "France: capital Paris",
        },
    ]
    assert tool_pairing_errors(second["messages"]) == []
    assert second["tools"] == [{"type": "function", "function": {"name": "search"}}]


async def test_message_actions_carry_reasoning_into_the_history_until_a_user_message():
    replies = [
        Reply(
            reasoning_content="search first",
            tool_calls=[{"name": "search", "arguments": {"query": "France"}}],
        ),
        Reply(content="Paris?", reasoning_content="the result says Paris"),
    ]
    async with ScriptedOpenAIServer(replies) as srv, client_for(srv) as client:
        env = ThinkingRetention(ChatHistory(OneTool(Quiz())))
        policy = LLMPolicy(client, message_actions=True)
        obs, _ = await env.areset()
        action = await policy.act(obs)
        assert action["reasoning_content"] == "search first"
        obs, *_ = await env.astep(action)
        await policy.act(obs)
    # the model saw its own reasoning next to its call: only a tool result came after it
    assert srv.chat_requests[1].body["messages"][1]["reasoning_content"] == "search first"
