"""ToolEnvWrapper: tool calls run and answer, final answers reach the task, nothing raises."""

from __future__ import annotations

import asyncio
import json
import re
import sys
import threading
import types

import numpy as np
import pytest
from pydantic import BaseModel

import gemkit
from gemkit.core import Env, ObservationWrapper
from gemkit.errors import GemkitError
from gemkit.tools import Tool, ToolEnvWrapper, ToolError, ToolResult, tool, wrap_with_tools
from gemkit.tools.wrapper import LIMIT_WARNINGS


class Quiz(Env):
    """A single-turn task: answer 'What is 2 + 3?'; records every action it receives."""

    def __init__(self):
        self.received: list[str] = []
        self.closed = False

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.received = []
        return "What is 2 + 3?", {"task": "add"}

    def step(self, action):
        self.received.append(action)
        ok = "5" in action
        return ("Correct." if ok else "Wrong."), float(ok), True, False, {"success": ok}

    def close(self):
        self.closed = True


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
async def echo(text: str) -> str:
    """Echo text back."""
    return text


class Counter(Tool):
    """A stateful tool: counts its calls in an episode; `reset` and `close` are observable."""

    name = "count"
    description = "Count calls."

    class Args(BaseModel):
        step: int = 1

    def __init__(self):
        self.n = 0
        self.resets = 0
        self.closed = False

    async def call(self, args):
        self.n += args.step
        return ToolResult(str(self.n))

    async def reset(self):
        self.n = 0
        self.resets += 1

    async def close(self):
        self.closed = True


def call(name: str, **arguments) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def make(tools=(add, echo), **kw) -> tuple[ToolEnvWrapper, Quiz]:
    inner = Quiz()
    return ToolEnvWrapper(inner, list(tools), **kw), inner


# -- reset ---------------------------------------------------------------------------------------


def test_reset_resets_tools_and_appends_instructions_and_schemas():
    counter = Counter()
    env, _ = make((add, counter), max_tool_uses=4)
    obs, info = env.reset(seed=0)
    assert obs.startswith("What is 2 + 3?\n\n# Tools")
    assert json.dumps(add.openai_schema()) in obs
    assert "<tool_call>" in obs and "at most 4 tool calls" in obs
    assert info["tools"] == [add.openai_schema(), counter.openai_schema()]
    assert info["task"] == "add" and info["tool_uses"] == 0
    assert counter.resets == 1


def test_instructions_can_be_turned_off_or_replaced():
    env, _ = make(instructions=False)
    obs, info = env.reset()
    assert obs == "What is 2 + 3?" and len(info["tools"]) == 2
    env, _ = make(instructions="Tools:\n{tools}\nUse them.")
    obs, _ = env.reset()
    assert obs.startswith("What is 2 + 3?\n\nTools:\n<tools>\n{") and obs.endswith(
        "</tools>\nUse them."
    )


# -- calls ---------------------------------------------------------------------------------------


def test_tool_call_is_answered_and_the_task_is_not_stepped():
    env, inner = make()
    env.reset()
    obs, reward, terminated, truncated, info = env.step("Let me add. " + call("add", a=2, b=3))
    assert obs == "[tool result: add (id call_0)]\n5"
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert inner.received == []
    assert info["tool_calls"] == 1 and info["tool_uses"] == 1
    assert info["tool_results"] == [
        {"tool_call_id": "call_0", "name": "add", "content": "5", "is_error": False}
    ]
    assert info["parsed_calls"] == [
        {
            "id": "call_0",
            "name": "add",
            "arguments": {"a": 2, "b": 3},
            "format": "hermes",
            "raw": call("add", a=2, b=3),
        }
    ]


def test_final_answer_passes_through_unchanged():
    env, inner = make()
    env.reset()
    env.step("<echo>thinking aloud</echo>")
    answer = "<think>2 + 3 = <echo>5</echo></think>The answer is 5."
    obs, reward, terminated, _, info = env.step(answer)
    assert inner.received == [answer]
    assert (obs, reward, terminated, info["success"]) == ("Correct.", 1.0, True, True)
    assert info["tool_calls"] == 0 and info["tool_uses"] == 1


