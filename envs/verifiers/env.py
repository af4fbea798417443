"""`VerifiersEnv`: a verifiers taskset's episodes, with gemkit playing the model.

A verifiers env drives its episode itself: `Env.run(task, agents)` asks the agent for a reply
(`interaction.turn(message)`) and decides what comes next; the agent's harness calls a model
through verifiers' interception server. Here the "model" is a bridge: a chat-completions
endpoint on 127.0.0.1 that answers each request with the action gemkit's `step` sends, so
verifiers' own code runs unchanged, traces and rewards included:

- `reset(seed)` picks the taskset's task number `seed` (modulo a finite taskset's size; drawn
  when None), starts the verifiers episode, and returns the first user message the agent gets;
- `step(action)` answers that request with `action`; the next request's user message is the
  next observation (reward 0), and when the episode ends instead, the observation says so and
  the reward is the episode's verifiers reward (the weighted sum of its traces' rewards),
  `info["success"]` whether it is positive, `info["rewards"]` each reward by name.

Every agent of the env is pinned to `GemkitChatHarness` (one model call per turn, in process)
on the subprocess runtime. The episode runs on a background event loop of its own; a reset
while an episode is open cancels it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import threading
import time
from typing import Any

from gemkit.core import Env, ResetResult, StepResult
from gemkit.errors import GemkitError

#: seconds a step waits for the verifiers env to answer
TIMEOUT_S = 600.0


def _import_verifiers() -> Any:
    try:
        import verifiers.v1 as vf
    except ImportError as e:
        raise GemkitError(
            f"verifiers: envs need verifiers: pip install 'gemkit[verifiers]' ({e})"
        ) from e
    return vf


class _Bridge:
    """A chat-completions endpoint whose replies are gemkit's actions, one request at a time."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.events: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        self.reply: asyncio.Future[str] | None = None
        self.base_url = ""
        self._runner: Any = None

    async def start(self) -> None:
        from aiohttp import web

        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.base_url = f"http://127.0.0.1:{port}/v1"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _chat(self, request: Any) -> Any:
        from aiohttp import web

        body = await request.json()
        self.reply = self.loop.create_future()
        await self.events.put(("turn", body.get("messages") or []))
        text = await self.reply
        return web.json_response(
            {
                "id": f"gemkit-{time.monotonic_ns()}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body.get("model", "gemkit"),
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": text},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
            }
        )


def _user_text(messages: list[dict[str, Any]]) -> str:
    """The last user message's text: what the env just said."""
    for message in reversed(messages):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                return content
            if isinstance(content, list):
                return "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


