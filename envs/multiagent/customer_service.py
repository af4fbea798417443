"""A customer-service task in the style of user–assistant benchmarks (tau-bench-like).

A simulated `user` with a hidden goal ("change order #W1234 to size M and get a refund for
order #W5678") talks to an `assistant` that has tools over the shop database. The episode
ends when the user says `###STOP###` (or turns run out); both agents get reward 1 when the
final database equals the state the goal asks for, else 0.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gemkit.envs.multiagent.shop import Session, Shop, shop_tools
from gemkit.multiagent import MultiAgentEnv, MultiResetResult, MultiStepResult
from gemkit.policy import SyncPolicy
from gemkit.tools.base import ToolResult
from gemkit.tools.calls.describe import signature
from gemkit.tools.calls.model import ToolCall
from gemkit.tools.calls.parse import parse_action

STOP = "###STOP###"
CALL_FORMATS = ("hermes", "openai")
EMAIL_RE = re.compile(r"[\w.+-]+@[\w-]+\.[\w.]+")
MODIFY_RE = re.compile(r"change order (#W\d+) to size (\w+)", re.IGNORECASE)
REFUND_RE = re.compile(r"refund for order (#W\d+)", re.IGNORECASE)
CANCEL_RE = re.compile(r"cancel order (#W\d+)", re.IGNORECASE)


@dataclass(frozen=True)
class Request:
    """One thing the user wants done: `modify` (to `size`), `cancel` or `refund` an order."""

    kind: str
    order_id: str
    size: str | None = None

    def text(self) -> str:
        """The request in the user's words."""
        if self.kind == "modify":
            return f"change order {self.order_id} to size {self.size}"
        if self.kind == "cancel":
            return f"cancel order {self.order_id}"
        return f"get a refund for order {self.order_id}"

    def apply(self, shop: Shop) -> None:
        """Carry the request out on `shop`."""
        if self.kind == "modify":
            shop.modify_size(self.order_id, self.size or "")
        elif self.kind == "cancel":
            shop.cancel(self.order_id)
        else:
            shop.refund(self.order_id)


@dataclass
class Goal:
    """The user's hidden goal: who they are and what they want done."""

    name: str
    email: str
    requests: list[Request] = field(default_factory=list)

    def text(self) -> str:
        """All requests in one sentence."""
        parts = [r.text() for r in self.requests]
        return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def draw_goal(shop: Shop, rng: np.random.Generator, max_requests: int = 2) -> Goal:
    """A goal for a random user: 1..max_requests requests on distinct orders of theirs."""
    users = [r[0] for r in shop.conn.execute("SELECT user_id FROM users ORDER BY user_id")]
    user = shop.user(users[int(rng.integers(len(users)))])
    orders = [shop.order(o) for o in user["orders"]]
    order_ix = rng.permutation(len(orders))
    requests: list[Request] = []
    want = int(rng.integers(1, max_requests + 1))
    for k in order_ix:
        if len(requests) == want:
            break
        order = orders[int(k)]
        if order["status"] == "delivered":
            requests.append(Request("refund", order["order_id"]))
            continue
        others = [s for s in shop.product(order["product_id"])["sizes"] if s != order["size"]]
        if others and rng.random() < 0.7:
            requests.append(
                Request("modify", order["order_id"], others[int(rng.integers(len(others)))])
            )
        else:
            requests.append(Request("cancel", order["order_id"]))
    return Goal(user["name"], user["email"], requests)


USER_PROMPT = """You are a customer of an online clothing shop, chatting with its support assistant.
Your name is {name} and your account email is {email}. You want to {goal}.
Speak only as the customer, one short message at a time; give your email when asked; do not \
invent other requests. When everything you wanted is done, or cannot be done, end the chat \
with a message containing {stop}.
Write your first message to the assistant now."""

ASSISTANT_PROMPT = """You are the support assistant of an online clothing shop.
Rules: authenticate the customer with find_user_by_email before looking at or changing their \
orders, and act only on their own orders. Pending orders can have their size changed or be \
cancelled; delivered orders can be refunded. Do only what the customer asks.
To call a tool, write <tool_call>{{"name": "...", "arguments": {{...}}}}</tool_call>; tool \
results come back to you only. Anything else you write is sent to the customer.
Tools:
{tools}

Waiting for the customer's first message."""


