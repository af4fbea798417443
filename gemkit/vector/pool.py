"""The worker processes of a `ProcessVectorEnv`: start them, wait on them, notice deaths, end them.

Each worker is a fresh interpreter running `gemkit.vector.worker.boot` in a session of its
own, talking to the driver over a socket pair (the protocol is in `gemkit.vector.worker`).
One poller (epoll, else poll) watches every worker's socket and, where the platform has
pidfds, its exit, so a wait never outlasts a worker that died; without pidfds a wait wakes
every `POLL_S` to look. When each process has a core (`spin_s`), a wait for replies polls
for that long before it sleeps. A Ctrl-C is deferred while a message goes out or a reply is
read and applied (`_hold_interrupts`), so it never leaves a worker's stream half read.

Ending a worker ends its session's process group, so what its envs started goes with it. The
group id is only signalled while the worker is not yet reaped (its exit status is read with
`WNOWAIT`): the kernel cannot give that id to another process before then.

What it does not do: decide what a lost worker means for its slots (`gemkit.vector.process`).
"""

from __future__ import annotations

import _signal
import asyncio
import contextlib
import os
import pickle
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from gemkit.vector.worker import encode, receive

#: seconds a wait sleeps at most between looks at workers it cannot watch through a pidfd
POLL_S = 0.5
#: seconds `stop()` gives the workers to close their envs before ending their groups
CLOSE_TIMEOUT_S = 5.0
PROTOCOL = pickle.HIGHEST_PROTOCOL
_BOOT = "from gemkit.vector.worker import boot; boot()"

Reply = tuple[Any, ...]


class WorkerLost(RuntimeError):
    """A worker process died or could not start: every env it held is lost."""


class Worker:
    """One worker process, the driver's end of its socket, and what it still owes."""

    __slots__ = ("conn", "deadline", "hi", "lo", "lost", "owed", "pid", "pidfd", "proc", "ready")

    def __init__(self, lo: int, hi: int):
        self.lo, self.hi = lo, hi
        self.proc: subprocess.Popen[bytes] | None = None
        self.conn: socket.socket | None = None
        self.pid = 0
        self.pidfd: int | None = None
        self.owed = 0  # messages the worker still has to send (its ready message, replies)
        self.ready = False
        self.deadline = 0.0
        self.lost: WorkerLost | None = None

    def channel(self) -> socket.socket:
        """The driver's end of a started worker's socket."""
        assert self.conn is not None, "the worker has not started"
        return self.conn

    def span(self) -> str:
        """Which slots it holds, for messages."""
        return f"env {self.lo}" if self.hi - self.lo == 1 else f"envs {self.lo}-{self.hi - 1}"


