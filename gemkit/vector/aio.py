"""`AsyncVectorEnv`: asyncio-native; I/O-bound envs overlap, CPU-trivial ones skip the loop."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from gemkit.errors import VectorEnvError
from gemkit.vector.base import Request, SlotGen, VectorEnv, drive_sync


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A new event loop: uvloop's when installed (less overhead per task), else asyncio's."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def _call(env: Any, request: Request, sem: asyncio.Semaphore | None) -> Awaitable[Any]:
    """The env call a slot asked for, as an awaitable (bounded by `sem` when given)."""
    if request[0] == "step":
        coro = env.astep(request[1])
    else:
        coro = env.areset(seed=request[1], options=request[2])
    return coro if sem is None else _bounded(coro, sem)


async def _bounded(coro: Awaitable[Any], sem: asyncio.Semaphore) -> Any:
    async with sem:
        return await coro


class AsyncVectorEnv(VectorEnv):
    """A vector env whose envs' `astep`/`areset` run concurrently on one event loop.

    Envs that only call their sync methods (`env.runs_sync()`) are stepped directly, with no
    task per step, so trivial envs pay no asyncio overhead. `max_concurrency` bounds how many
    async env calls are in flight at once (for example, requests to a judge model).
    Use `await astep(...)` inside a running event loop; `step(...)` runs a private loop.
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], Any]],
        *,
        autoreset_mode: str = "next_step",
        max_concurrency: int | None = None,
    ):
        super().__init__(env_fns, autoreset_mode=autoreset_mode)
        if max_concurrency is not None and max_concurrency < 1:
            raise VectorEnvError(f"max_concurrency must be >= 1 or None, got {max_concurrency}")
        self.max_concurrency = max_concurrency
        self._sync_slots = [bool(getattr(e, "runs_sync", lambda: False)()) for e in self.envs]
        self._loop: asyncio.AbstractEventLoop | None = None

    async def _adrive(self, gens: dict[int, SlotGen]) -> dict[int, Any]:
        """Drive every slot: sync slots directly, async ones in rounds of one `gather` each.

        A round issues the pending request of every async slot at once (a step, or a reset
        for autoreset) and feeds each result back to its slot, until every slot is done.
        """
        results: dict[int, Any] = {}
        pending: dict[int, tuple[SlotGen, Request]] = {}
        for i, gen in gens.items():
            if self._sync_slots[i]:
                results[i] = drive_sync(gen, self.envs[i])
                continue
            try:
                pending[i] = (gen, next(gen))
            except StopIteration as stop:
                results[i] = stop.value
        envs, sem = self.envs, None
        if self.max_concurrency is not None and self.max_concurrency < len(pending):
            sem = asyncio.Semaphore(self.max_concurrency)
        while pending:
            calls = [_call(envs[i], req, sem) for i, (_, req) in pending.items()]
            outs = await asyncio.gather(*calls, return_exceptions=True)
            following: dict[int, tuple[SlotGen, Request]] = {}
            for (i, (gen, _)), out in zip(pending.items(), outs, strict=True):
                try:
                    if isinstance(out, BaseException):
                        if not isinstance(out, Exception):
                            raise out  # cancellation and interrupts are not the env's error
                        req = gen.throw(out)
                    else:
                        req = gen.send(out)
                except StopIteration as stop:
                    results[i] = stop.value
                else:
                    following[i] = (gen, req)
            pending = following
        return results

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
        return self._loop.run_until_complete(self._adrive(gens))

    def close(self) -> None:
        """Close every env and the private event loop."""
        super().close()
        if self._loop is not None and not self._loop.is_closed():
            self._loop.close()
