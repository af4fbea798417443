"""`AsyncVectorEnv`: asyncio-native; I/O-bound envs overlap, CPU-trivial ones skip the loop."""

from __future__ import annotations

import asyncio
import functools
import gc
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from gemkit.core import areset_of, astep_of, inner_runs_sync
from gemkit.errors import VectorEnvError
from gemkit.vector.base import SlotResult, VectorEnv, drive_sync

#: seconds a `step()`/`reset()` round may run with the cyclic garbage collector paused
GC_PAUSE_LIMIT = 1.0
#: seconds an interrupted `step()`/`reset()` waits for its cancelled env calls to unwind
CANCEL_WAIT_S = 5.0


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A new event loop: uvloop's when installed (less overhead per task), else asyncio's."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


async def _bounded(coro: Awaitable[Any], sem: asyncio.Semaphore) -> Any:
    async with sem:
        return await coro


class _Round:
    """One vector call on the loop: what it asks, the slots still running, their results.

    The slot tasks are joined by a counter rather than `gather`; the first failure that is not
    an env's error (a cancellation, an interrupt) ends the wait at once.
    """

    __slots__ = ("direct", "future", "left", "options", "results", "sem", "step", "tasks")

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        step: bool,
        options: dict[str, Any] | None,
        results: dict[int, Any],
        sem: asyncio.Semaphore | None,
    ):
        self.future = loop.create_future()
        self.step = step
        self.options = options
        self.results = results
        self.sem = sem
        self.direct = step and sem is None  # a slot's step may skip the general path
        self.left = 0
        self.tasks: list[asyncio.Task[None]] = []

    def fail(self, e: BaseException) -> None:
        """End the round with `e` (the first one wins)."""
        if not self.future.done():
            self.future.set_exception(e)