def test_openai_messages_get_their_ids_back_and_content_is_the_answer():
    env, inner = make()
    env.reset()
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "abc",
                "type": "function",
                "function": {"name": "add", "arguments": '{"a": 1, "b": 1}'},
            },
            {"id": "def", "type": "function", "function": {"name": "nope", "arguments": "{}"}},
        ],
    }
    _, _, _, _, info = env.step(message)
    assert [(r["tool_call_id"], r["is_error"]) for r in info["tool_results"]] == [
        ("abc", False),
        ("def", True),
    ]
    env.step({"role": "assistant", "content": "It is 5.", "tool_calls": []})
    assert inner.received == ["It is 5."]


def test_several_calls_answer_in_order_with_headers():
    env, _ = make()
    env.reset()
    obs, _, _, _, info = env.step("<echo>one</echo>" + call("add", a=1, b=1) + "<echo>three</echo>")
    assert obs == (
        "[tool result 1/3: echo (id call_0)]\none\n\n"
        "[tool result 2/3: add (id call_1)]\n2\n\n"
        "[tool result 3/3: echo (id call_2)]\nthree"
    )
    assert info["tool_calls"] == 3 and info["tool_uses"] == 3


def test_parallel_safe_calls_run_concurrently():
    # each tool sets its own event and waits for the other's: only concurrent calls finish
    events: dict[str, asyncio.Event] = {}

    @tool
    async def ping() -> str:
        """Ping."""
        events["ping"].set()
        await events["pong"].wait()
        return "ping done"

    @tool
    async def pong() -> str:
        """Pong."""
        events["pong"].set()
        await events["ping"].wait()
        return "pong done"

    async def episode(parallel: bool) -> dict:
        events.update(ping=asyncio.Event(), pong=asyncio.Event())
        env = ToolEnvWrapper(Quiz(), [ping, pong], parallel=parallel, call_timeout=0.2)
        await env.areset()
        _, _, _, _, info = await env.astep(call("ping") + call("pong"))
        return info

    together = asyncio.run(episode(parallel=True))
    assert [r["content"] for r in together["tool_results"]] == ["ping done", "pong done"]
    one_by_one = asyncio.run(episode(parallel=False))
    assert one_by_one["tool_results"][0]["is_error"]
    assert "timed out" in one_by_one["tool_results"][0]["content"]


def test_a_tool_that_is_not_parallel_safe_keeps_the_calls_sequential():
    log: list[str] = []

    async def work(tag: str) -> str:
        log.append(f"start {tag}")
        await asyncio.sleep(0)
        log.append(f"end {tag}")
        return tag

    safe = tool(work, name="safe")
    unsafe = tool(work, name="unsafe", parallel_safe=False)
    env, _ = make((safe, unsafe))
    env.reset()
    env.step("<safe>a</safe><safe>b</safe>")
    assert log == ["start a", "start b", "end a", "end b"]
    log.clear()
    env.step("<safe>a</safe><unsafe>b</unsafe>")
    assert log == ["start a", "end a", "start b", "end b"]


def test_call_timeout_turns_a_hanging_call_into_an_error():
    @tool
    async def hang() -> str:
        """Never returns."""
        await asyncio.Event().wait()
        return "unreachable"

    env, _ = make((hang, echo), call_timeout=0.05)
    env.reset()
    obs, _, _, _, info = env.step(call("hang") + "<echo>after</echo>")
    assert obs.startswith("[tool error 1/2: hang (id call_0)]\nError: hang timed out after 0.05 s")
    assert info["tool_results"][1]["content"] == "after"


def test_timed_out_sync_tool_does_not_block_the_sync_step():
    release = threading.Event()

    @tool
    def block() -> str:
        """Blocks until released."""
        release.wait(10)
        return "released"

    env, _ = make((block,), call_timeout=0.05)
    env.reset()
    try:
        _, _, _, _, info = env.step(call("block"))
        assert info["tool_results"][0]["is_error"]
        assert "timed out" in info["tool_results"][0]["content"]
    finally:
        release.set()