class VerifiersEnv(Env):
    """The episodes of the verifiers taskset `taskset` (an id `vf-eval` takes)."""

    def __init__(
        self,
        taskset: str | None = None,
        taskset_config: dict[str, Any] | None = None,
        env_config: dict[str, Any] | None = None,
        model: str = "gemkit",
    ):
        if not taskset:
            raise GemkitError(
                "verifiers:Env-v0 needs a taskset id: gemkit.make('verifiers:Env-v0', "
                "taskset='gemkit-verifiers', taskset_config={'env_id': 'toy:Doors-v0'})"
            )
        self.taskset_id = taskset
        self.taskset_config = dict(taskset_config or {})
        self.env_config = dict(env_config or {})
        self.model = model
        self._loop: asyncio.AbstractEventLoop | None = None
        self._vf_env: Any = None
        self._bridge: _Bridge | None = None
        self._stack: contextlib.AsyncExitStack | None = None
        self._episode: asyncio.Task | None = None
        self._tasks: list[Any] | None = None
        self.done = True

    # -- the background loop ------------------------------------------------------------------

    def _run(self, coro: Any) -> Any:
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
            threading.Thread(target=self._loop.run_forever, name="gemkit-vf", daemon=True).start()
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    async def _open(self) -> None:
        vf = _import_verifiers()
        from verifiers.v1.configs.agent import agent_config_fields
        from verifiers.v1.runtimes import SubprocessConfig
        from verifiers.v1.utils.generic import concrete_type
        from verifiers.v1.utils.loaders import environment_class

        from gemkit.integrations.verifiers import TASKSET_ID, GemkitChatHarnessConfig

        env_cls = environment_class(self.taskset_id)
        config_cls = concrete_type(env_cls, vf.EnvConfig, origin=vf.Env) or vf.EnvConfig
        data = {**self.env_config, "taskset": {**self.taskset_config, "id": self.taskset_id}}
        config = config_cls.model_validate(data)
        harness = GemkitChatHarnessConfig(id=TASKSET_ID)  # every agent: one call per turn
        for name, agent in agent_config_fields(config).items():
            setattr(
                config,
                name,
                agent.model_copy(update={"harness": harness, "runtime": SubprocessConfig()}),
            )
        self._vf_env = env_cls(config)
        self._bridge = _Bridge(asyncio.get_running_loop())
        await self._bridge.start()
        self._stack = contextlib.AsyncExitStack()
        await self._stack.enter_async_context(self._vf_env.serving())

    def _task(self, index: int) -> Any:
        taskset = self._vf_env.taskset
        if taskset.bounded:
            if self._tasks is None:
                self._tasks = list(taskset)
            if not self._tasks:
                raise GemkitError(f"the verifiers taskset {self.taskset_id!r} has no tasks")
            return self._tasks[index % len(self._tasks)]
        return next(itertools.islice(iter(taskset), index, None))

    async def _next_event(self) -> StepResult:
        assert self._bridge is not None and self._episode is not None
        getter = asyncio.ensure_future(self._bridge.events.get())
        finished, _ = await asyncio.wait(
            {getter, self._episode}, timeout=TIMEOUT_S, return_when=asyncio.FIRST_COMPLETED
        )
        if getter in finished:
            _, messages = getter.result()
            return _user_text(messages), 0.0, False, False, {"messages": messages}
        getter.cancel()
        if self._episode not in finished:
            raise GemkitError(f"the verifiers env gave no answer in {TIMEOUT_S:g} s")
        self.done = True
        episode = self._episode.result()
        rewards = {
            f"{trace.agent.name or 'agent'}/{name}" if len(episode.traces) > 1 else name: r.score
            for trace in episode.traces
            for name, r in trace.rewards.items()
        }
        total = sum(r.score * r.weight for t in episode.traces for r in t.rewards.values())
        info: dict[str, Any] = {"rewards": rewards, "success": total > 0}
        if episode.errors:
            info["error"] = episode.errors[-1].message
        return "The episode is over.", float(total), True, False, info

    async def _areset(self, index: int) -> ResetResult:
        if self._vf_env is None:
            await self._open()
        await self._cancel()
        from verifiers.v1.clients import EvalClientConfig, ModelContext

        assert self._bridge is not None
        ctx = ModelContext(
            model=self.model,
            client=EvalClientConfig(base_url=self._bridge.base_url, api_key_var="GEMKIT_VF_KEY"),
        )
        self._bridge.events = asyncio.Queue()
        task = self._task(index)
        self._episode = asyncio.ensure_future(self._vf_env.run_episode(task, ctx))
        self.done = False
        obs, _, terminated, _, info = await self._next_event()
        if terminated:
            raise GemkitError(f"the verifiers episode ended before its first turn: {info}")
        return obs, {"messages": info["messages"], "task": getattr(task.data, "name", None)}

    async def _astep(self, action: str) -> StepResult:
        if self.done:
            return "The episode is over; call reset() to start a new one.", 0.0, True, False, {}
        assert self._bridge is not None and self._bridge.reply is not None
        if not self._bridge.reply.done():
            self._bridge.reply.set_result(action if isinstance(action, str) else str(action))
        return await self._next_event()

    async def _cancel(self) -> None:
        if self._episode is not None and not self._episode.done():
            if (
                self._bridge is not None
                and self._bridge.reply is not None
                and not self._bridge.reply.done()
            ):
                self._bridge.reply.cancel()
            self._episode.cancel()
            with contextlib.suppress(BaseException):
                await self._episode
        self._episode = None

    # -- the contract -------------------------------------------------------------------------

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> ResetResult:
        """Start the episode of task `seed` (drawn when None)."""
        super().reset(seed=seed)
        index = seed if seed is not None else int(self.np_random.integers(2**31))
        os.environ.setdefault("GEMKIT_VF_KEY", "gemkit")  # the bridge checks no key
        return self._run(self._areset(index))

    def step(self, action: str) -> StepResult:
        """Answer the agent's model request with `action`."""
        return self._run(self._astep(action))

    def clone(self) -> Env:
        """Not possible: the episode is a running verifiers coroutine."""
        raise GemkitError("a verifiers episode is a running coroutine and cannot be cloned")

    def close(self) -> None:
        """Cancel an open episode and stop the bridge and the verifiers env's resources."""
        if self._loop is None:
            return

        async def shut() -> None:
            await self._cancel()
            if self._stack is not None:
                await self._stack.aclose()
            if self._bridge is not None:
                await self._bridge.stop()

        with contextlib.suppress(Exception):
            self._run(shut())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._loop = None
