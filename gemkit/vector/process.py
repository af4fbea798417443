"""`ProcessVectorEnv`: the vector API with its envs in worker processes, one event loop each.

The async vector overlaps waiting, not computing: graders (sympy, math-verify, reasoning-gym
scorers, toolworld verifiers) run on one core however many envs wait. This vector splits its
slots into contiguous blocks over `num_workers` processes (default: one per core this process
may run on); each worker steps its block in an `AsyncVectorEnv` of its own (its own event loop),
so CPU-bound envs use every core and I/O-bound ones still overlap within each worker. One
vector call is one message to each worker concerned and one reply back, whatever the
autoreset mode; the protocol is in `gemkit.vector.worker`.

Slot semantics are those of `gemkit.vector.base`, run in the worker for its envs. The driver
keeps a mirror of each slot's last observation and done flag (from the replies), so that when
a worker process dies (a segfault, the OOM killer, `kill -9`) it answers for that worker's
slots with the same rules an env error follows (`info["error"]`, `truncated=True`; in
`same_step` mode the reset that follows fails too), marks all of its slots done, and starts a
replacement whose envs reset on their next step. Nothing waits on a dead process: every wait
also watches each worker's exit.

Not covered here: more than one machine (`gemkit.vector.ray.RayVectorEnv`).
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import multiprocessing.connection as mpc
import multiprocessing.util
import os
import pickle
import signal
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from gemkit.errors import VectorEnvError
from gemkit.vector.base import SlotResult, VectorEnv, VectorStep, drive_sync

#: seconds a worker may take to build its envs (imports included) before it counts as lost
START_TIMEOUT_S = 120.0
#: seconds `close()` gives each worker to close its envs before ending its process group
CLOSE_TIMEOUT_S = 5.0
_WORKER_MODULE = "gemkit.vector.worker"
_PROTOCOL = pickle.HIGHEST_PROTOCOL

Reply = tuple[Any, ...]


class WorkerLost(RuntimeError):
    """A worker process died or could not start: every env it held is lost."""


def default_workers() -> int:
    """How many cores this process may run on (its CPU affinity), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def default_start_method() -> str:
    """`forkserver` where the platform has it (safe with threads, quick to fork), else `spawn`."""
    return "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"


class _Dead:
    """Stands in for the envs of a lost worker: every call raises the loss."""

    def __init__(self, error: WorkerLost):
        self.error = error

    def step(self, action: Any) -> Any:
        raise self.error

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> Any:
        raise self.error


class _Worker:
    """One worker process and the driver's end of its pipe."""

    __slots__ = ("conn", "deadline", "hi", "lo", "lost", "owed", "pid", "proc", "ready")

    def __init__(self, lo: int, hi: int):
        self.lo, self.hi = lo, hi
        self.proc: Any = None
        self.conn: Any = None
        self.pid: int | None = None
        self.owed = 0  # messages the worker still has to send (its ready message, replies)
        self.ready = False
        self.deadline = 0.0
        self.lost: WorkerLost | None = None

    def span(self) -> str:
        return f"env {self.lo}" if self.hi - self.lo == 1 else f"envs {self.lo}-{self.hi - 1}"


#: every pool with live workers: a forked worker closes its copies of their pipes
_POOLS: weakref.WeakSet[_Pool] = weakref.WeakSet()