def test_episode_timeout_caps_the_total_tool_time():
    @tool
    async def hang() -> str:
        """Never returns."""
        await asyncio.Event().wait()
        return "unreachable"

    env, _ = make((hang, echo), call_timeout=30, episode_timeout=0.05)
    env.reset()
    _, _, _, _, info = env.step(call("hang"))
    assert "(episode_timeout)" in info["tool_results"][0]["content"]
    _, _, _, _, info = env.step("<echo>x</echo>")
    assert info["tool_results"][0]["content"].startswith("Not run: the episode's tool time")


def test_a_tool_that_raises_gives_an_error_result():
    class Broken(Tool):
        name = "broken"
        description = "Always fails."

        class Args(BaseModel):
            pass

        async def call(self, args):
            raise RuntimeError("disk on fire")

    env, _ = make((Broken(),))
    env.reset()
    obs, *_ = env.step(call("broken"))
    assert (
        obs == "[tool error: broken (id call_0)]\nError: broken failed: RuntimeError: disk on fire"
    )


def test_rewards_shape_successful_and_failed_calls():
    env, _ = make(tool_reward=0.1, error_reward=-0.5)
    env.reset()
    _, reward, *_ = env.step("<echo>a</echo><echo>b</echo>" + call("add", a="x", b=1))
    assert reward == pytest.approx(0.1 * 2 - 0.5)


def test_parse_error_is_an_observation_and_the_task_is_not_stepped():
    env, inner = make()
    env.reset()
    obs, reward, terminated, truncated, info = env.step('<tool_call>{"name": "add", </tool_call>')
    assert obs.startswith("[tool error: unparsed call (id call_0)]\nError: malformed JSON")
    assert (reward, terminated, truncated, inner.received) == (0.0, False, False, [])
    assert info["tool_errors"] == 1 and info["tool_uses"] == 1


def test_long_results_are_cut_when_asked():
    env, _ = make(max_result_chars=10)
    env.reset()
    _, _, _, _, info = env.step("<echo>" + "x" * 25 + "</echo>")
    assert info["tool_results"][0]["content"] == "x" * 10 + "\n[... 15 more characters cut]"


# -- the tool-use limit -----------------------------------------------------------------------


def test_tool_use_limit_asks_for_the_answer_then_truncates():
    counter = Counter()
    env, inner = make((counter,), max_tool_uses=2)
    env.reset()
    env.step('<tool_call>{"name": "count"}</tool_call>')
    obs, _, _, truncated, info = env.step('<tool_call>{"name": "count"}</tool_call>')
    assert counter.n == 2 and not truncated
    assert obs.endswith(
        "You have used all 2 tool calls: give your final answer now, without calling a tool."
    )
    for _ in range(LIMIT_WARNINGS):
        obs, _, _, truncated, info = env.step('<tool_call>{"name": "count"}</tool_call>')
        assert counter.n == 2 and not truncated  # the call is not run
        assert "Not run: you have used all 2 tool calls. Give your final answer now" in obs
    obs, _, terminated, truncated, info = env.step('<tool_call>{"name": "count"}</tool_call>')
    assert (terminated, truncated, info["tool_limit_exceeded"], counter.n) == (False, True, True, 2)
    assert inner.received == []


def test_tool_calls_after_the_end_earn_no_tool_reward():
    # shaping rewards per call must not be farmed by a loop that ignores `terminated`
    env, inner = make(tool_reward=0.5, error_reward=-0.25)
    env.reset()
    _, reward, _, _, _ = env.step(
        '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>'
    )
    assert reward == 0.5
    _, reward, terminated, _, _ = env.step("5")
    assert (reward, terminated) == (1.0, True)
    for _ in range(3):
        _, reward, _, _, _ = env.step(
            '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>'
        )
        assert reward == 0.0
    env.reset()
    _, reward, _, _, _ = env.step(
        '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>'
    )
    assert reward == 0.5