class CustomerService(MultiAgentEnv):
    """The `user` and the `assistant` take turns; the user speaks first.

    The assistant's action either calls tools (Hermes `<tool_call>` blocks or an OpenAI
    message with `tool_calls`: the results come back to it and it stays on turn) or is a
    message to the user (the turn passes). A user message containing `###STOP###` ends the
    episode. Reward (both agents, at the end): 1.0 when the final database equals the state
    the goal asks for, else 0.0; `info["mismatch"]` names the orders that differ.
    """

    possible_agents = ["user", "assistant"]

    def __init__(self, max_turns: int = 30, num_users: int = 5, max_requests: int = 2):
        super().__init__()
        self.max_turns = max_turns
        self.num_users = num_users
        self.max_requests = max_requests
        self.shop = Shop()
        self.goal = Goal("", "")
        self.expected: dict[str, list[tuple[Any, ...]]] = {}
        self.turn = "user"
        self.moves = 0
        self.transcript: list[tuple[str, str]] = []
        self._obs: dict[str, str] = {}
        self._session = Session(self.shop)
        self.tools = shop_tools(self._session)

    # the tools are closures over the session: rebuild them for a copy or an unpickled env
    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("tools", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._session.shop = self.shop
        self.tools = shop_tools(self._session)

    @property
    def current_agents(self) -> list[str]:
        """Who speaks next, or nobody once the chat is over."""
        return [self.turn] if self.agents else []

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> MultiResetResult:
        """Build a random shop and goal; the user sees its goal, the assistant its tools."""
        super().reset(seed=seed)
        self.shop = Shop.generate(self.np_random, num_users=self.num_users)
        self.goal = draw_goal(self.shop, self.np_random, self.max_requests)
        target = self.shop.copy()
        for request in self.goal.requests:
            request.apply(target)
        self.expected = target.snapshot()
        self._session = Session(self.shop)
        self.tools = shop_tools(self._session)
        self.turn, self.moves, self.transcript = "user", 0, []
        tools = "\n".join(f"- {signature(t)}: {t.description}" for t in self.tools)
        self._obs = {
            "user": USER_PROMPT.format(
                name=self.goal.name, email=self.goal.email, goal=self.goal.text(), stop=STOP
            ),
            "assistant": ASSISTANT_PROMPT.format(tools=tools),
        }
        info = {"goal": self.goal.text(), "requests": [r.kind for r in self.goal.requests]}
        return dict(self._obs), {"user": dict(info), "assistant": {}}

    def _run_tools(self, action: Any) -> str | None:
        parsed = parse_action(action, self.tools, CALL_FORMATS)
        if not parsed.has_calls:
            return None
        by_name = {t.name: t for t in self.tools}
        out = []
        for item in parsed.items:
            if not isinstance(item, ToolCall) or item.args is None:
                out.append(f"Tool call error: {item.message}")  # type: ignore[union-attr]
                continue
            result = _call_now(by_name[item.name].call(item.args))
            out.append(f"{item.name} -> {result.text}")
        return "\n".join(out)

    def mismatch(self) -> list[str]:
        """Order ids whose final row differs from the goal's expected state."""
        now = {r[0]: r for r in self.shop.snapshot()["orders"]}
        want = {r[0]: r for r in self.expected["orders"]}
        return sorted(k for k in now.keys() | want.keys() if now.get(k) != want.get(k))

    def step(self, actions: Mapping[str, Any]) -> MultiStepResult:
        """Deliver the speaker's message or run the assistant's tool calls."""
        valid, problems = self.split_actions(actions)
        rewards = self.per_agent(0.0)
        infos: dict[str, dict[str, Any]] = self.per_agent({})
        over = not self.agents
        terminated, truncated = self.per_agent(over), self.per_agent(False)
        for a, note in problems.items():
            if over or a not in self.current_agents:
                self._obs[a] = note
        speaker = self.turn
        if over or speaker not in valid:
            if not over and speaker in problems:
                self._obs[speaker] = problems[speaker]
            return dict(self._obs), rewards, terminated, truncated, infos
        self.moves += 1
        action = valid[speaker]
        ended = False
        if speaker == "assistant":
            results = self._run_tools(action)
            if results is not None:
                self.transcript.append(("tool", results))
                self._obs["assistant"] = results
            else:
                text = _message_text(action)
                self.transcript.append(("assistant", text))
                self._obs["user"] = text
                self.turn = "user"
        else:
            text = _message_text(action)
            self.transcript.append(("user", text))
            ended = STOP in text
            self._obs["assistant"] = f"Customer: {text}"
            self.turn = "assistant"
        if ended or self.moves >= self.max_turns:
            self.agents = []
            terminated = self.per_agent(ended)
            truncated = self.per_agent(not ended)
            wrong = self.mismatch()
            reward = 0.0 if wrong else 1.0
            rewards = self.per_agent(reward)
            for a in self.possible_agents:
                infos[a].update(success=not wrong, mismatch=wrong, turns=self.moves)
            end = "The customer ended the chat." if ended else "Out of turns: the chat is over."
            self._obs = {a: f"{self._obs[a]}\n\n{end}" for a in self.possible_agents}
        return dict(self._obs), rewards, terminated, truncated, infos

    def render(self) -> str:
        """The conversation so far."""
        return "\n".join(f"[{who}] {text}" for who, text in self.transcript)


def _message_text(action: Any) -> str:
    if isinstance(action, Mapping):
        content = action.get("content")
        return content if isinstance(content, str) else ""
    return action if isinstance(action, str) else str(action)


def _call_now(coro: Any) -> ToolResult:
    # the shop tools are sync functions run with thread=False, so `call` finishes without
    # suspending: drive it one step instead of starting an event loop inside `step`
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    coro.close()
    raise RuntimeError("a shop tool awaited real I/O; shop tools must be sync with thread=False")


# -- scripted agents -------------------------------------------------------------------------


class ScriptedUser(SyncPolicy):
    """A customer that states its goal, gives its email when asked, says yes to a
    confirmation, and ends the chat (`###STOP###`) once the assistant reports back."""

    def __init__(self, max_messages: int = 8, **_: object):
        self.max_messages = max_messages
        self.reset()

    def reset(self) -> None:
        """Forget the conversation."""
        self.email = ""
        self.goal = ""
        self.sent = 0

    def choose(self, observation: str) -> str:
        """The customer's next message."""
        self.sent += 1
        if not self.goal:
            m = re.search(r"account email is (\S+?)\. You want to (.+?)\.\n", observation)
            if m:
                self.email, self.goal = m.group(1), m.group(2)
                return f"Hi! My email is {self.email}. I'd like to {self.goal}."
        text = observation.lower()
        if self.sent > self.max_messages:
            return f"Never mind, goodbye. {STOP}"
        if "email" in text and "?" in text:
            return f"Sure, it's {self.email}."
        if "confirm" in text or "proceed" in text:
            return "Yes, please go ahead."
        if "?" in text:
            return f"As I said, I'd like to {self.goal}."
        return f"Thank you, that's all. {STOP}"


class ScriptedAssistant(SyncPolicy):
    """Solves the scripted user's requests: authenticate by email, then one tool per request."""

    def __init__(self, **_: object):
        self.reset()

    def reset(self) -> None:
        """Forget the conversation."""
        self.plan: list[dict[str, Any]] = []
        self.done: list[str] = []
        self.email = ""

    def choose(self, observation: str) -> str:
        """The next tool call, or a message to the customer."""
        if observation.startswith("Customer:"):
            emails = EMAIL_RE.findall(observation)
            self.email = emails[-1].rstrip(".") if emails else self.email
            if not self.email:
                return "Could you tell me the email address on your account?"
            self.plan = [{"name": "find_user_by_email", "arguments": {"email": self.email}}]
            self.done = []
            for order_id, size in MODIFY_RE.findall(observation):
                self.plan.append(call("modify_order_size", order_id=order_id, size=size))
                self.done.append(f"order {order_id} is now size {size.upper()}")
            for order_id in CANCEL_RE.findall(observation):
                self.plan.append(call("cancel_order", order_id=order_id))
                self.done.append(f"order {order_id} is cancelled")
            for order_id in REFUND_RE.findall(observation):
                self.plan.append(call("refund_order", order_id=order_id))
                self.done.append(f"order {order_id} is refunded")
        if self.plan:
            step = self.plan.pop(0)
            return f"<tool_call>{json.dumps(step)}</tool_call>"
        if self.done:
            summary = "; ".join(self.done)
            self.done = []
            return f"All done: {summary}."
        return "How can I help you today?"


def call(name: str, **arguments: Any) -> dict[str, Any]:
    """A tool call as the `{"name", "arguments"}` dict of a Hermes `<tool_call>` block."""
    return {"name": name, "arguments": arguments}


def llm_user(client: Any, **sampling: Any) -> Any:
    """An `LLMPolicy` that plays the customer (its first observation is the goal prompt)."""
    from gemkit.llm.chat_policy import LLMPolicy

    return LLMPolicy(
        client,
        system_prompt="You role-play a customer. Never act as the assistant; never call tools.",
        **sampling,
    )