class _Pool:
    """The worker processes of one vector. It holds no reference to the vector, so the
    vector's finalizer (run on close, garbage collection or interpreter exit) can stop it."""

    def __init__(
        self,
        ctx: Any,
        payloads: list[Any],
        bounds: list[tuple[int, int]],
        settings: list[dict[str, Any]],
        start_timeout_s: float,
    ):
        self.ctx = ctx
        self.fork = ctx.get_start_method() == "fork"
        self.payloads = payloads
        self.settings = settings
        self.start_timeout_s = start_timeout_s
        self.workers = [_Worker(lo, hi) for lo, hi in bounds]
        self.stopped = False
        _POOLS.add(self)

    # -- starting and losing workers ------------------------------------------------------

    def start(self, k: int, state: tuple[list[bool], list[Any]] | None = None) -> None:
        """Start worker `k` (not waiting for it); `state` seeds a replacement's slots."""
        w = self.workers[k]
        parent, child = self.ctx.Pipe()
        settings = {**self.settings[k], "state": state}
        if self.fork:
            others = [
                x.conn.fileno()
                for p in _POOLS
                for x in p.workers
                if x.conn is not None and not x.conn.closed
            ]
            settings["inherited_fds"] = [*others, parent.fileno()]
        proc = self.ctx.Process(
            target=_worker_main,
            args=(child, self.payloads[k], settings),
            name=f"gemkit-vector-worker-{k}",
            daemon=False,  # its envs may start processes of their own
        )
        try:
            proc.start()
        finally:
            child.close()
        w.proc, w.conn, w.pid = proc, parent, proc.pid
        w.owed, w.ready, w.lost = 1, False, None
        w.deadline = time.monotonic() + self.start_timeout_s

    def lose(self, k: int, why: str | None = None) -> WorkerLost:
        """Mark worker `k` lost (ending its process group if it still runs); the loss."""
        w = self.workers[k]
        if w.lost is not None:
            return w.lost
        if why is None:
            w.proc.join(1.0)  # its pipe closed as it exited: wait for how it ended
            why = _exit_text(w.proc.exitcode)
        _end_group(w.proc, w.pid, wait=0.0)
        w.lost = WorkerLost(
            f"the worker process of {w.span()} (pid {w.pid}) {why}; "
            "its envs restart and reset on their next step"
        )
        with contextlib.suppress(OSError):
            w.conn.close()
        w.owed, w.ready = 0, False
        return w.lost

    # -- messages ------------------------------------------------------------------------

    def send(self, k: int, data: bytes) -> WorkerLost | None:
        """Send one call to worker `k`; its loss when it is gone."""
        w = self.workers[k]
        if w.lost is not None:
            return w.lost
        try:
            w.conn.send_bytes(data)
        except OSError:
            return self.lose(k)
        except BaseException:  # an interrupt mid-message: the pipe's framing is broken
            self.lose(k, "was stopped in the middle of a message")
            raise
        w.owed += 1
        return None

    def ready_among(self, pending: set[int], timeout: float | None) -> set[int]:
        """Workers of `pending` with a message to read or a process that ended (or timed out)."""
        objs: dict[Any, int] = {}
        deadline = None
        for k in pending:
            w = self.workers[k]
            objs[w.conn] = k
            objs[w.proc.sentinel] = k
            if not w.ready:
                deadline = w.deadline if deadline is None else min(deadline, w.deadline)
        if deadline is not None:
            left = max(0.0, deadline - time.monotonic())
            timeout = left if timeout is None else min(timeout, left)
        ready = {objs[o] for o in mpc.wait(list(objs), timeout)}
        now = time.monotonic()
        for k in pending - ready:
            w = self.workers[k]
            if not w.ready and now >= w.deadline:
                self.lose(k, f"did not start within {self.start_timeout_s:g} s")
                ready.add(k)
        return ready

    def take(self, k: int, apply: Callable[[int, Reply], None], out: dict[int, Any]) -> bool:
        """Read one message of worker `k` into `out` (ok replies also go to `apply`); True
        once the worker owes nothing more (or is lost)."""
        w = self.workers[k]
        if w.lost is not None:
            out[k] = w.lost
            return True
        if not w.conn.poll():  # its process ended with nothing left to read
            out[k] = self.lose(k)
            return True
        try:
            data = w.conn.recv_bytes()
        except (EOFError, OSError):
            out[k] = self.lose(k)
            return True
        except BaseException:
            self.lose(k, "was stopped in the middle of a message")
            raise
        w.owed -= 1
        msg = pickle.loads(data)
        if not w.ready:
            if msg[0] == "ready":
                w.ready, w.pid = True, msg[1]
            else:  # its envs could not be built
                out[k] = self.lose(k, f"could not build its envs ({msg[1]})")
                return True
        elif msg[0] == "ok":
            apply(k, msg)
            out[k] = msg
        else:
            out[k] = msg
        return w.owed == 0

    def collect(self, ks: list[int], apply: Callable[[int, Reply], None]) -> dict[int, Any]:
        """Read every message workers `ks` owe; each one's last (or its loss)."""
        out, pending = self._owing(ks)
        while pending:
            for k in self.ready_among(pending, None):
                if self.take(k, apply, out):
                    pending.discard(k)
        return out

    async def acollect(self, ks: list[int], apply: Callable[[int, Reply], None]) -> dict[int, Any]:
        """`collect` that awaits the pipes on the running loop instead of blocking it."""
        out, pending = self._owing(ks)
        while pending:
            ready = self.ready_among(pending, 0)
            if not ready:
                await self._readable(pending)
                continue
            for k in ready:
                if self.take(k, apply, out):
                    pending.discard(k)
        return out

    def _owing(self, ks: list[int]) -> tuple[dict[int, Any], set[int]]:
        """The losses already known among `ks`, and the others that owe messages."""
        lost = {k: self.workers[k].lost for k in ks if self.workers[k].lost is not None}
        return lost, {k for k in ks if k not in lost and self.workers[k].owed}

    async def _readable(self, pending: set[int]) -> None:
        loop = asyncio.get_running_loop()
        woken = loop.create_future()

        def wake() -> None:
            if not woken.done():
                woken.set_result(None)

        fds = []
        for k in pending:
            w = self.workers[k]
            fds += [w.conn.fileno(), w.proc.sentinel]
        timeout = None
        starting = [self.workers[k].deadline for k in pending if not self.workers[k].ready]
        if starting:
            timeout = max(0.0, min(starting) - time.monotonic())
        for fd in fds:
            loop.add_reader(fd, wake)
        try:
            await asyncio.wait_for(woken, timeout)
        except asyncio.TimeoutError:
            pass  # a worker late to start: the next poll marks it lost
        finally:
            for fd in fds:
                loop.remove_reader(fd)

    # -- stopping ------------------------------------------------------------------------

    def stop(self) -> None:
        """Ask every worker to close its envs and exit; end the process groups of the late."""
        if self.stopped:
            return
        self.stopped = True
        bye = pickle.dumps(("close",), _PROTOCOL)
        live = [w for w in self.workers if w.proc is not None and w.lost is None]
        for w in live:
            with contextlib.suppress(OSError, ValueError):
                w.conn.send_bytes(bye)
        deadline = time.monotonic() + CLOSE_TIMEOUT_S
        for w in live:
            w.proc.join(max(0.0, deadline - time.monotonic()))
        for w in self.workers:
            if w.proc is not None:
                _end_group(w.proc, w.pid, wait=1.0)
            if w.conn is not None:
                with contextlib.suppress(OSError):
                    w.conn.close()
        _POOLS.discard(self)


