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

Protocol, over the socket whose descriptor is the worker's argument; each message is one tuple
in a frame (`encode`): a 5-byte header (the body's length, and whether the body is `marshal`,
a few times faster for plain data, or `pickle`, for anything else), then the body:

- driver -> worker, first: `("build", factories, settings)`, the block's env factories
  (cloudpickled), the autoreset mode, the concurrency limit, how long to poll for the next
  message before sleeping (`spin_s`, when the worker has a core of its own), and for a
  replacement the slots' state to pick up.
- worker -> driver, once built: `("ready", pid)`, or `("error", text)` when a factory raised
  (the worker then exits).
- driver -> worker: `("step", actions)` (a list for the whole block, or a dict local index ->
  action), `("reset", seeds, options, indices)` (seeds for the whole block, the local indices
  to reset, None for all), or `("close",)` (close the envs and exit; no reply).
- worker -> driver, one per step or reset, in order: `("ok", keys, obs, rewards, terminated,
  truncated, infos, done)`, the columns of the slots asked (`keys` their local indices, None
  for the whole block; `done` their done flags after the call; rewards and flags None for a
  reset), or `("error", text)` when the call failed outside any env (a bug; no slot changed).

The driver steps its own block (if it has one) with the same `handle` (`ahandle` on its
loop), so its replies have the same shape.

An env's exception never crosses as such: its slot's generator turns it into `info["error"]`
in the worker, like in every vector. A value that cannot be pickled (an info holding a lock)
is sent as its `repr`. The worker exits when the driver's end of the socket closes.
"""

from __future__ import annotations

import marshal
import os
import pickle
import select
import socket
import struct
import sys
import time
from typing import Any

from gemkit.cores import CORES_ENV
from gemkit.vector.aio import AsyncVectorEnv

PROTOCOL = pickle.HIGHEST_PROTOCOL
#: a frame's header: the body's length, and how it is encoded (`MARSHAL` or `PICKLE`)
HEADER = struct.Struct(">IB")
MARSHAL, PICKLE = 0, 1


def encode(obj: Any) -> bytes:
    """One framed message: marshal (a few times faster) for plain data, else pickle."""
    try:
        body, how = marshal.dumps(obj, 4), MARSHAL
    except ValueError:  # something marshal does not carry (a class instance, numpy)
        body, how = pickle.dumps(obj, PROTOCOL), PICKLE
    return HEADER.pack(len(body), how) + body


def receive(sock: socket.socket) -> Any:
    """The next framed message on `sock`; EOFError when the other side has closed it."""
    head = sock.recv(HEADER.size, socket.MSG_WAITALL)
    if len(head) < HEADER.size:
        head += _read(sock, HEADER.size - len(head))
    size, how = HEADER.unpack(head)
    body = sock.recv(size, socket.MSG_WAITALL)
    if len(body) < size:
        body += _read(sock, size - len(body))
    return marshal.loads(body) if how == MARSHAL else pickle.loads(body)


def _read(sock: socket.socket, n: int) -> bytes:
    """The rest of a message a signal cut short (or EOFError: the other side closed)."""
    parts = []
    while n > 0:
        more = sock.recv(n, socket.MSG_WAITALL)
        if not more:
            raise EOFError("the other side closed the socket")
        parts.append(more)
        n -= len(more)
    return b"".join(parts)


def boot() -> None:
    """The worker's entry point: serve the driver on the socket named by `sys.argv[1]`."""
    sock = socket.socket(fileno=int(sys.argv[1]))
    try:
        msg = receive(sock)
    except (EOFError, OSError):  # the driver went away before sending the envs
        return
    main(sock, msg[1], msg[2])


