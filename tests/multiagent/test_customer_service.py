"""The customer-service task: scripted user and assistant, tools over the shop database."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest

import gemkit
from gemkit.envs.multiagent.customer_service import (
    STOP,
    CustomerService,
    ScriptedAssistant,
    ScriptedUser,
    call,
)
from gemkit.envs.multiagent.shop import Shop, ShopError


def converse(env, seed, assistant=None, user=None):
    obs, _ = env.reset(seed=seed)
    policies = {"user": user or ScriptedUser(), "assistant": assistant or ScriptedAssistant()}
    rewards, infos = {}, {}
    while env.agents:
        speaker = env.agent_selection
        obs, rewards, terminated, truncated, infos = env.step(
            {speaker: policies[speaker].choose(obs[speaker])}
        )
    return rewards, infos, terminated


def tool_call(name, **arguments):
    return f"<tool_call>{json.dumps(call(name, **arguments))}</tool_call>"


@pytest.mark.parametrize("seed", range(8))
def test_scripted_assistant_solves_the_scripted_users_goal(seed):
    rewards, infos, terminated = converse(gemkit.make("multiagent:CustomerService-v0"), seed)
    assert rewards == {"user": 1.0, "assistant": 1.0}
    assert infos["assistant"]["success"] and infos["assistant"]["mismatch"] == []
    assert all(terminated.values())


def start(seed=0):
    env = CustomerService(max_requests=1)
    env.reset(seed=seed)
    request = env.goal.requests[0]
    env.step({"user": f"Hi, my email is {env.goal.email}."})
    env.step({"assistant": tool_call("find_user_by_email", email=env.goal.email)})
    return env, request


def finish(env):
    env.step({"assistant": "Done."})
    return env.step({"user": f"Thanks. {STOP}"})


def test_a_wrong_tool_action_leaves_the_database_wrong_and_scores_zero():
    env, request = start()
    other = next(o for o in env.shop.user(env._session.user_id)["orders"] if o != request.order_id)
    order = env.shop.order(other)
    wrong = "refund_order" if order["status"] == "delivered" else "cancel_order"
    env.step({"assistant": tool_call(wrong, order_id=other)})
    obs, rewards, terminated, truncated, infos = finish(env)
    assert rewards == {"user": 0.0, "assistant": 0.0} and not infos["assistant"]["success"]
    assert other in infos["assistant"]["mismatch"]


def test_doing_nothing_scores_zero():
    env, request = start()
    obs, rewards, *_, infos = finish(env)
    assert rewards["assistant"] == 0.0 and infos["assistant"]["mismatch"] == [request.order_id]


def test_tool_results_go_to_the_assistant_who_keeps_the_turn():
    env, request = start()
    obs, *_ = env.step({"assistant": tool_call("get_order", order_id=request.order_id)})
    assert obs["assistant"].startswith("get_order -> {") and request.order_id in obs["assistant"]
    assert env.agent_selection == "assistant" and "get_order" not in obs["user"]


def test_writes_need_an_authenticated_owner():
    env = CustomerService()
    env.reset(seed=1)
    env.step({"user": "hello"})
    order_id = env.goal.requests[0].order_id
    obs, *_ = env.step({"assistant": tool_call("refund_order", order_id=order_id)})
    assert "authenticate the customer first" in obs["assistant"]
    someone_else = next(
        r[0] for r in env.shop.conn.execute("SELECT email FROM users") if r[0] != env.goal.email
    )
    env.step({"assistant": tool_call("find_user_by_email", email=someone_else)})
    obs, *_ = env.step({"assistant": tool_call("cancel_order", order_id=order_id)})
    assert "does not belong to the authenticated user" in obs["assistant"]


def test_malformed_tool_calls_are_explained_not_raised():
    env, _ = start()
    obs, *_ = env.step(
        {"assistant": '<tool_call>{"name": "refund_everything", "arguments": {}}</tool_call>'}
    )
    assert "unknown tool 'refund_everything'" in obs["assistant"]
    obs, *_ = env.step(
        {"assistant": '<tool_call>{"name": "get_order", "arguments": {}}</tool_call>'}
    )
    assert "wrong arguments for get_order" in obs["assistant"]
    obs, *_ = env.step({"assistant": "<tool_call>{not json</tool_call>"})
    assert "Tool call error" in obs["assistant"] and env.agent_selection == "assistant"


def test_shop_rules_refuse_impossible_changes():
    shop = Shop.generate(np.random.default_rng(0))
    rows = shop.conn.execute("SELECT order_id, status FROM orders").fetchall()
    delivered = next(r[0] for r in rows if r[1] == "delivered")
    pending = next(r[0] for r in rows if r[1] == "pending")
    with pytest.raises(ShopError, match="only pending orders can be modified"):
        shop.modify_size(delivered, "M")
    with pytest.raises(ShopError, match="only delivered orders can be refunded"):
        shop.refund(pending)
    with pytest.raises(ShopError, match="comes in sizes"):
        shop.modify_size(pending, "XXXL")


def test_the_chat_is_truncated_at_the_turn_limit_and_still_scored():
    env = gemkit.make("multiagent:CustomerService-v0", max_turns=4)
    env.reset(seed=0)
    for _ in range(2):
        env.step({"user": "hello?"})
        obs, rewards, terminated, truncated, infos = env.step({"assistant": "Hi?"})
    assert all(truncated.values()) and rewards["assistant"] == 0.0 and "Out of turns" in obs["user"]


def test_an_env_with_its_database_survives_pickling_and_cloning():
    env, request = start(seed=2)
    copy = pickle.loads(pickle.dumps(env))
    twin = env.clone()
    request.apply(env.shop)
    for other in (copy, twin):
        assert other.shop.snapshot() != env.shop.snapshot()
        obs, *_ = other.step({"assistant": tool_call("get_order", order_id=request.order_id)})
        assert request.order_id in obs["assistant"]
    assert finish(env)[1]["assistant"] == 1.0


def test_single_agent_assistant_view_against_the_scripted_user():
    env = gemkit.make("multiagent:CustomerService-v0-vs_user")
    expert = gemkit.spec("multiagent:CustomerService-v0-vs_user").make_expert()
    obs, info = env.reset(seed=5)
    assert obs.startswith("Customer: Hi! My email is")
    total, done = 0.0, False
    while not done:
        obs, reward, terminated, truncated, info = env.step(expert.choose(obs))
        total += reward
        done = terminated or truncated
    assert total == 1.0 and info["success"]


async def test_an_llm_can_play_the_user_through_llm_policy():
    from gemkit.envs.multiagent.customer_service import llm_user
    from gemkit.llm import LLMClient
    from gemkit.multiagent import OpponentEnv
    from gemkit.testing import ScriptedOpenAIServer

    # the "model" answers as the scripted user would, from the chat the policy sends it
    customer = ScriptedUser()

    def reply(request):
        return customer.choose(request["messages"][-1]["content"])

    async with ScriptedOpenAIServer(reply) as srv:
        async with LLMClient(base_url=srv.base_url, model="m", backoff_base=0.01) as client:
            env = OpponentEnv(CustomerService(), llm_user(client), agent="assistant")
            assistant = ScriptedAssistant()
            obs, _ = await env.areset(seed=4)
            done = False
            while not done:
                obs, reward, terminated, truncated, info = await env.astep(assistant.choose(obs))
                done = terminated or truncated
    assert reward == 1.0 and info["success"]
    first = srv.chat_requests[0].body["messages"]
    assert first[0]["role"] == "system" and "account email is" in first[1]["content"]