class AsyncVectorEnv(VectorEnv):
    """A vector env whose envs' `astep`/`areset` run concurrently on one event loop.

    Envs that only call their sync methods (`env.runs_sync()`) are stepped directly, with no
    task per step, so trivial envs pay no asyncio overhead. `max_concurrency` bounds how many
    async env calls are in flight at once (for example, requests to a judge model).
    Use `await astep(...)` inside a running event loop; `step(...)` runs a private loop.

    Every other slot gets one task per call. A running slot's step, the common case, starts
    its env call at once (a running slot asks first to step its env:
    `VectorEnv._first_request`) and takes the common answer, an episode that goes on, with
    `VectorEnv._stepped`, without making the slot's generator; anything else (an episode
    that ends, an error, a reset) runs the generator, the autoreset and error rules. Per env
    and step that leaves a task and one coroutine frame around the env's own call.

    `pause_gc`: while `step()`/`reset()` run their private loop, the cyclic garbage collector
    is paused for at most `GC_PAUSE_LIMIT` seconds (then resumed; after the round its earlier
    state is restored). A round makes several tracked objects per env (tasks, coroutines,
    futures) that live until the env answers; collecting while they are in flight promotes
    them and sets off full collections of the whole heap, which cost an I/O-bound vector of
    1,024 envs about a quarter of its rate. Cyclic garbage made in the round is collected
    after it. `await astep()`, on the caller's loop, never touches the collector.

    A round stopped by something that is not an env's error (a Ctrl-C, a cancellation, an env
    raising `KeyboardInterrupt`) cancels the calls still running; their slots count as
    finished episodes and reset at their next step.
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], Any]],
        *,
        autoreset_mode: str = "next_step",
        max_concurrency: int | None = None,
        pause_gc: bool = True,
    ):
        super().__init__(env_fns, autoreset_mode=autoreset_mode)
        if max_concurrency is not None and max_concurrency < 1:
            raise VectorEnvError(f"max_concurrency must be >= 1 or None, got {max_concurrency}")
        self.max_concurrency = max_concurrency
        self.pause_gc = pause_gc
        self._sync_slots = [inner_runs_sync(e) for e in self.envs]
        self._all_sync = all(self._sync_slots)
        self._n_async = self._sync_slots.count(False)
        # per slot, whether its reset and its step need no event loop (then the sync one runs)
        self._sync_calls = [
            (inner_runs_sync(e, "reset"), inner_runs_sync(e, "step")) for e in self.envs
        ]
        self._asteps = [_astep_of(e) for e in self.envs]
        self._async_steps = [not step for _, step in self._sync_calls]
        self._loop: asyncio.AbstractEventLoop | None = None
        self._round: _Round | None = None  # the latest round with slot tasks

    # -- one round: sync slots directly, the others in a task each ---------------------------

    async def _arun(
        self, step: bool, plan: dict[int, Any], options: dict[str, Any] | None
    ) -> dict[int, Any]:
        """Carry out a step (`plan`: slot -> action) or a reset (slot -> seed) of every slot."""
        # keyed in plan order up front: the results come out in it, whatever order they end in
        results: dict[int, Any] = dict.fromkeys(plan)
        loop = asyncio.get_running_loop()
        sem = None
        if self.max_concurrency is not None and self.max_concurrency < self._n_async:
            sem = asyncio.Semaphore(self.max_concurrency)
        rnd = _Round(loop, step, options, results, sem)
        self._round = rnd  # for the private loop's clean-up, should the round be interrupted
        sync, tasks, run, start = self._sync_slots, rnd.tasks, self._run_slot, loop.create_task
        for i, arg in plan.items():
            if not sync[i]:
                tasks.append(start(run(i, arg, rnd)))
            elif step:
                results[i] = self._step_sync(i, arg, self.envs[i])
            else:
                results[i] = drive_sync(self._reset_slot(i, arg, options), self.envs[i])
        if not tasks:
            self._round = None
            return results
        rnd.left = len(tasks)
        try:
            await rnd.future
        finally:
            if rnd.left:  # cancelled, interrupted: stop the calls still running
                for t in rnd.tasks:
                    t.cancel()
                for i, result in results.items():
                    if result is None:  # its episode was cut short
                        self._done[i] = True
            else:  # done with: its tasks must not outlive the round (the collector is paused)
                self._round = None
        return results

    async def _run_slot(self, i: int, arg: Any, rnd: _Round) -> None:
        """One slot's round: its first env call, then its generator's requests, in order.

        The common case, a running slot whose step is awaited, starts the env call with nothing
        before it but what it needs (a running slot asks first to step its env:
        `_first_request`), and takes the common answer, the episode going on, with no
        generator (`_stepped`); anything else goes through the slot's generator.
        """
        try:
            if rnd.direct and self._async_steps[i] and not self._done[i]:
                try:
                    out, raised = await self._asteps[i](arg), False
                except Exception as e:  # noqa: BLE001 - handed to the slot
                    out, raised = e, True
                result = None
                if not raised:
                    try:
                        result = self._stepped(i, out)
                    except Exception:  # noqa: BLE001 - a malformed answer: the generator reports it
                        pass
                if result is None:
                    result = await self._serve(i, arg, rnd, (out, raised))
            else:
                result = await self._serve(i, arg, rnd, None)
        except BaseException as e:  # cancellation or an interrupt: not the env's error
            rnd.fail(e)
            return
        rnd.results[i] = result
        rnd.left -= 1
        if not rnd.left and not rnd.future.done():
            rnd.future.set_result(None)

    async def _serve(self, i: int, arg: Any, rnd: _Round, answered: tuple[Any, bool] | None) -> Any:
        """Run slot `i`'s generator, carrying out its requests in order; the slot's result.

        `answered`: `(answer, raised)` of its first request, already carried out.
        """
        env = self.envs[i]
        sync_reset, sync_step = self._sync_calls[i]
        sem = rnd.sem
        gen = self._step_slot(i, arg) if rnd.step else self._reset_slot(i, arg, rnd.options)
        try:
            request = next(gen)
            if answered is not None:
                request = gen.throw(answered[0]) if answered[1] else gen.send(answered[0])
            while True:
                try:
                    if request[0] == "step":
                        if sync_step:
                            out = env.step(request[1])
                        else:
                            call = self._asteps[i](request[1])
                            out = await (call if sem is None else _bounded(call, sem))
                    elif sync_reset:
                        out = env.reset(seed=request[1], options=request[2])
                    else:
                        call = areset_of(env, seed=request[1], options=request[2])
                        out = await (call if sem is None else _bounded(call, sem))
                except Exception as e:  # noqa: BLE001 - handed to the slot
                    request = gen.throw(e)
                else:
                    request = gen.send(out)
        except StopIteration as stop:
            return stop.value

    def _run(self, step: bool, plan: dict[int, Any], options: dict[str, Any] | None) -> Any:
        """`_arun` from sync code: directly when every slot is sync, else on the private loop."""
        sync = self._sync_slots
        if self._all_sync or all(sync[i] for i in plan):
            if step:
                envs, one = self.envs, self._step_sync
                return {i: one(i, a, envs[i]) for i, a in plan.items()}
            return {
                i: drive_sync(self._reset_slot(i, s, options), self.envs[i])
                for i, s in plan.items()
            }
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise VectorEnvError(
                "step()/reset() called inside a running event loop; use `await astep(...)` "
                "and `await areset(...)` there"
            )
        if self._loop is None or self._loop.is_closed():
            self._loop = new_event_loop()
        loop = self._loop
        paused = self.pause_gc and gc.isenabled()
        if paused:
            gc.disable()
            resume = loop.call_later(GC_PAUSE_LIMIT, gc.enable)
        self._round = None
        main = loop.create_task(self._arun(step, plan, options))
        try:
            return loop.run_until_complete(main)
        except BaseException:
            _unwind(loop, main, self._round.tasks if self._round else [])
            raise
        finally:
            if paused:
                resume.cancel()
                gc.enable()

    # -- the calls the base class makes ------------------------------------------------------

    def _step_results(self, actions: Sequence[Any] | Mapping[int, Any]) -> dict[int, SlotResult]:
        results: dict[int, SlotResult] = self._run(True, self._plan_step(actions), None)
        return results

    def _reset_results(
        self,
        seed: int | Sequence[int | None] | None,
        options: dict[str, Any] | None,
        indices: Sequence[int] | None,
    ) -> dict[int, tuple[str, dict[str, Any]]]:
        results: dict[int, tuple[str, dict[str, Any]]] = self._run(
            False, self._plan_reset(seed, indices), options
        )
        return results

    async def _astep_results(
        self, actions: Sequence[Any] | Mapping[int, Any]
    ) -> dict[int, SlotResult]:
        return await self._arun(True, self._plan_step(actions), None)

    async def _areset_results(
        self,
        seed: int | Sequence[int | None] | None,
        options: dict[str, Any] | None,
        indices: Sequence[int] | None,
    ) -> dict[int, tuple[str, dict[str, Any]]]:
        return await self._arun(False, self._plan_reset(seed, indices), options)

    def close(self) -> None:
        """Close every env and the private event loop."""
        super().close()
        if self._loop is not None and not self._loop.is_closed():
            self._loop.close()


def _astep_of(env: Any) -> Callable[[Any], Awaitable[Any]]:
    """The env's `astep`, looked up once (or the twin `astep_of` derives for it)."""
    twin = getattr(env, "astep", None)
    return twin if twin is not None else functools.partial(astep_of, env)


def _unwind(
    loop: asyncio.AbstractEventLoop, main: asyncio.Task[Any], tasks: list[asyncio.Task[None]]
) -> None:
    """After an interrupted round on the private loop: cancel it and let its env calls unwind,
    so none of them runs on into the next round (other tasks on the loop are left alone)."""
    main.cancel()
    for t in tasks:
        t.cancel()
    pending = [t for t in (main, *tasks) if not t.done()]
    if pending:
        try:
            loop.run_until_complete(asyncio.wait(pending, timeout=CANCEL_WAIT_S))
        except BaseException:  # noqa: BLE001 - a second interrupt: leave the rest cancelled
            pass
    if main.done() and not main.cancelled():
        main.exception()  # retrieved, or asyncio logs it as never retrieved
