"""`ToolEnvWrapper`: run the tool calls in an action and answer with their results.

The inner env only ever sees final answers (actions without a call attempt), so any
single-turn task becomes a multi-turn tool-use task with no change to the task.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import time
from collections.abc import Awaitable, Iterable, Sequence
from typing import Any, ClassVar, TypeVar

import gymnasium

from gemkit.core import ResetResult, StepResult, Wrapper, areset_of, astep_of, clone_of
from gemkit.errors import GemkitError
from gemkit.tools.base import Tool, ToolError, ToolResult
from gemkit.tools.calls.model import DEFAULT_FORMATS, FORMATS, MalformedCall, ToolCall
from gemkit.tools.calls.parse import is_code_for_python, parse_action
from gemkit.tools.coerce import as_tool, clone_tool
from gemkit.tools.eager import start_eagerly
from gemkit.tools.execution import run_call
from gemkit.tools.instructions import tool_instructions
from gemkit.tools.rendering import call_records, render_results

log = logging.getLogger(__name__)

T = TypeVar("T")

#: over-limit actions answered with "give your final answer now" before the episode is truncated
LIMIT_WARNINGS = 1
#: the answer to any action after the tool-call limit truncated the episode
TRUNCATED_TEXT = (
    "The episode is over: it was truncated at the tool-call limit. Call reset() to start a new one."
)


class ToolEnvWrapper(Wrapper):
    """Intercepts tool calls in each action, runs them, and returns their results.

    - **reset** resets every tool and appends the tool instructions and OpenAI schemas to the
      observation (`instructions=False` leaves it unchanged, a string replaces the default
      text, with `{tools}` standing for the schemas); `info["tools"]` holds the schemas.
    - **step** with call attempts runs the well-formed calls (concurrently when `parallel`
      and every tool called is `parallel_safe`, otherwise in order), each under
      `call_timeout` seconds and the `episode_timeout` budget of tool time, and answers with
      their results in order; malformed attempts get an error result in their slot. The
      inner env is not stepped; reward is `tool_reward` per successful call plus
      `error_reward` per failed one. `info["tool_results"]` lists
      `{"tool_call_id", "name", "content", "is_error"}` for chat-history wrappers.
    - **step** without a call attempt passes the action (for an OpenAI message, its content)
      to the inner env. With `run_fenced_code` (default) and a `python` tool, a reply holding
      a ```python block and no final answer (no `\\boxed{}` or `<answer>`) is a call of that
      tool, as a model that writes code to compute means it: graded, it would be a missed
      call scored as a wrong answer. Not in an env whose answers are code
      (`Env.answers_in_code`), nor with "fence" in `formats` (every block is a call then).
    - Every call attempt counts towards `max_tool_uses`. Attempts beyond it are not run:
      the model is told to give its final answer; after `LIMIT_WARNINGS` such warnings the
      next over-limit action truncates the episode, so every episode ends. Any action after
      that (until `reset`) is answered with reward 0 and `truncated`: the inner env, which
      never ended, grades no answer given once the episode is over. Tool calls made after
      the inner env ended the episode earn no `tool_reward` (nor `error_reward`).

    `info` always carries `tool_calls` (attempts in this step) and `tool_uses` (so far).
    `step`/`reset` run on a private event loop kept for the wrapper's life, so tools that
    hold loop-bound resources work across sync steps; inside a running loop use `astep`.
    Actions may be assistant message dicts (`accepts_message_actions`): native `tool_calls`
    keep the ids the model server gave them.
    """

    #: a history wrapper right above may hand over message dicts instead of their text
    accepts_message_actions: ClassVar[bool] = True
    #: once the inner env ends the episode, run no tool until reset (later actions go to it)
    closed_after_end: ClassVar[bool] = False

    def __init__(
        self,
        env: gymnasium.Env,
        tools: Iterable[Any] = (),
        *,
        max_tool_uses: int | None = 10,
        call_timeout: float | None = 30.0,
        episode_timeout: float | None = None,
        parallel: bool = True,
        tool_reward: float = 0.0,
        error_reward: float = 0.0,
        instructions: bool | str = True,
        formats: Sequence[str] = DEFAULT_FORMATS,
        max_result_chars: int | None = None,
        toolsets: Iterable[Any] = (),
        run_fenced_code: bool = True,
    ):
        super().__init__(env)
        bad = [f for f in formats if f not in FORMATS]
        if bad:
            raise ToolError(f"unknown call formats {bad}; choose from {list(FORMATS)}")
        if max_tool_uses is not None and max_tool_uses < 0:
            raise ToolError(f"max_tool_uses must be >= 0 or None, got {max_tool_uses}")
        for label, value in (("call_timeout", call_timeout), ("episode_timeout", episode_timeout)):
            if value is not None and value <= 0:
                raise ToolError(f"{label} must be a positive number of seconds or None")
        self.tools: list[Tool] = []
        self._schema_cache: tuple[tuple[int, ...], list[dict[str, Any]]] | None = None
        self._by_name: dict[str, Tool] = {}
        self._add_tools(as_tool(t) for t in tools)
        self.max_tool_uses = max_tool_uses
        self.call_timeout = call_timeout
        self.episode_timeout = episode_timeout
        self.parallel = parallel
        self.tool_reward = tool_reward
        self.error_reward = error_reward
        self.instructions = instructions
        self.formats = tuple(formats)
        self.run_fenced_code = run_fenced_code
        self.max_result_chars = max_result_chars
        self.toolsets = list(toolsets)
        self._toolsets_loaded = not self.toolsets
        self._owns_toolsets = True
        self.tool_uses = 0
        self.tool_time = 0.0
        self._warnings = 0
        self._next_id = 0
        self._over = False  # the inner env ended the episode: no tool runs until reset
        self._truncated = False  # the tool-call limit ended the episode: nothing runs until reset
        self._ended = False  # the inner env ended the episode: no tool call earns a reward
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pending: set[asyncio.Task[Any]] = set()

    # -- tools ---------------------------------------------------------------------------------

    def _add_tools(self, tools: Iterable[Tool]) -> None:
        for t in tools:
            if not t.name:
                raise ToolError(f"{t!r} has no name; set the `name` class attribute")
            if t.name in self._by_name:
                raise ToolError(f"two tools are named {t.name!r}; tool names must be unique")
            self.tools.append(t)
            self._by_name[t.name] = t

    async def _load_toolsets(self) -> None:
        if self._toolsets_loaded:
            return
        for toolset in self.toolsets:
            try:
                found = await toolset.tools()
            except Exception as e:
                raise ToolError(f"could not list the tools of {toolset!r}: {e}") from e
            self._add_tools(as_tool(t) for t in found)
        self._toolsets_loaded = True

    def schemas(self) -> list[dict[str, Any]]:
        """The OpenAI function schemas of the tools (built once: pydantic makes them slowly)."""
        key = tuple(id(t) for t in self.tools)
        if self._schema_cache is None or self._schema_cache[0] != key:
            self._schema_cache = (key, [t.openai_schema() for t in self.tools])
        return copy.deepcopy(self._schema_cache[1])

    def instructions_text(self) -> str:
        """The text appended to the first observation: schemas, call format, limits."""
        return tool_instructions(
            self.tools,
            self.schemas(),
            formats=self.formats,
            max_tool_uses=self.max_tool_uses,
            template=self.instructions if isinstance(self.instructions, str) else None,
        )

    # -- the episode -------------------------------------------------------------------------

    def episode_tools(self, info: dict[str, Any]) -> Sequence[Tool] | None:
        """The tools of the episode just reset (`info` is its reset info); None keeps them.

        A wrapper whose tools differ per episode (each task lists its own) overrides this;
        the instructions and schemas of the first observation then list those tools.
        """
        return None

    async def areset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> ResetResult:
        """Reset the env and every tool; add the tool instructions to the first observation."""
        await self._load_toolsets()
        obs, info = await areset_of(self.env, seed=seed, options=options)
        chosen = self.episode_tools(info)
        if chosen is not None and [id(t) for t in chosen] != [id(t) for t in self.tools]:
            self.replace_tools(chosen)
        for t in self.tools:
            try:
                await t.reset()
            except Exception as e:
                raise ToolError(f"tool {t.name!r} failed to reset: {type(e).__name__}: {e}") from e
        self.tool_uses = 0
        self.tool_time = 0.0
        self._warnings = 0
        self._next_id = 0
        self._over = False
        self._truncated = False
        self._ended = False
        if self.instructions and _is_chat(obs):
            # a chat history below the tools would drop the instructions and every call
            raise ToolError(
                "ToolEnvWrapper got a chat (a list of messages) from reset: put the tools "
                "right on the env and the history above them, ChatHistory(ToolEnvWrapper(env)) "
                "(gemkit.make(id, tools=..., wrappers=[ChatHistory]) does so)"
            )
        if self.instructions and isinstance(obs, str):
            obs = f"{obs}\n\n{self.instructions_text()}"
        info = {**info, "tools": self.schemas(), "tool_uses": 0}
        return obs, info

    async def astep(self, action: Any) -> StepResult:
        """Run the tool calls in `action`, or pass a final answer to the inner env.

        A tool result made with `ToolResult.final_answer` is a final answer too: the inner env
        grades it and its reply follows the tool results. With `closed_after_end`, once the
        inner env has ended the episode no tool runs: every later action goes to the inner
        env, which answers that the episode is over.
        """
        if self._truncated:
            # the inner env never ended: an answer now would still be graded
            return (
                TRUNCATED_TEXT,
                0.0,
                False,
                True,
                {"tool_calls": 0, "tool_uses": self.tool_uses, "tool_limit_exceeded": True},
            )
        if self._over:
            return self._counted(await astep_of(self.env, _text_of(action)))
        parsed = parse_action(action, self._by_name, self.formats)
        if not parsed.has_calls and self._code_is_a_call(parsed.answer or ""):
            parsed = parse_action(action, self._by_name, (*self.formats, "fence"))
        if not parsed.has_calls:
            result = await astep_of(self.env, parsed.answer or "")
            self._ended = self._ended or bool(result[2] or result[3])
            self._over = self.closed_after_end and self._ended
            return self._counted(result)
        return await self._run(parsed.items)

    def _code_is_a_call(self, text: str) -> bool:
        """Whether a reply without a call is code meant for the python tool, not an answer."""
        if not self.run_fenced_code or "fence" in self.formats:
            return False
        if getattr(self.env.unwrapped, "answers_in_code", False):
            return False
        return is_code_for_python(text, self._by_name)

    def _counted(self, result: StepResult) -> StepResult:
        obs, reward, terminated, truncated, info = result
        return (
            obs,
            reward,
            terminated,
            truncated,
            {**info, "tool_calls": 0, "tool_uses": self.tool_uses},
        )

    async def _run(self, items: list[ToolCall | MalformedCall]) -> StepResult:
        results: list[ToolResult | None] = [None] * len(items)
        ids = []
        for item in items:
            ids.append(item.id or f"call_{self._next_id}")
            self._next_id += 1
        runnable: list[int] = []
        refused = 0
        for i, item in enumerate(items):
            if self.max_tool_uses is not None and self.tool_uses >= self.max_tool_uses:
                refused += 1
                results[i] = ToolResult(
                    f"Not run: you have used all {self.max_tool_uses} tool calls. "
                    "Give your final answer now, without calling a tool.",
                    is_error=True,
                    metadata={"refused": True},
                )
                continue
            self.tool_uses += 1
            if isinstance(item, MalformedCall):
                results[i] = ToolResult(
                    f"Error: {item.message}", is_error=True, metadata={"kind": item.kind}
                )
            else:
                runnable.append(i)
        calls = [items[i] for i in runnable]
        for i, result in zip(runnable, await self._call_all(calls), strict=True):  # type: ignore[arg-type]
            results[i] = result
        truncated = False
        if refused:
            self._warnings += 1
            truncated = self._warnings > LIMIT_WARNINGS
        done = [r for r in results if r is not None]
        errors = sum(r.is_error for r in done)
        reward = self.tool_reward * (len(done) - errors) + self.error_reward * errors
        if self._ended:
            reward = 0.0  # tool calls after the end of the episode earn nothing
        obs = render_results(
            items, ids, done, truncated, max_tool_uses=self.max_tool_uses, tool_uses=self.tool_uses
        )
        info = {
            "tool_calls": len(items),
            "tool_uses": self.tool_uses,
            "tool_errors": errors,
            **call_records(items, ids, done),
        }
        if truncated:
            info["tool_limit_exceeded"] = True
            self._truncated = True
        final = next((r for r in reversed(done) if r.final and not r.is_error), None)
        if final is not None:
            # a tool ended the episode: the inner env grades its answer, as a final answer
            fobs, freward, fterm, ftrunc, finfo = await astep_of(self.env, final.answer)
            self._ended = self._ended or bool(fterm or ftrunc)
            self._over = self.closed_after_end and self._ended
            return (
                f"{obs}\n\n{fobs}",
                float(reward) + float(freward),
                fterm,
                ftrunc,
                {**info, **finfo},
            )
        return obs, float(reward), False, truncated, info

    async def _call_all(self, calls: list[ToolCall]) -> list[ToolResult]:
        if not calls:
            return []
        concurrent = (
            self.parallel
            and len(calls) > 1
            and all(getattr(self._by_name[c.name], "parallel_safe", False) for c in calls)
        )
        if concurrent:
            start = time.monotonic()
            results = await asyncio.gather(*(self._call(c) for c in calls))
            self.tool_time += time.monotonic() - start
            return list(results)
        out = []
        for c in calls:
            start = time.monotonic()
            out.append(await self._call(c))
            self.tool_time += time.monotonic() - start
        return out

    async def _call(self, call: ToolCall) -> ToolResult:
        t = self._by_name[call.name]
        timeout, limit = self.call_timeout, "call_timeout"
        if self.episode_timeout is not None:
            left = self.episode_timeout - self.tool_time
            if left <= 0:
                return ToolResult(
                    f"Not run: the episode's tool time ({self.episode_timeout:g} s) is used up. "
                    "Give your final answer now.",
                    is_error=True,
                    metadata={"timeout": True},
                )
            if timeout is None or left < timeout:
                timeout, limit = left, "episode_timeout"
        return await run_call(t, call, timeout, limit, self.max_result_chars)

    # -- sync twins, lifecycle -------------------------------------------------------------

    def _run_sync(self, coro: Awaitable[T], what: str) -> T:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            if hasattr(coro, "close"):
                coro.close()
            raise GemkitError(
                f"ToolEnvWrapper.{what}() was called inside a running event loop; "
                f"use `await env.a{what}(...)` there"
            )
        if self._loop is None or self._loop.is_closed():
            self._loop = asyncio.new_event_loop()
        return self._loop.run_until_complete(coro)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> ResetResult:
        """Blocking `areset` (not inside a running event loop)."""
        return self._run_sync(self.areset(seed=seed, options=options), "reset")

    def step(self, action: Any) -> StepResult:
        """Blocking `astep` (not inside a running event loop)."""
        return self._run_sync(self.astep(action), "step")

    def runs_sync(self, method: str | None = None) -> bool:
        """False: tool calls await real I/O, so vectors must use the event loop."""
        return False

    async def aclose(self) -> None:
        """Close every tool (and owned toolsets), then the inner env."""
        for t in self.tools:
            try:
                await t.close()
            except Exception as e:  # closing must go on for the other tools
                log.warning("closing tool %r failed: %s", getattr(t, "name", t), e)
        if self._owns_toolsets:
            for toolset in self.toolsets:
                closer = getattr(toolset, "close", None)
                if closer is not None:
                    try:
                        result = closer()
                        if asyncio.iscoroutine(result):
                            await result
                    except Exception as e:
                        log.warning("closing toolset %r failed: %s", toolset, e)
        self.env.close()

    def close(self) -> None:
        """Close the tools and the env; inside a running loop, as far as possible right now.

        In a running loop the closing starts at once and runs up to its first real wait (all
        of it, for tools whose `close` does not wait); the rest is a task on that loop.
        `await env.aclose()` waits for all of it.
        """
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is not None:
            task = start_eagerly(self.aclose(), loop)
            if task is not None:
                self._pending.add(task)
                task.add_done_callback(self._pending.discard)
            return
        own = self._loop if self._loop is not None and not self._loop.is_closed() else None
        runner = own or asyncio.new_event_loop()
        try:
            runner.run_until_complete(self.aclose())
        finally:
            runner.close()
            self._loop = None

    def replace_tools(self, tools: Iterable[Tool]) -> None:
        """Offer `tools` instead of the ones held now (names must be unique)."""
        self.tools, self._by_name = [], {}
        self._add_tools(tools)

    def clone(self) -> ToolEnvWrapper:
        """A copy with a cloned inner env, the same counters, and fresh copies of the tools.

        Tools that hold live resources (a Python process, an MCP session) cannot be deep-copied:
        each tool's `clone()` gives the copy an unstarted tool, so per-episode tool state (say,
        variables of a Python session) is not carried over. Toolsets (MCP connections) are
        shared with the original, which alone closes them. Deep-copying the wrapper (as the
        wrappers above it do in their `clone`) calls this.
        """
        new = copy.copy(self)
        new.env = clone_of(self.env)
        new.replace_tools(clone_tool(t) for t in self.tools)
        new.toolsets = list(self.toolsets)
        new._owns_toolsets = False
        new._loop = None
        new._pending = set()
        return new

    def __deepcopy__(self, memo: dict[int, Any]) -> ToolEnvWrapper:
        # wrappers stacked above clone by deep-copying the stack: give them `clone` semantics
        return self.clone()


def _text_of(action: Any) -> str:
    """The text of an action: the string, or an assistant message's content."""
    if isinstance(action, dict):
        content = action.get("content")
        return content if isinstance(content, str) else ""
    return action if isinstance(action, str) else str(action)


def _is_chat(obs: Any) -> bool:
    """Whether an observation is a chat (OpenAI messages), as a history wrapper makes it."""
    return isinstance(obs, list) and bool(obs) and isinstance(obs[0], dict) and "role" in obs[0]


def wrap_with_tools(
    env: gymnasium.Env, tools: Iterable[Any] = (), mcp: Any = None, **kwargs: Any
) -> ToolEnvWrapper:
    """Wrap `env` in a `ToolEnvWrapper` with `tools` (objects, functions, names) and an MCP server.

    `mcp` is an MCP server command (string or argv list) or URL, or a list of them; its tools
    are listed at the first reset. The names `"search"` and `"access"` use the env's own
    corpus (`env.unwrapped.corpus_path`) when it has one.
    """
    corpus = getattr(env.unwrapped, "corpus_path", None)
    if corpus:
        from gemkit.tools import resolve_tool

        tools = [
            resolve_tool(t, corpus=str(corpus)) if t in ("search", "access") else t for t in tools
        ]
    toolsets = []
    if mcp:
        from gemkit.tools.mcp import MCPToolset  # names the extra at once when mcp is missing

        specs = (
            mcp
            if isinstance(mcp, list) and mcp and not all(isinstance(x, str) for x in mcp)
            else [mcp]
        )
        for spec in specs:
            toolsets.append(spec if hasattr(spec, "tools") else MCPToolset.from_spec(spec))
    return ToolEnvWrapper(env, tools, toolsets=toolsets, **kwargs)