def main(sock: socket.socket, payload: bytes, settings: dict[str, Any]) -> None:
    """Build the block's envs from `payload` (pickled factories), then serve the driver."""
    if settings.get("cores"):  # this worker's share of the cores, for what its envs start
        os.environ[CORES_ENV] = str(settings["cores"])
    try:
        fns = pickle.loads(payload)
        vec = AsyncVectorEnv(
            fns,
            autoreset_mode=settings["autoreset_mode"],
            max_concurrency=settings.get("max_concurrency"),
        )
    except BaseException as e:  # noqa: BLE001 - reported to the driver, which raises it
        sock.sendall(encode(("error", f"{type(e).__name__}: {e}")))
        return
    state = settings.get("state")
    if state is not None:  # a replacement: its slots pick up where the lost worker's were
        vec._done[:], vec._last_obs[:] = state
    sock.sendall(encode(("ready", os.getpid())))
    try:
        serve(sock, vec, settings.get("spin_s", 0.0))
    finally:
        vec.close()


def serve(sock: socket.socket, vec: AsyncVectorEnv, spin_s: float = 0.0) -> None:
    """Answer the driver's calls until it says close or its end of the socket closes."""
    while True:
        if spin_s:  # with a core of its own: poll a moment before sleeping in recv
            until = time.perf_counter() + spin_s
            while not select.select([sock], [], [], 0)[0] and time.perf_counter() < until:
                pass
        try:
            msg = receive(sock)
        except (EOFError, OSError):  # the driver is gone
            return
        if msg[0] == "close":
            return
        try:
            reply = handle(vec, msg)
        except Exception as e:  # noqa: BLE001 - a bug outside every env: the driver raises it
            reply = ("error", f"{type(e).__name__}: {e}")
        try:
            sock.sendall(_encode_reply(reply))
        except OSError:  # the driver is gone
            return


def handle(vec: AsyncVectorEnv, msg: tuple[Any, ...]) -> tuple[Any, ...]:
    """Carry out one step or reset of the block; its reply's columns."""
    if msg[0] == "step":
        return step_reply(vec, msg[1], vec._step_results(msg[1]))
    if msg[0] == "reset":
        _, seeds, options, indices = msg
        return reset_reply(vec, indices, vec._reset_results(seeds, options, indices))
    raise ValueError(f"unknown request {msg[0]!r}")


async def ahandle(vec: AsyncVectorEnv, msg: tuple[Any, ...]) -> tuple[Any, ...]:
    """`handle` on the running event loop (the block the driver steps itself)."""
    if msg[0] == "step":
        return step_reply(vec, msg[1], await vec._astep_results(msg[1]))
    if msg[0] == "reset":
        _, seeds, options, indices = msg
        return reset_reply(vec, indices, await vec._areset_results(seeds, options, indices))
    raise ValueError(f"unknown request {msg[0]!r}")


def step_reply(vec: AsyncVectorEnv, actions: Any, results: dict[int, Any]) -> tuple[Any, ...]:
    """The reply to a step: the columns of the slots stepped, and their done flags."""
    if isinstance(actions, dict):
        keys: list[int] | None = list(actions)
        rows = [results[i] for i in actions]
        done = [vec._done[i] for i in actions]
    else:
        keys, rows, done = None, list(results.values()), vec._done
    obs, rewards, terminated, truncated, infos = zip(*rows, strict=True)
    return ("ok", keys, obs, rewards, terminated, truncated, infos, done)


def reset_reply(
    vec: AsyncVectorEnv, indices: list[int] | None, resets: dict[int, Any]
) -> tuple[Any, ...]:
    """The reply to a reset: the observations and infos of the slots reset."""
    keys = None if indices is None else list(resets)
    obs, infos = zip(*resets.values(), strict=True)
    done = vec._done if keys is None else [vec._done[i] for i in keys]
    return ("ok", keys, obs, None, None, None, infos, done)


def _encode_reply(reply: tuple[Any, ...]) -> bytes:
    try:
        return encode(reply)
    except Exception:  # noqa: BLE001 - an observation or info that cannot travel
        return encode(_portable(reply))


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