def test_an_answer_after_the_limit_truncated_the_episode_is_not_graded():
    # a loop that ignores `truncated` must not get the inner env to grade a later answer
    counter = Counter()
    env, inner = make((counter,), max_tool_uses=0)
    env.reset()
    for _ in range(LIMIT_WARNINGS + 1):
        _, _, _, truncated, _ = env.step('<tool_call>{"name": "count"}</tool_call>')
    assert truncated
    for action in ("5", '<tool_call>{"name": "count"}</tool_call>'):  # "5" is right
        obs, reward, terminated, truncated, info = env.step(action)
        assert (reward, terminated, truncated, counter.n) == (0.0, False, True, 0)
        assert "truncated at the tool-call limit" in obs and info["tool_limit_exceeded"]
    assert inner.received == []
    env.reset()
    _, reward, terminated, _, _ = env.step("5")
    assert (inner.received, reward, terminated) == (["5"], 1.0, True)


def test_calls_beyond_the_limit_in_one_action_are_not_run():
    counter = Counter()
    env, _ = make((counter,), max_tool_uses=1)
    env.reset()
    _, _, _, _, info = env.step('<tool_call>{"name": "count"}</tool_call>' * 3)
    assert counter.n == 1 and info["tool_uses"] == 1 and info["tool_calls"] == 3
    assert [r["is_error"] for r in info["tool_results"]] == [False, True, True]


def test_reset_restores_the_tool_budget():
    env, _ = make(max_tool_uses=1)
    env.reset()
    env.step("<echo>a</echo>")
    env.reset()
    _, _, _, _, info = env.step("<echo>b</echo>")
    assert info["tool_results"][0] == {
        "tool_call_id": "call_0",
        "name": "echo",
        "content": "b",
        "is_error": False,
    }


# -- single-turn task → tool task ------------------------------------------------------------


def test_make_with_tools_turns_a_game_into_a_tool_task():
    env = gemkit.make("game:GuessTheNumber-v0-easy", tools=[add])
    assert isinstance(env, ToolEnvWrapper)
    obs, info = env.reset(seed=3)
    assert "Guess it" in obs and info["tools"][0]["function"]["name"] == "add"
    lo, hi = 1, 20
    obs, *_ = env.step(call("add", a=lo, b=hi))
    mid = int(obs.rsplit("\n", 1)[1]) // 2
    for _ in range(8):
        obs, reward, terminated, truncated, info = env.step(f"\\boxed{{{mid}}}")
        if terminated or truncated:
            break
        if "too low" in obs:
            lo = mid + 1
        else:
            hi = mid - 1
        mid = (lo + hi) // 2
    assert terminated and info["success"] and reward == 1.0
    env.close()


def test_async_episode_and_sync_step_inside_a_loop():
    env, inner = make()

    async def main() -> tuple:
        await env.areset()
        await env.astep("<echo>hi</echo>")
        with pytest.raises(GemkitError, match="running event loop; use `await env.astep"):
            env.step("5")
        return await env.astep("5")

    _, reward, terminated, _, _ = asyncio.run(main())
    assert (reward, terminated, inner.received) == (1.0, True, ["5"])
    assert env.runs_sync() is False


def test_close_closes_tools_and_the_inner_env():
    counter = Counter()
    env, inner = make((counter,))
    env.reset()
    env.close()
    assert counter.closed and inner.closed


def test_close_inside_a_running_loop_closes_at_once_what_does_not_wait():
    counter = Counter()
    env, inner = make((counter,))

    async def main() -> None:
        await env.areset()
        env.close()  # asyncio.run cancels leftover tasks right after this returns

    asyncio.run(main())
    assert counter.closed and inner.closed


def test_close_inside_a_running_loop_finishes_a_waiting_close_on_the_loop():
    class Slow(Counter):
        async def close(self):
            await self.gate.wait()
            self.closed = True

    slow = Slow()
    env, inner = make((slow,))

    async def main() -> tuple[bool, bool]:
        slow.gate = asyncio.Event()
        await env.areset()
        env.close()
        before = slow.closed
        slow.gate.set()
        for _ in range(5):
            await asyncio.sleep(0)
        return before, slow.closed

    assert asyncio.run(main()) == (False, True)
    assert inner.closed


# -- clone ----------------------------------------------------------------------------------------