def _worker_main(conn: Any, payload: Any, settings: dict[str, Any]) -> None:
    # a module-level target, importable by the spawn and forkserver start methods
    from gemkit.vector.worker import main

    main(conn, payload, settings)


def _exit_text(code: int | None) -> str:
    if code is None:
        return "stopped answering"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def _end_group(proc: Any, pid: int | None, *, wait: float) -> None:
    """End a worker and what it started: its process group (it leads one), then itself."""
    if proc is None:
        return
    if wait and proc.is_alive():
        proc.join(wait)
    if not proc.is_alive():
        proc.join(0)
    if pid and hasattr(os, "killpg"):
        # the worker leads its own group; while any member lives the kernel keeps its id
        # from being reused, so this reaches only what the worker started
        with contextlib.suppress(OSError):  # its group may have no process left
            os.killpg(pid, signal.SIGKILL)
    if proc.is_alive():
        proc.kill()
    proc.join(1.0)


def _dumps_factories(fns: Sequence[Callable[[], Any]], first: int) -> bytes:
    """The block's env factories as bytes a fresh process can load (cloudpickle: lambdas and
    closures travel by value)."""
    import cloudpickle

    try:
        return cloudpickle.dumps(list(fns), protocol=_PROTOCOL)
    except Exception as e:
        raise VectorEnvError(
            f"the env factories of envs {first}-{first + len(fns) - 1} cannot be sent to a worker "
            f"process ({type(e).__name__}: {e}); make them from picklable parts (a class, a "
            "module-level function, functools.partial, gemkit.make_vec(..., mode='process')), "
            "or pass start_method='fork'"
        ) from None


