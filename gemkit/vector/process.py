"""`ProcessVectorEnv`: the vector API with its envs in worker processes, one event loop each.

The async vector overlaps waiting, not computing: graders (sympy, math-verify, reasoning-gym
scorers, toolworld verifiers) run on one core however many envs wait. This vector splits its
slots into contiguous blocks, one per core this process may run on: the driver steps the last
block itself, in an `AsyncVectorEnv` of its own, and `num_workers` processes (the other
cores) each step one of the others in theirs (their own event loops). So CPU-bound envs use
every core, I/O-bound ones still overlap within each block, and the driver works while it
would otherwise wait. One vector call is one message to each worker concerned and one reply
back, whatever the autoreset mode, and the driver's block steps between the two; the
protocol is in `gemkit.vector.worker`.

Why the driver holds a block (measured on 2 cores, `bench/envs.py`): a step of a cheap env
takes microseconds, as long as a message to a worker and its reply, so with every env in
workers 64 cheap games stepped at 0.63x the async vector's rate; with the driver stepping
half of them, 1.2x. The cost: the driver's block has no process of its own, so an env that
crashes its interpreter there takes the driver down, and in `await astep()` its sync envs run
on the caller's loop (as in the async vector). `driver_envs=0` puts every env in a worker.

When each process has a core (the driver and its workers no more than the cores), a wait for
the other side polls for `SPIN_S` before it sleeps: on a virtual machine a sleeping process
takes tens of microseconds to wake, which a cheap step cannot pay twice.

Slot semantics are those of `gemkit.vector.base`, run in the worker for its envs. The driver
keeps a mirror of each slot's last observation and done flag (from the replies), so that when
a worker process dies (a segfault, the OOM killer, `kill -9`) it answers for that worker's
slots with the same rules an env error follows (`info["error"]`, `truncated=True`; in
`same_step` mode the reset that follows fails too), marks all of its slots done, and starts a
replacement whose envs reset on their next step. Starting, watching and ending the worker
processes is `gemkit.vector.pool`'s job.

Not covered here: more than one machine (`gemkit.vector.ray.RayVectorEnv`).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from gemkit.cores import usable_cores
from gemkit.errors import VectorEnvError
from gemkit.vector.aio import AsyncVectorEnv
from gemkit.vector.base import SlotResult, VectorEnv, VectorStep, drive_sync
from gemkit.vector.pool import PROTOCOL, Pool, Reply, WorkerLost
from gemkit.vector.worker import ahandle, encode, handle

#: seconds a worker may take to build its envs (imports included) before it counts as lost
START_TIMEOUT_S = 120.0
#: seconds a wait for the other side polls before it sleeps, when each process has a core:
#: a sleeping process takes tens of microseconds to wake, as long as a cheap env's step
SPIN_S = 0.0003


def default_workers() -> int:
    """How many cores this process counts as its own (`gemkit.cores.usable_cores`)."""
    return usable_cores()


class _Dead:
    """Stands in for the envs of a lost worker: every call raises the loss."""

    def __init__(self, error: WorkerLost):
        self.error = error

    def step(self, action: Any) -> Any:
        raise self.error

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        raise self.error


def _dumps_factories(fns: Sequence[Callable[[], Any]], first: int) -> bytes:
    """The block's env factories as bytes a fresh process can load (cloudpickle: lambdas and
    closures travel by value)."""
    import cloudpickle

    try:
        data: bytes = cloudpickle.dumps(list(fns), protocol=PROTOCOL)
        return data
    except Exception as e:
        which = f"env {first}" if len(fns) == 1 else f"envs {first}-{first + len(fns) - 1}"
        raise VectorEnvError(
            f"the env factories of {which} cannot be sent to a worker process "
            f"({type(e).__name__}: {e}); make them from picklable parts (a class, a "
            "module-level function, functools.partial, gemkit.make_vec(..., mode='process'))"
        ) from None


class ProcessVectorEnv(VectorEnv):
    """A vector env whose envs run in blocks, one per core: in worker processes and the driver.

    For CPU-bound envs (graders, verifiers, simulators): on *c* cores they step up to *c*
    times as fast as in one process. Same API, seeds, autoreset and error isolation as
    `AsyncVectorEnv`; `envs` is empty (the envs live in the workers and the driver's block).

    - `num_workers`: worker processes (default: the cores this process may run on, less the
      one the driver steps its block on; at most one per env). Worker *k* holds a contiguous
      block of slots.
    - `driver_envs`: how many slots (the last ones) the driver steps itself. By default a
      worker's share when `num_workers` is left to its default (on one core, none); 0 when
      `num_workers` is named. 0 keeps every env in a worker process (isolated from the driver,
      and off the caller's event loop in `astep`).
    - `max_concurrency`: bounds async env calls in flight, split over the workers (at least
      one each).
    - Each worker counts the cores divided by the workers (at least one) as its own
      (`GEMKIT_CORES` there, `gemkit.cores`): what its envs start to spread work over cores
      sizes itself by that (the math grader's helper processes).
    - The env factories travel by cloudpickle (lambdas and closures too) to fresh interpreters;
      the caller's script is not run again there, so it needs no `__main__` guard. A worker
      has built its envs when the constructor returns (`start_timeout_s` each, at most).
    - A worker process that dies marks each slot it holds: `info["error"]` names it and its
      exit (a signal, a code), and a replacement is started at once; those slots reset on their
      next step. `close()` (also run on garbage collection and at interpreter exit) closes every
      env and ends the workers; none outlives the driver.
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], Any]],
        *,
        autoreset_mode: str = "next_step",
        num_workers: int | None = None,
        driver_envs: int | None = None,
        max_concurrency: int | None = None,
        start_timeout_s: float = START_TIMEOUT_S,
    ):
        self._init_slots(len(env_fns), autoreset_mode)
        n = self.num_envs
        if num_workers is not None and num_workers < 1:
            raise VectorEnvError(f"num_workers must be >= 1 or None, got {num_workers}")
        if driver_envs is not None and not 0 <= driver_envs < n:
            raise VectorEnvError(
                f"driver_envs must be from 0 to {n - 1} (the envs the driver steps itself; "
                f"a worker holds the rest) or None (its default), got {driver_envs}"
            )
        if max_concurrency is not None and max_concurrency < 1:
            raise VectorEnvError(f"max_concurrency must be >= 1 or None, got {max_concurrency}")
        self.num_workers, self.driver_envs = w, d = layout(n, num_workers, driver_envs)
        self.max_concurrency = max_concurrency
        m = n - d  # the workers' slots come first, the driver's block last
        self._bounds = bounds = [(k * m // w, (k + 1) * m // w) for k in range(w)]
        if d:
            bounds.append((m, n))
        blocks = len(bounds)
        self._owner = [k for k, (lo, hi) in enumerate(bounds) for _ in range(lo, hi)]
        # with a core for each process (the driver's included), a wait polls before it sleeps
        cores = default_workers()
        spin_s = SPIN_S if w + 1 <= cores else 0.0
        fns = list(env_fns)
        payloads = [_dumps_factories(fns[lo:hi], lo) for lo, hi in bounds[:w]]
        settings = [
            {
                "autoreset_mode": autoreset_mode,
                "max_concurrency": _share(max_concurrency, blocks, k),
                "spin_s": spin_s,
                # each worker counts its share of the cores, for what its envs start to use
                # them (the math grader's helper processes); the driver is not counted, so
                # while its block still computes, a worker done first leaves it its core
                "cores": max(1, cores // w),
            }
            for k in range(w)
        ]
        self._pool = pool = Pool(bounds[:w], payloads, settings, start_timeout_s, spin_s)
        self._local: AsyncVectorEnv | None = None
        held: list[AsyncVectorEnv] = []  # the driver's block, once built
        # ends the workers (and closes the driver's block) on close(), on garbage collection
        # and at interpreter exit
        self._finalizer = weakref.finalize(self, _stop, pool, held)
        try:
            pool.start(list(range(w)))
            if d:  # built while the workers start
                self._local = AsyncVectorEnv(
                    fns[m:],
                    autoreset_mode=autoreset_mode,
                    max_concurrency=_share(max_concurrency, blocks, w),
                )
                held.append(self._local)
            started = pool.collect(list(range(w)), self._apply)
        except BaseException:
            self._finalizer()
            raise
        failed = [v for v in started.values() if isinstance(v, WorkerLost)]
        if failed:
            self._finalizer()
            raise VectorEnvError(str(failed[0]).split(";")[0])
        self._closed = False

    # -- one call: messages out, replies in -------------------------------------------------

    def _apply(self, k: int, reply: Reply) -> None:
        """Update the mirror of worker `k`'s slots from one of its replies."""
        lo, hi = self._bounds[k]
        keys, obs, done = reply[1], reply[2], reply[7]
        if keys is None:
            self._last_obs[lo:hi] = obs
            self._done[lo:hi] = done
        else:
            for key, o, d in zip(keys, obs, done, strict=True):
                self._last_obs[lo + key] = o
                self._done[lo + key] = d

    def _encode(self, msgs: dict[int, tuple[Any, ...]]) -> dict[int, bytes]:
        try:
            return {k: encode(m) for k, m in msgs.items()}
        except Exception as e:
            raise VectorEnvError(
                f"actions and reset options must pickle to reach the worker processes "
                f"({type(e).__name__}: {e})"
            ) from None

    def _exchange(self, msgs: dict[int, tuple[Any, ...]]) -> dict[int, Any]:
        mine = msgs.pop(self.num_workers, None)  # the driver's own block, if it has one
        data = self._encode(msgs)
        pool = self._pool
        owing = pool.owing()
        if owing:  # replies of an interrupted call (applied, then dropped), a ready message
            pool.collect(owing, self._apply)
        out: dict[int, Any] = pool.send_all(data)
        if mine is not None:  # stepped while the workers step theirs
            local = self._local
            assert local is not None
            try:
                out[self.num_workers] = handle(local, mine)
            finally:
                self._mirror_local(local)
        out.update(pool.collect([k for k in data if k not in out], self._apply))
        return out

    async def _aexchange(self, msgs: dict[int, tuple[Any, ...]]) -> dict[int, Any]:
        mine = msgs.pop(self.num_workers, None)
        data = self._encode(msgs)
        pool = self._pool
        owing = pool.owing()
        if owing:  # replies of an interrupted call (applied, then dropped), a ready message
            await pool.acollect(owing, self._apply)
        out: dict[int, Any] = pool.send_all(data)
        if mine is not None:
            local = self._local
            assert local is not None
            try:
                out[self.num_workers] = await ahandle(local, mine)
            finally:
                self._mirror_local(local)
        out.update(await pool.acollect([k for k in data if k not in out], self._apply))
        return out

    def _mirror_local(self, local: AsyncVectorEnv) -> None:
        """Copy the driver's block's slot state into the mirror (also after an interrupt)."""
        lo, hi = self._bounds[self.num_workers]
        self._last_obs[lo:hi] = local._last_obs
        self._done[lo:hi] = local._done

    def _revive(self, replies: dict[int, Any]) -> None:
        """Start a replacement for each lost worker; its slots count as finished episodes.
        Then raise what a worker reported outside every env (a bug), if any."""
        for k, reply in replies.items():
            if isinstance(reply, WorkerLost):
                lo, hi = self._bounds[k]
                self._done[lo:hi] = [True] * (hi - lo)
                self._pool.start([k], {k: (self._done[lo:hi], self._last_obs[lo:hi])})
        for k, reply in replies.items():
            if isinstance(reply, tuple) and reply[0] == "error":
                raise VectorEnvError(f"worker process {k} failed: {reply[1]}")

    # -- step -----------------------------------------------------------------------------

    def _step_plan(
        self, actions: Sequence[Any] | Mapping[int, Any]
    ) -> tuple[Sequence[Any] | dict[int, Any], dict[int, tuple[Any, ...]]]:
        """The action of each slot stepped (a list when all are), and each worker's message."""
        if isinstance(actions, list) and len(actions) == self.num_envs and not self._closed:
            # the usual call: every slot, in order; no dict of the plan needed
            return actions, {k: ("step", actions[lo:hi]) for k, (lo, hi) in enumerate(self._bounds)}
        plan = self._plan_step(actions)  # checks the call; says what is wrong with it
        if len(plan) == self.num_envs:
            return plan, {
                k: ("step", [plan[i] for i in range(lo, hi)])
                for k, (lo, hi) in enumerate(self._bounds)
            }
        parts: dict[int, dict[int, Any]] = {}
        for i, a in plan.items():
            k = self._owner[i]
            parts.setdefault(k, {})[i - self._bounds[k][0]] = a
        return plan, {k: ("step", part) for k, part in parts.items()}

    def _step_out(
        self, plan: Sequence[Any] | dict[int, Any], replies: dict[int, Any]
    ) -> VectorStep:
        if len(plan) == self.num_envs and _all_ok(replies):
            # every slot stepped, every worker answered: join the columns
            obs: list[Any] = []
            rewards: list[float] = []
            terminated: list[bool] = []
            truncated: list[bool] = []
            infos: list[dict[str, Any]] = []
            for k in range(len(self._bounds)):
                _, _, o, r, te, tr, info, _ = replies[k]
                obs += o
                rewards += r
                terminated += te
                truncated += tr
                infos += info
            return VectorStep(
                obs,
                np.array(rewards, dtype=np.float64),
                np.array(terminated, dtype=bool),
                np.array(truncated, dtype=bool),
                infos,
            )
        rows = self._step_rows(plan, replies)
        self._revive(replies)
        return self._collect_step(rows)

    def _step_rows(
        self, plan: Sequence[Any] | dict[int, Any], replies: dict[int, Any]
    ) -> dict[int, SlotResult]:
        results: dict[int, SlotResult] = {}
        for k, r in replies.items():
            lo, hi = self._bounds[k]
            if isinstance(r, WorkerLost):  # the slots' rules, run here on their mirror
                for i in range(lo, hi):
                    if isinstance(plan, list) or i in plan:
                        results[i] = drive_sync(self._step_slot(i, plan[i]), _Dead(r))
                continue
            if r[0] != "ok":
                continue
            keys = range(hi - lo) if r[1] is None else r[1]
            for j, key in enumerate(keys):
                results[lo + key] = (r[2][j], r[3][j], r[4][j], r[5][j], r[6][j])
        return results

    def step(self, actions: Sequence[Any] | Mapping[int, Any]) -> VectorStep:
        """Step every env (list) or a subset (dict index → action), in the workers."""
        plan, msgs = self._step_plan(actions)
        return self._step_out(plan, self._exchange(msgs))

    async def astep(self, actions: Sequence[Any] | Mapping[int, Any]) -> VectorStep:
        """`step` that awaits the workers without blocking the running event loop."""
        plan, msgs = self._step_plan(actions)
        return self._step_out(plan, await self._aexchange(msgs))

    # -- reset ----------------------------------------------------------------------------

    def _reset_msgs(
        self,
        seed: int | Sequence[int | None] | None,
        options: dict[str, Any] | None,
        indices: Sequence[int] | None,
    ) -> tuple[dict[int, int | None], dict[int, tuple[Any, ...]]]:
        plan = self._plan_reset(seed, indices)
        seeds = self._seeds(seed)
        asked: dict[int, list[int]] = {}
        for i in plan:
            k = self._owner[i]
            asked.setdefault(k, []).append(i - self._bounds[k][0])
        msgs = {}
        for k, local in asked.items():
            lo, hi = self._bounds[k]
            whole = indices is None
            msgs[k] = ("reset", seeds[lo:hi], options, None if whole else local)
        return plan, msgs

    def _reset_out(
        self, plan: dict[int, int | None], options: dict[str, Any] | None, replies: dict[int, Any]
    ) -> tuple[list[str], list[dict[str, Any]]]:
        results: dict[int, tuple[str, dict[str, Any]]] = {}
        for k, r in replies.items():
            lo, hi = self._bounds[k]
            if isinstance(r, WorkerLost):
                for i in range(lo, hi):
                    if i in plan:
                        results[i] = drive_sync(self._reset_slot(i, plan[i], options), _Dead(r))
                continue
            if r[0] != "ok":
                continue
            keys = range(hi - lo) if r[1] is None else r[1]
            for j, key in enumerate(keys):
                results[lo + key] = (r[2][j], r[6][j])
        self._revive(replies)
        return self._collect_reset(results)

    def reset(
        self,
        *,
        seed: int | Sequence[int | None] | None = None,
        options: dict[str, Any] | None = None,
        indices: Sequence[int] | None = None,
    ) -> tuple[list[str], list[dict[str, Any]]]:
        """Reset every env (or `indices`) in the workers; observations and infos for all."""
        plan, msgs = self._reset_msgs(seed, options, indices)
        return self._reset_out(plan, options, self._exchange(msgs))

    async def areset(
        self,
        *,
        seed: int | Sequence[int | None] | None = None,
        options: dict[str, Any] | None = None,
        indices: Sequence[int] | None = None,
    ) -> tuple[list[str], list[dict[str, Any]]]:
        """`reset` that awaits the workers without blocking the running event loop."""
        plan, msgs = self._reset_msgs(seed, options, indices)
        return self._reset_out(plan, options, await self._aexchange(msgs))

    def _drive(self, gens: dict[int, Any]) -> dict[int, Any]:
        raise VectorEnvError("a ProcessVectorEnv steps its envs in its workers")

    # -- closing ---------------------------------------------------------------------------

    def close(self) -> None:
        """Close every env in the workers and end the worker processes."""
        if getattr(self, "_closed", True):
            return
        self._closed = True
        self._finalizer()


def layout(n: int, num_workers: int | None, driver_envs: int | None) -> tuple[int, int]:
    """How many worker processes, and how many of the `n` slots the driver steps itself.

    By default one block per core, the driver's included: the cores less one in workers and
    an equal share in the driver (on one core, one worker and none). Naming `num_workers`
    puts every env in that many workers unless `driver_envs` says otherwise.
    """
    cores = default_workers()
    if driver_envs is None:
        if num_workers is None and cores >= 2 and n >= 2:
            w = min(cores - 1, n - 1)
            return w, n // (w + 1)
        driver_envs = 0
    w = num_workers or max(1, cores - (driver_envs > 0))
    return min(w, n - driver_envs), driver_envs


def _stop(pool: Pool, held: list[AsyncVectorEnv]) -> None:
    """Close the driver's block (if built), then end the workers."""
    try:
        for local in held:
            local.close()
    finally:
        pool.stop()


def _all_ok(replies: dict[int, Any]) -> bool:
    """Whether every worker answered its call (no loss, no error)."""
    for r in replies.values():
        if type(r) is not tuple or r[0] != "ok":
            return False
    return True


def _share(limit: int | None, workers: int, k: int) -> int | None:
    """Worker `k`'s part of a concurrency limit split over `workers` (at least 1)."""
    if limit is None:
        return None
    return max(1, limit // workers + (k < limit % workers))