class Session(Tool):
    """Holds a lock (a stand-in for a process), so it cannot be deep-copied."""

    name = "session"
    description = "A live session."

    class Args(BaseModel):
        code: str

    def __init__(self):
        self.lock = threading.Lock()
        self.history: list[str] = []

    async def call(self, args):
        self.history.append(args.code)
        return ToolResult(str(len(self.history)))

    def clone(self):
        return Session()


def test_clone_copies_the_episode_and_gives_fresh_tools():
    env = ToolEnvWrapper(gemkit.make("game:GuessTheNumber-v0-easy"), [Session(), add])
    env.reset(seed=5)
    env.step("<session>x = 1</session>")
    twin = env.clone()
    assert twin.tool_uses == env.tool_uses == 1
    assert twin.tools[0] is not env.tools[0] and twin.tools[0].history == []
    assert twin.tools[1] is not env.tools[1]
    a = env.step("\\boxed{7}")
    b = twin.step("\\boxed{7}")
    assert a[:4] == b[:4]
    _, _, _, _, info = twin.step("<session>y</session>")
    assert info["tool_uses"] == 2 and env.tools[0].history == ["x = 1"]


def test_wrappers_above_clone_it_with_fresh_tools():
    class Shout(ObservationWrapper):
        def observation(self, observation):
            return observation.upper()

    env = Shout(ToolEnvWrapper(Quiz(), [Session()]))
    env.reset()
    env.step("<session>a</session>")  # the sync step leaves a private event loop behind
    twin = env.clone()
    assert twin.env.tools[0] is not env.env.tools[0] and twin.env.tools[0].history == []
    assert twin.step("<session>b</session>")[0] == "[TOOL RESULT: SESSION (ID CALL_1)]\n1"


def test_clone_of_a_live_tool_without_clone_is_a_clear_error():
    class Live(Session):
        clone = Tool.clone  # the default: deepcopy, which a lock refuses

    env, _ = make((Live(),))
    with pytest.raises(ToolError, match="must implement clone"):
        env.clone()


# -- resolving tools and MCP --------------------------------------------------------------------


def test_wrap_with_tools_accepts_objects_functions_and_classes():
    def mul(a: int, b: int) -> int:
        """Multiply."""
        return a * b

    env = wrap_with_tools(Quiz(), [add, mul, Counter], max_tool_uses=3)
    assert [t.name for t in env.tools] == ["add", "mul", "count"]
    env.reset()
    assert env.step('<mul>{"a": 6, "b": 7}</mul>')[0].endswith("\n42")


def test_unknown_or_unavailable_tool_names_are_clear_errors(monkeypatch):
    with pytest.raises(ToolError, match=r"unknown tool name 'pyton'.*Did you mean 'python'"):
        wrap_with_tools(Quiz(), ["pyton"])
    monkeypatch.setitem(sys.modules, "gemkit.tools.python", None)  # import fails
    with pytest.raises(ToolError, match="tool 'python' is not available"):
        wrap_with_tools(Quiz(), ["python"])
    with pytest.raises(ToolError, match="cannot use 42 as a tool"):
        wrap_with_tools(Quiz(), [42])
    with pytest.raises(ToolError, match="two tools are named 'add'"):
        wrap_with_tools(Quiz(), [add, add])


def test_a_missing_mcp_sdk_is_said_when_the_env_is_built(monkeypatch):
    # the SDK missing: the wrapper refuses at once, before any server starts or handshake
    monkeypatch.setitem(sys.modules, "mcp", None)
    with pytest.raises(GemkitError, match=r"pip install 'gemkit\[mcp\]'"):
        wrap_with_tools(Quiz(), mcp="npx some-server")


def test_mcp_toolset_tools_are_listed_at_reset_and_closed_with_the_env(monkeypatch):
    class FakeToolset:
        def __init__(self, spec):
            self.spec, self.closed = spec, False

        @classmethod
        def from_spec(cls, spec):
            return cls(spec)

        async def tools(self):
            return [echo]

        async def close(self):
            self.closed = True

    monkeypatch.setitem(
        sys.modules, "gemkit.tools.mcp", types.SimpleNamespace(MCPToolset=FakeToolset)
    )
    env = gemkit.make("game:GuessTheNumber-v0-easy", tools=[add], mcp="http://localhost:1/mcp")
    _, info = env.reset(seed=0)
    assert [s["function"]["name"] for s in info["tools"]] == ["add", "echo"]
    assert env.step("<echo>via mcp</echo>")[0].endswith("via mcp")
    toolset = env.toolsets[0]
    assert toolset.spec == "http://localhost:1/mcp"
    env.close()
    assert toolset.closed