class ProcessVectorEnv(VectorEnv):
    """A vector env whose envs run in `num_workers` processes, each on its own event loop.

    For CPU-bound envs (graders, verifiers, simulators): with `num_workers` cores they step up
    to `num_workers` times as fast as in one process. Same API, seeds, autoreset and error
    isolation as `AsyncVectorEnv`; `envs` is empty (the envs live in the workers).

    - `num_workers`: processes (default: the cores this process may run on; at most one per
      env). Worker *k* holds a contiguous block of slots.
    - `max_concurrency`: bounds async env calls in flight, split over the workers (at least
      one each).
    - `start_method`: `forkserver` (default on Linux and macOS), `spawn`, or `fork` (fastest
      start, factories need not pickle, but unsafe when the driver runs threads). The env
      factories travel by cloudpickle. As with any `multiprocessing` program, a script that
      builds one must guard its top level with `if __name__ == "__main__":`.
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
        max_concurrency: int | None = None,
        start_method: str | None = None,
        start_timeout_s: float = START_TIMEOUT_S,
    ):
        self._init_slots(len(env_fns), autoreset_mode)
        if num_workers is not None and num_workers < 1:
            raise VectorEnvError(f"num_workers must be >= 1 or None, got {num_workers}")
        if max_concurrency is not None and max_concurrency < 1:
            raise VectorEnvError(f"max_concurrency must be >= 1 or None, got {max_concurrency}")
        method = start_method or default_start_method()
        if method not in multiprocessing.get_all_start_methods():
            raise VectorEnvError(
                f"unknown start_method {method!r}; this platform has "
                f"{multiprocessing.get_all_start_methods()}"
            )
        n = self.num_envs
        self.num_workers = w = min(num_workers or default_workers(), n)
        self.start_method = method
        self.max_concurrency = max_concurrency
        bounds = [(k * n // w, (k + 1) * n // w) for k in range(w)]
        self._bounds = bounds
        self._owner = [k for k, (lo, hi) in enumerate(bounds) for _ in range(lo, hi)]
        fns = list(env_fns)
        payloads: list[Any] = [
            fns[lo:hi] if method == "fork" else _dumps_factories(fns[lo:hi], lo)
            for lo, hi in bounds
        ]
        settings = [
            {"autoreset_mode": autoreset_mode, "max_concurrency": _share(max_concurrency, w, k)}
            for k in range(w)
        ]
        ctx = multiprocessing.get_context(method)
        if method == "forkserver":
            _preload_worker(ctx)
        self._pool = pool = _Pool(ctx, payloads, bounds, settings, start_timeout_s)
        # run before multiprocessing joins its children at exit, and on garbage collection
        self._finalizer = multiprocessing.util.Finalize(self, pool.stop, exitpriority=10)
        try:
            for k in range(w):
                pool.start(k)
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
            return {k: pickle.dumps(m, _PROTOCOL) for k, m in msgs.items()}
        except Exception as e:
            raise VectorEnvError(
                f"actions and reset options must pickle to reach the worker processes "
                f"({type(e).__name__}: {e})"
            ) from None

    def _exchange(self, msgs: dict[int, tuple[Any, ...]]) -> dict[int, Any]:
        data = self._encode(msgs)
        pool = self._pool
        pool.collect([k for k, w in enumerate(pool.workers) if w.owed], self._apply)
        out: dict[int, Any] = {}
        for k, raw in data.items():
            lost = pool.send(k, raw)
            if lost is not None:
                out[k] = lost
        out.update(pool.collect([k for k in data if k not in out], self._apply))
        return out

    async def _aexchange(self, msgs: dict[int, tuple[Any, ...]]) -> dict[int, Any]:
        data = self._encode(msgs)
        pool = self._pool
        await pool.acollect([k for k, w in enumerate(pool.workers) if w.owed], self._apply)
        out: dict[int, Any] = {}
        for k, raw in data.items():
            lost = pool.send(k, raw)
            if lost is not None:
                out[k] = lost
        out.update(await pool.acollect([k for k in data if k not in out], self._apply))
        return out

    def _revive(self, replies: dict[int, Any]) -> None:
        """Start a replacement for each lost worker; its slots count as finished episodes.
        Then raise what a worker reported outside every env (a bug), if any."""
        for k, reply in replies.items():
            if isinstance(reply, WorkerLost):
                lo, hi = self._bounds[k]
                self._done[lo:hi] = [True] * (hi - lo)
                self._pool.start(k, (self._done[lo:hi], self._last_obs[lo:hi]))
        for k, reply in replies.items():
            if isinstance(reply, tuple) and reply[0] == "error":
                raise VectorEnvError(f"worker process {k} failed: {reply[1]}")

    # -- step -----------------------------------------------------------------------------

    def _step_msgs(self, plan: dict[int, Any]) -> dict[int, tuple[Any, ...]]:
        if len(plan) == self.num_envs:
            return {
                k: ("step", [plan[i] for i in range(lo, hi)])
                for k, (lo, hi) in enumerate(self._bounds)
            }
        parts: dict[int, dict[int, Any]] = {}
        for i, a in plan.items():
            k = self._owner[i]
            parts.setdefault(k, {})[i - self._bounds[k][0]] = a
        return {k: ("step", part) for k, part in parts.items()}

    def _step_out(self, plan: dict[int, Any], replies: dict[int, Any]) -> VectorStep:
        if len(plan) == self.num_envs and all(
            isinstance(r, tuple) and r[0] == "ok" for r in replies.values()
        ):  # every slot stepped, every worker answered: join the columns
            cols: list[list[Any]] = [[], [], [], [], []]
            for k in range(self.num_workers):
                r = replies[k]
                for c in range(5):
                    cols[c] += r[2 + c]
            return VectorStep(
                cols[0],
                np.array(cols[1], dtype=np.float64),
                np.array(cols[2], dtype=bool),
                np.array(cols[3], dtype=bool),
                cols[4],
            )
        rows = self._step_rows(plan, replies)
        self._revive(replies)
        return self._collect_step(rows)

    def _step_rows(self, plan: dict[int, Any], replies: dict[int, Any]) -> dict[int, SlotResult]:
        results: dict[int, SlotResult] = {}
        for k, r in replies.items():
            lo, hi = self._bounds[k]
            if isinstance(r, WorkerLost):  # the slots' rules, run here on their mirror
                for i in range(lo, hi):
                    if i in plan:
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
        plan = self._plan_step(actions)
        return self._step_out(plan, self._exchange(self._step_msgs(plan)))

    async def astep(self, actions: Sequence[Any] | Mapping[int, Any]) -> VectorStep:
        """`step` that awaits the workers without blocking the running event loop."""
        plan = self._plan_step(actions)
        return self._step_out(plan, await self._aexchange(self._step_msgs(plan)))

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


def _share(limit: int | None, workers: int, k: int) -> int | None:
    """Worker `k`'s part of a concurrency limit split over `workers` (at least 1)."""
    if limit is None:
        return None
    return max(1, limit // workers + (k < limit % workers))


def _preload_worker(ctx: Any) -> None:
    """Have the fork server import the worker module once, so each worker forks with it."""
    from multiprocessing import forkserver

    current = list(getattr(forkserver._forkserver, "_preload_modules", None) or [])
    if _WORKER_MODULE not in current:
        ctx.set_forkserver_preload([*current, _WORKER_MODULE])