class Pool:
    """The workers of one vector. It holds no reference to the vector, so the vector's
    finalizer (run on close, garbage collection or interpreter exit) can stop it."""

    def __init__(
        self,
        bounds: list[tuple[int, int]],
        payloads: list[bytes],
        settings: list[dict[str, Any]],
        start_timeout_s: float,
        spin_s: float = 0.0,
    ):
        self.payloads = payloads
        self.settings = settings
        self.start_timeout_s = start_timeout_s
        self.workers = [Worker(lo, hi) for lo, hi in bounds]
        self.poller = _Poller()
        self.stopped = False
        self.spin_s = spin_s  # how long a wait for replies polls before it sleeps

    # -- starting and losing workers ------------------------------------------------------

    def start(self, ks: list[int], states: dict[int, Any] | None = None) -> None:
        """Start workers `ks`, all processes first, then their envs (not waiting for them)."""
        spawned = [k for k in ks if self._spawn(k)]
        held = _hold_interrupts()
        try:
            for k in spawned:  # its reply, the ready message, is owed since it was spawned
                settings = {**self.settings[k], "state": (states or {}).get(k)}
                build = encode(("build", self.payloads[k], settings))
                self.send(k, build, reply=False)
        finally:
            _release_interrupts(held)

    def _spawn(self, k: int) -> bool:
        w = self.workers[k]
        ours, theirs = socket.socketpair()
        try:
            w.proc = subprocess.Popen(
                [sys.executable, "-c", _BOOT, str(theirs.fileno())],
                pass_fds=(theirs.fileno(),),
                env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # its own group: no terminal Ctrl-C, one signal ends all
            )
        except OSError as e:
            ours.close()
            w.proc = None
            w.lost = WorkerLost(f"the worker process of {w.span()} could not start: {e}")
            return False
        finally:
            theirs.close()
        w.conn = ours
        w.pid, w.owed, w.ready, w.lost = w.proc.pid, 1, False, None
        w.deadline = time.monotonic() + self.start_timeout_s
        self.poller.add(w.conn.fileno(), k, True)
        try:
            w.pidfd = os.pidfd_open(w.pid)
        except (AttributeError, OSError):  # not Linux 5.3+: waits poll instead
            w.pidfd = None
        else:
            self.poller.add(w.pidfd, k, False)
        return True

    def lose(self, k: int, why: str | None = None) -> WorkerLost:
        """Mark worker `k` lost, ending its process group; `why` defaults to how it exited."""
        w = self.workers[k]
        if w.lost is not None:
            return w.lost
        if why is None:
            why = _exit_text(_wait_exit(w, 1.0))  # its socket closed as it exited
        w.lost = WorkerLost(
            f"the worker process of {w.span()} (pid {w.pid}) {why}; "
            "its envs restart and reset on their next step"
        )
        self._end(w)
        return w.lost

    def _end(self, w: Worker) -> None:
        """End the worker's process group (it leads it), then reap it; forget its fds."""
        if w.proc is None:
            return
        if w.conn is not None and w.conn.fileno() >= 0:
            self.poller.remove(w.conn.fileno())
        if w.pidfd is not None:
            self.poller.remove(w.pidfd)
        if w.proc.returncode is None:  # not reaped yet: its group id is still its own
            with contextlib.suppress(OSError):  # the group may have no process left
                os.killpg(w.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                w.proc.wait(5.0)
        if w.pidfd is not None:
            with contextlib.suppress(OSError):
                os.close(w.pidfd)
            w.pidfd = None
        if w.conn is not None:
            with contextlib.suppress(OSError):
                w.conn.close()
        w.owed, w.ready = 0, False

    # -- messages ------------------------------------------------------------------------

    def send(self, k: int, data: bytes, *, reply: bool = True) -> WorkerLost | None:
        """Send one message to worker `k` (which then owes a reply); its loss when it is gone.
        Call it with interrupts held (`send_all` does)."""
        w = self.workers[k]
        if w.lost is not None:
            return w.lost
        try:
            w.channel().sendall(data)
        except OSError:
            return self.lose(k)
        except BaseException:  # a failure mid-message: the socket's framing is broken
            self.lose(k, "was stopped in the middle of a message")
            raise
        w.owed += reply
        return None

    def send_all(self, data: dict[int, bytes]) -> dict[int, WorkerLost]:
        """Send each worker its message; the losses of those found gone.

        A Ctrl-C is held off while the messages go out (they are small and every worker is
        waiting to read), so it lands before or after a message and its count, never between.
        """
        lost = {}
        held = _hold_interrupts()
        try:
            for k, raw in data.items():
                gone = self.send(k, raw)
                if gone is not None:
                    lost[k] = gone
        finally:
            _release_interrupts(held)
        return lost

    def ready_among(self, pending: set[int], timeout: float | None) -> dict[int, bool]:
        """Workers of `pending` with something to read, each mapped to whether its socket is
        readable (else it exited, or is late to start: it is then already lost)."""
        workers = self.workers
        # the usual wait, on started workers watched through pidfds, needs no deadline
        unusual = [workers[k] for k in pending if not workers[k].ready or workers[k].pidfd is None]
        wait = timeout
        if unusual:
            now = time.monotonic()
            limits = [w.deadline - now for w in unusual if not w.ready]
            limits += [POLL_S] * any(w.pidfd is None for w in unusual)
            wait = max(0.0, min(limits if timeout is None else [*limits, timeout]))
        ready: dict[int, bool] = {}
        for k, is_socket in self.poller.wait(wait):
            if k in pending:
                ready[k] = ready.get(k, False) or is_socket
            elif workers[k].lost is None:
                # a worker owing nothing stirred: it exited (or broke the protocol); lose it
                # now, report it when its slots are asked for
                self.lose(k)
        if unusual:
            now = time.monotonic()
            for w in unusual:
                k = workers.index(w)
                if k in ready:
                    continue
                if not w.ready and now >= w.deadline:
                    self.lose(k, f"did not start within {self.start_timeout_s:g} s")
                    ready[k] = False
                elif w.pidfd is None and _exited(w) is not None:
                    ready[k] = False
        return ready

    def take(
        self, ready: dict[int, bool], apply: Callable[[int, Reply], None], out: dict[int, Any]
    ) -> set[int]:
        """Read one message of each worker in `ready` into `out` (ok replies also go to
        `apply`); those that owe nothing more (or are lost). A Ctrl-C is held off meanwhile,
        so it never falls between reading a reply and applying it."""
        held = _hold_interrupts()
        try:
            return {k for k, readable in ready.items() if self._take(k, readable, apply, out)}
        finally:
            _release_interrupts(held)

    def _take(
        self, k: int, readable: bool, apply: Callable[[int, Reply], None], out: dict[int, Any]
    ) -> bool:
        w = self.workers[k]
        if w.lost is not None:
            out[k] = w.lost
            return True
        if not (
            readable or select.select([w.channel()], [], [], 0)[0]
        ):  # it ended, nothing to read
            out[k] = self.lose(k)
            return True
        try:
            msg = receive(w.channel())
        except (EOFError, OSError):
            out[k] = self.lose(k)
            return True
        except BaseException:
            self.lose(k, "was stopped in the middle of a message")
            raise
        w.owed -= 1
        if not w.ready:
            if msg[0] == "ready":
                w.ready = True
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
        if pending and self.spin_s:  # each process has a core: poll before sleeping
            until = time.perf_counter() + self.spin_s
            while pending and time.perf_counter() < until:
                ready = self.ready_among(pending, 0)
                if ready:
                    pending -= self.take(ready, apply, out)
        while pending:
            pending -= self.take(self.ready_among(pending, None), apply, out)
        return out

    async def acollect(self, ks: list[int], apply: Callable[[int, Reply], None]) -> dict[int, Any]:
        """`collect` that awaits the sockets on the running loop instead of blocking it."""
        out, pending = self._owing(ks)
        until = time.perf_counter() + self.spin_s
        while pending:
            ready = self.ready_among(pending, 0)
            if ready:
                pending -= self.take(ready, apply, out)
            elif time.perf_counter() < until:  # poll, letting the loop's other tasks run
                await asyncio.sleep(0)
            else:
                await self._readable(pending)
        return out

    def _owing(self, ks: list[int]) -> tuple[dict[int, Any], set[int]]:
        """The losses already known among `ks`, and the others that owe messages."""
        lost, pending = {}, set()
        for k in ks:
            w = self.workers[k]
            if w.lost is not None:
                lost[k] = w.lost
            elif w.owed:
                pending.add(k)
        return lost, pending

    def owing(self) -> list[int]:
        """The workers that still owe messages (replies of an interrupted call, a ready one)."""
        return [k for k, w in enumerate(self.workers) if w.owed]

    async def _readable(self, pending: set[int]) -> None:
        """Wait until a worker of `pending` stirs, or until it is time to look again."""
        loop = asyncio.get_running_loop()
        woken = loop.create_future()

        def wake() -> None:
            if not woken.done():
                woken.set_result(None)

        poll_fd = self.poller.fileno()
        fds = (
            [poll_fd]
            if poll_fd is not None
            else [
                fd
                for k in pending
                for fd in (self.workers[k].channel().fileno(), self.workers[k].pidfd)
                if fd is not None
            ]
        )
        now = time.monotonic()
        limits = [self.workers[k].deadline - now for k in pending if not self.workers[k].ready]
        if any(self.workers[k].pidfd is None for k in pending):
            limits.append(POLL_S)
        for fd in fds:
            loop.add_reader(fd, wake)
        try:
            await asyncio.wait_for(woken, max(0.0, min(limits)) if limits else None)
        except asyncio.TimeoutError:
            pass  # time to look at the workers again
        finally:
            for fd in fds:
                loop.remove_reader(fd)

    # -- stopping ------------------------------------------------------------------------

    def stop(self) -> None:
        """Ask every worker to close its envs and exit; end the process groups of the late."""
        if self.stopped:
            return
        self.stopped = True
        bye = encode(("close",))
        live = [w for w in self.workers if w.proc is not None and w.lost is None]
        for w in live:
            with contextlib.suppress(OSError, ValueError):
                w.channel().sendall(bye)
        deadline = time.monotonic() + CLOSE_TIMEOUT_S
        for w in live:
            _wait_exit(w, deadline - time.monotonic())
        for w in self.workers:
            self._end(w)
        self.poller.close()


class _Poller:
    """Readiness of every fd of a pool (sockets, pidfds) in one call: epoll where the platform
    has it, else poll; each fd maps to its worker and whether it is the worker's socket."""

    def __init__(self) -> None:
        self.epoll = hasattr(select, "epoll")
        self.poll: Any = select.epoll() if self.epoll else select.poll()
        self.owner: dict[int, tuple[int, bool]] = {}

    def add(self, fd: int, k: int, is_socket: bool) -> None:
        """Watch `fd` of worker `k`."""
        self.poll.register(fd, select.POLLIN)
        self.owner[fd] = (k, is_socket)

    def remove(self, fd: int) -> None:
        """Stop watching `fd`."""
        if self.owner.pop(fd, None) is not None:
            with contextlib.suppress(KeyError, ValueError, OSError):
                self.poll.unregister(fd)

    def wait(self, timeout: float | None) -> list[tuple[int, bool]]:
        """The watched fds that are readable (or closed), within `timeout` seconds."""
        if self.epoll:
            events = self.poll.poll(-1 if timeout is None else timeout)
        else:
            events = self.poll.poll(None if timeout is None else max(0, int(timeout * 1000)))
        owner = self.owner
        return [owner[fd] for fd, _ in events if fd in owner]

    def fileno(self) -> int | None:
        """An fd an event loop can watch for all of them (epoll's), else None."""
        return self.poll.fileno() if self.epoll else None

    def close(self) -> None:
        """Release the poller."""
        if self.epoll:
            self.poll.close()


def _hold_interrupts() -> Any:
    """Defer Ctrl-C (SIGINT) on the main thread until `_release_interrupts`, so it never
    splits a message from the bookkeeping that goes with it; what to hand to the release.

    The handler is swapped rather than the signal masked: a SIGINT already caught by the C
    handler, or caught by another thread, runs the Python handler in effect when the main
    thread gets to it, which is then this one.
    """
    if threading.current_thread() is not _MAIN:
        return None  # signal handlers only run on the main thread
    _deferred.clear()
    try:
        return _signal.signal(signal.SIGINT, _defer)
    except (ValueError, OSError):  # not the main interpreter
        return None


def _release_interrupts(previous: Any) -> None:
    """Put the previous SIGINT handler back, and hand it a Ctrl-C that came meanwhile."""
    if previous is None:
        return
    _signal.signal(signal.SIGINT, previous)
    if _deferred:
        _deferred.clear()
        signal.raise_signal(signal.SIGINT)


def _defer(signum: int, frame: Any) -> None:
    _deferred.append(signum)


_deferred: list[int] = []
_MAIN = threading.main_thread()


def _exited(w: Worker) -> Any:
    """The worker's exit status if it has exited, else None; it stays unreaped."""
    if w.proc is None or w.proc.returncode is not None:
        return w.proc.returncode if w.proc is not None else None
    try:
        return os.waitid(os.P_PID, w.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return None


def _wait_exit(w: Worker, timeout: float) -> Any:
    """Wait up to `timeout` seconds for the worker to exit, leaving it unreaped; its status."""
    deadline = time.monotonic() + max(0.0, timeout)
    while (status := _exited(w)) is None and time.monotonic() < deadline:
        if w.pidfd is not None:
            select.select([w.pidfd], [], [], max(0.0, deadline - time.monotonic()))
        else:
            time.sleep(0.005)
    return status


def _exit_text(status: Any) -> str:
    """How a worker ended, from `waitid` (or a return code), in words."""
    if status is None:
        return "stopped answering"
    if isinstance(status, int):
        code, killed = abs(status), status < 0
    else:
        code, killed = status.si_status, status.si_code != os.CLD_EXITED
    if not killed:
        return f"exited with code {code}"
    try:
        return f"was killed by {signal.Signals(code).name}"
    except ValueError:
        return f"was killed by signal {code}"