# -- fuzz -----------------------------------------------------------------------------------------

MARKER = re.compile(r"</?(?:tool_call|add|echo)>")


def visible(text: str) -> str:
    """The text outside reasoning: a block runs from <think> to the next </think> (or the end);
    a </think> outside any block closes a block the chat template opened, so what precedes it
    is reasoning too."""
    kept: list[str] = []
    inside = False
    for token in re.split(r"(</?think>)", text):
        if token == "<think>":
            inside = True
        elif token == "</think>":
            kept = kept if inside else []
            inside = False
        elif not inside:
            kept.append(token)
    return "".join(kept)


def attempts_a_call(action) -> bool:
    """Precisely when an action is a tool-call attempt rather than a final answer."""
    if isinstance(action, dict):
        calls = action.get("tool_calls")
        if isinstance(calls, list) and calls:
            return True
        action = action.get("content") or ""
    return bool(MARKER.search(visible(action)))


GOOD = '{"name": "add", "arguments": {"a": 1, "b": 2}}'
JUNK_ALPHABET = list('abc xyz<>/{}[]":,\\\n') + [
    "tool_call",
    "echo",
    "add",
    "think",
    "é",
    "\u2603",
    "\x00",
]


def fuzz_actions(n: int, seed: int = 0) -> list[tuple[object, bool]]:
    """(action, surely_malformed) pairs: each kind of broken call plus random junk."""
    rng = np.random.default_rng(seed)

    def junk(k: int) -> str:
        return "".join(rng.choice(JUNK_ALPHABET, size=k))

    def plain(k: int) -> str:
        return "".join(rng.choice(list("abcdefghij klmnop\u00e9\u4e2d\U0001f600"), size=k))

    makers = [
        lambda: ("<tool_call>" + GOOD[: rng.integers(1, len(GOOD))] + "</tool_call>", True),
        lambda: ("<echo>" + plain(int(rng.integers(0, 50))), True),
        lambda: (f"<tool_call>{GOOD}", True),
        lambda: (call("t" + plain(5).replace(" ", ""), x=1), True),
        lambda: (call("add", a=["x", None, 1.5, {}, [1]][rng.integers(5)], b=2), True),
        lambda: (call("add", a=1), True),
        lambda: (call("add", a=1, b=2, c=3), True),
        lambda: ("<echo>" + "y" * int(rng.integers(10_000, 200_000)) + "</echo>", False),
        lambda: ("z" * int(rng.integers(10_000, 200_000)), False),
        lambda: (plain(int(rng.integers(0, 200))), False),
        lambda: ("<echo><echo>x</echo></echo>", True),
        lambda: (f"<tool_call><tool_call>{GOOD}</tool_call></tool_call>", True),
        lambda: ("<add>" + plain(8) + "</add>", True),
        lambda: (f"<think><tool_call>{GOOD[:9]}</think> answer 5", False),
        lambda: (f"{GOOD}</tool_call>", True),
        lambda: (
            {
                "role": "assistant",
                "tool_calls": [{"id": "q", "function": {"name": "add", "arguments": GOOD[:-3]}}],
            },
            True,
        ),
        lambda: ({"role": "assistant", "tool_calls": [plain(4)]}, True),
        lambda: ({"role": "assistant", "content": plain(30)}, False),
        lambda: (junk(int(rng.integers(1, 120))), False),
        lambda: (junk(int(rng.integers(1, 120))), False),
        lambda: (
            '<tool_call>{"name": "add", "arguments": {"a": '
            + "9" * 5000
            + ', "b": 1}}</tool_call>',
            False,  # an error only where Python caps int digits (>= 3.10.7)
        ),
        lambda: ("<tool_call>" + "[" * 100_000 + "</tool_call>", True),
        lambda: ("<think>" * 20_000 + "answer 5", False),
        lambda: (
            '<tool_call>{"name":\r\n "add",\u2028 "arguments": {"a": 1 "b": 2}}</tool_call>',
            True,
        ),
    ]
    return [makers[int(rng.integers(len(makers)))]() for _ in range(n)]


