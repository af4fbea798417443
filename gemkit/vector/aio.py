"""`AsyncVectorEnv`: asyncio-native; I/O-bound envs overlap, CPU-trivial ones skip the loop."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from gemkit.core import areset_of, astep_of, inner_runs_sync
from gemkit.errors import VectorEnvError
from gemkit.vector.base import SlotGen, VectorEnv, drive_sync

#: seconds a `step()`/`reset()` round may run with the cyclic garbage collector paused
GC_PAUSE_LIMIT = 1.0


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


class _Join:
    """Counts a round's slot tasks down to zero; the first failure ends the wait at once."""

    __slots__ = ("future", "left", "results")

    def __init__(self, loop: asyncio.AbstractEventLoop, n: int, results: dict[int, Any]):
        self.future = loop.create_future()
        self.left = n
        self.results = results

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

    `pause_gc`: while `step()`/`reset()` run their private loop, the cyclic garbage collector
    is paused for at most `GC_PAUSE_LIMIT` seconds (then resumed; after the round its earlier
    state is restored). A round makes several tracked objects per env (tasks, coroutines,
    futures) that live until the env answers; collecting while they are in flight promotes
    them and sets off full collections of the whole heap, which cost an I/O-bound vector of
    1,024 envs about a quarter of its rate. Cyclic garbage made in the round is collected
    after it. `await astep()`, on the caller's loop, never touches the collector.
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
        # per slot, whether its reset and its step need no event loop (then the sync one runs)
        self._sync_calls = [
            (inner_runs_sync(e, "reset"), inner_runs_sync(e, "step")) for e in self.envs
        ]
        self._loop: asyncio.AbstractEventLoop | None = None

    async def _adrive(self, gens: dict[int, SlotGen]) -> dict[int, Any]:
        """Drive every slot: sync slots directly, each async one in its own task.

        A slot's task carries out all of its requests (a step, then a reset for autoreset)
        and feeds each result back at once, so the bookkeeping of one slot overlaps the waits
        of the others. The tasks are joined by a counter rather than `gather`.
        """
        results: dict[int, Any] = {}
        slots: list[tuple[int, SlotGen]] = []
        for i, gen in gens.items():
            if self._sync_slots[i]:
                results[i] = drive_sync(gen, self.envs[i])
            else:
                slots.append((i, gen))
        if not slots:
            return results
        sem = None
        if self.max_concurrency is not None and self.max_concurrency < len(slots):
            sem = asyncio.Semaphore(self.max_concurrency)
        loop = asyncio.get_running_loop()
        join = _Join(loop, len(slots), results)
        tasks = [loop.create_task(self._run_slot(i, gen, sem, join)) for i, gen in slots]
        try:
            await join.future
        finally:
            if join.left:  # cancelled, or a slot raised past its generator: stop the rest
                for t in tasks:
                    t.cancel()
        return results

    async def _run_slot(
        self, i: int, gen: SlotGen, sem: asyncio.Semaphore | None, join: _Join
    ) -> None:
        """Carry out one slot's requests in order (one task per slot); report to `join`."""
        env = self.envs[i]
        sync_reset, sync_step = self._sync_calls[i]
        try:
            try:
                request = next(gen)
                while True:
                    try:
                        if request[0] == "step":
                            if sync_step:
                                out = env.step(request[1])
                            else:
                                call = astep_of(env, request[1])
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
                join.results[i] = stop.value
        except BaseException as e:  # cancellation or an interrupt: not the env's error
            join.fail(e)
            return
        join.left -= 1
        if not join.left and not join.future.done():
            join.future.set_result(None)

    def _drive(self, gens: dict[int, SlotGen]) -> dict[int, Any]:
        if all(self._sync_slots[i] for i in gens):
            return {i: drive_sync(g, self.envs[i]) for i, g in gens.items()}
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
        if not (self.pause_gc and gc.isenabled()):
            return self._loop.run_until_complete(self._adrive(gens))
        gc.disable()
        resume = self._loop.call_later(GC_PAUSE_LIMIT, gc.enable)
        try:
            return self._loop.run_until_complete(self._adrive(gens))
        finally:
            resume.cancel()
            gc.enable()

    def close(self) -> None:
        """Close every env and the private event loop."""
        super().close()
        if self._loop is not None and not self._loop.is_closed():
            self._loop.close()
