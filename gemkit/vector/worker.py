"""The body of one `ProcessVectorEnv` worker process: a block of envs in an `AsyncVectorEnv`.

The worker holds a contiguous block of the vector's slots in an `AsyncVectorEnv` of its own
(its own event loop), so each slot's autoreset, seeding and error rules are those of
`gemkit.vector.base`, carried out where the env lives: one message each way per vector call,
whatever the autoreset mode. The driver (`gemkit.vector.process`) keeps a mirror of each slot's
last observation and done flag, from the replies, so it can answer for slots of a worker that
died and start its replacement where the slots left off.

A worker is a fresh interpreter (`python -c "...boot()" FD`), not a `multiprocessing` child:
it never re-runs the caller's main script (so its imports cost nothing here, and a script
needs no `__main__` guard), it is safe to start from a driver running threads, and it leads
a session of its own, so a Ctrl-C at the terminal reaches the driver only (which then closes
the workers) and the driver can end the worker and everything it started in one signal.

Protocol, over the socket whose descriptor is the worker's argument, each message one pickled
tuple framed as `multiprocessing.connection` frames it:

- driver -> worker, first: `("build", factories, settings)`, the block's env factories
  (cloudpickled), the autoreset mode, the concurrency limit, and for a replacement the
  slots' state to pick up.
- worker -> driver, once built: `("ready", pid)`, or `("error", text)` when a factory raised
  (the worker then exits).
- driver -> worker: `("step", actions)` (a list for the whole block, or a dict local index ->
  action), `("reset", seeds, options, indices)` (seeds for the whole block, the local indices
  to reset, None for all), or `("close",)` (close the envs and exit; no reply).
- worker -> driver, one per step or reset, in order: `("ok", keys, obs, rewards, terminated,
  truncated, infos, done)`, the columns of the slots asked (`keys` their local indices, None
  for the whole block; `done` their done flags after the call; rewards and flags None for a
  reset), or `("error", text)` when the call failed outside any env (a bug; no slot changed).

An env's exception never crosses as such: its slot's generator turns it into `info["error"]`
in the worker, like in every vector. A value that cannot be pickled (an info holding a lock)
is sent as its `repr`. The worker exits when the driver's end of the socket closes.
"""

from __future__ import annotations

import os
import pickle
import sys
from multiprocessing.connection import Connection
from typing import Any

from gemkit.vector.aio import AsyncVectorEnv

PROTOCOL = pickle.HIGHEST_PROTOCOL


def boot() -> None:
    """The worker's entry point: serve the driver on the socket named by `sys.argv[1]`."""
    conn = Connection(int(sys.argv[1]))
    try:
        msg = pickle.loads(conn.recv_bytes())
    except (EOFError, OSError):  # the driver went away before sending the envs
        return
    main(conn, msg[1], msg[2])


def main(conn: Any, payload: bytes, settings: dict[str, Any]) -> None:
    """Build the block's envs from `payload` (pickled factories), then serve the driver."""
    try:
        fns = pickle.loads(payload)
        vec = AsyncVectorEnv(
            fns,
            autoreset_mode=settings["autoreset_mode"],
            max_concurrency=settings.get("max_concurrency"),
        )
    except BaseException as e:  # noqa: BLE001 - reported to the driver, which raises it
        _send(conn, ("error", f"{type(e).__name__}: {e}"))
        return
    state = settings.get("state")
    if state is not None:  # a replacement: its slots pick up where the lost worker's were
        vec._done[:], vec._last_obs[:] = state
    _send(conn, ("ready", os.getpid()))
    try:
        serve(conn, vec)
    finally:
        vec.close()


def serve(conn: Any, vec: AsyncVectorEnv) -> None:
    """Answer the driver's calls until it says close or its end of the pipe closes."""
    while True:
        try:
            msg = pickle.loads(conn.recv_bytes())
        except (EOFError, OSError):  # the driver is gone
            return
        if msg[0] == "close":
            return
        try:
            reply = handle(vec, msg)
        except Exception as e:  # noqa: BLE001 - a bug outside every env: the driver raises it
            reply = ("error", f"{type(e).__name__}: {e}")
        try:
            _send(conn, reply)
        except OSError:  # the driver is gone
            return


def handle(vec: AsyncVectorEnv, msg: tuple[Any, ...]) -> tuple[Any, ...]:
    """Carry out one step or reset of the block; its reply's columns."""
    if msg[0] == "step":
        actions = msg[1]
        results = vec._step_results(actions)
        if isinstance(actions, dict):
            keys: list[int] | None = list(actions)
            rows = [results[i] for i in actions]
        else:
            keys, rows = None, [results[i] for i in range(vec.num_envs)]
        order = range(vec.num_envs) if keys is None else keys
        return (
            "ok",
            keys,
            [r[0] for r in rows],
            [r[1] for r in rows],
            [r[2] for r in rows],
            [r[3] for r in rows],
            [r[4] for r in rows],
            [vec._done[i] for i in order],
        )
    if msg[0] == "reset":
        _, seeds, options, indices = msg
        results = vec._reset_results(seeds, options, indices)
        keys = None if indices is None else list(results)
        order = range(vec.num_envs) if keys is None else keys
        rows = [results[i] for i in order]
        return (
            "ok",
            keys,
            [r[0] for r in rows],
            None,
            None,
            None,
            [r[1] for r in rows],
            [vec._done[i] for i in order],
        )
    raise ValueError(f"unknown request {msg[0]!r}")


def _send(conn: Any, reply: tuple[Any, ...]) -> None:
    try:
        data = pickle.dumps(reply, PROTOCOL)
    except Exception:  # noqa: BLE001 - an observation or info that cannot travel
        data = pickle.dumps(_portable(reply), PROTOCOL)
    conn.send_bytes(data)


def _portable(value: Any) -> Any:
    """`value` with every part that cannot be pickled replaced by its `repr`."""
    if type(value) is tuple:
        return tuple(_portable(v) for v in value)
    if type(value) is list:
        return [_portable(v) for v in value]
    if type(value) is dict:
        return {k: _portable(v) for k, v in value.items()}
    try:
        pickle.dumps(value, PROTOCOL)
    except Exception:  # noqa: BLE001
        return repr(value)
    return value