def test_fuzzed_malformed_actions_never_raise_and_get_an_error_or_reach_the_task():
    actions = fuzz_actions(200)
    kinds = {attempts_a_call(a) for a, _ in actions}
    assert kinds == {True, False}  # the sample covers both sides
    env, inner = make(max_tool_uses=None)
    env.reset(seed=0)
    for action, malformed in actions:
        before = len(inner.received)
        obs, reward, terminated, truncated, info = env.step(action)
        assert isinstance(obs, str) and "Traceback" not in obs
        if attempts_a_call(action):
            assert len(inner.received) == before, action
            assert obs.startswith("[tool "), (action, obs)
            assert info["tool_calls"] == len(info["tool_results"]) >= 1
            assert (terminated, truncated) == (False, False)
            if malformed:
                assert info["tool_errors"] >= 1, (action, obs)
                assert re.search(r"\[tool error( \d+/\d+)?: ", obs)
        else:
            assert not malformed, action
            expected = action.get("content") if isinstance(action, dict) else action
            assert inner.received[before:] == [expected]
            assert info["tool_calls"] == 0


# -- a ```python block without a final answer is a call of the python tool ---------------------


@tool
def python(code: str) -> str:
    """Run Python code (here: report what would run)."""
    return f"ran {len(code.splitlines())} lines"


class CodeQuiz(Quiz):
    """A task answered with code: its ```python blocks are answers, never tool calls."""

    answers_in_code = True


FENCED = "Let me compute it.\n```python\na = 2\nprint(a + 3)\n```"


def test_a_python_block_without_a_final_answer_runs_the_python_tool():
    # the real Qwen2.5-Coder-0.5B wrote this under --tools python in 3 of 7 episodes that
    # computed: graded, each was a missed call scored as a wrong answer
    env = ToolEnvWrapper(Quiz(), [python])
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(FENCED)
    assert "ran 2 lines" in obs
    assert not terminated and env.env.received == [], "the task saw no answer"
    assert info["parsed_calls"][0]["format"] == "fence"
    assert info["parsed_calls"][0]["arguments"] == {"code": "a = 2\nprint(a + 3)"}


@pytest.mark.parametrize("answer", ["\\boxed{5}", "<answer>5</answer>"])
def test_a_python_block_beside_a_final_answer_is_the_answer(answer):
    env = ToolEnvWrapper(Quiz(), [python])
    env.reset(seed=0)
    _, reward, terminated, _, _ = env.step(f"{FENCED}\nSo the answer is {answer}.")
    assert terminated and reward == 1.0
    assert len(env.env.received) == 1


def test_a_python_block_is_an_answer_where_answers_are_code_or_without_a_python_tool():
    for env in (ToolEnvWrapper(CodeQuiz(), [python]), ToolEnvWrapper(Quiz(), [add])):
        env.reset(seed=0)
        _, reward, terminated, _, _ = env.step(FENCED)
        assert terminated and env.env.received == [FENCED]


def test_run_fenced_code_false_leaves_python_blocks_to_the_task():
    env = ToolEnvWrapper(Quiz(), [python], run_fenced_code=False)
    env.reset(seed=0)
    _, _, terminated, _, _ = env.step(FENCED)
    assert terminated and env.env.received == [FENCED]


def test_a_cut_python_block_without_a_final_answer_is_an_error_observation():
    env = ToolEnvWrapper(Quiz(), [python])
    env.reset(seed=0)
    obs, _, terminated, _, info = env.step("```python\nprint(2 +")
    assert not terminated and "missing closing ``` after ```python" in obs
    assert info["tool_errors"] == 1


def test_the_code_env_answers_in_code():
    from gemkit.envs.code.env import CodeEnv

    assert CodeEnv.answers_in_code and not Quiz.answers_in_code
