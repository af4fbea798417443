"""Run untrusted Python: a pool of warm sandboxed workers, stateless calls and stateful sessions.

`Sandbox.run(code)` takes an idle worker from the pool (starting one if needed), sends the code,
and returns an `ExecResult`. A worker that breaks a limit, times out past its grace, or dies is
killed and replaced; the next call never sees it. Blocking pipe I/O runs on a private thread
pool, so the API works from any event loop (and `run_sync` from none).
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import math
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections import deque
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from gemkit.errors import GemkitError
from gemkit.sandbox import backends, memcg
from gemkit.sandbox.outcome import decode_reply
from gemkit.sandbox.wire import HEADER, encode_message, encode_request

log = logging.getLogger(__name__)

#: seconds the host waits beyond a call's timeout before it kills the whole sandbox
GRACE = 3.0
STARTUP_TIMEOUT = 30.0
#: the long-lived threads every sandbox process is started from (see `Sandbox._spawn`)
_SPAWNERS = ThreadPoolExecutor(max_workers=8, thread_name_prefix="gemkit-sandbox-spawn")
#: a stateless worker is replaced after this many calls (defence in depth; calls are isolated)
RECYCLE_AFTER = 1000
MAX_REPLY = 64 * 1024 * 1024


class SandboxError(GemkitError):
    """A sandbox used wrongly (bad argument, closed sandbox)."""


@dataclass
class ExecResult:
    """What one piece of code did.

    `limit_hit` names the limit that stopped it: `wall`, `cpu`, `memory`, `file_size`,
    `killed` (died by a signal), `exited` (a session's process exited, say by `os._exit`),
    `crashed` (the sandbox itself died), or None. `finished` is
    True only when the code ran to its last line: no exception, no `sys.exit`, no `os._exit`
    (checkers that run tests after the code need it: an early exit 0 skips the tests).

    Who vouches for each field: the sandbox measures `timed_out`, `duration`, `session_lost`,
    the byte counts, and `limit_hit` when it is `wall`, `cpu` (a signal), `killed`,
    `crashed`, or `memory` from the memory cgroup. The code's own process reports
    `exit_code`, `finished` and `exception` (and a `memory` or `file_size` limit read from an
    exception) on a pipe it holds, so code that wants to can forge them: they describe the
    code, they are never a verdict. A grader must decide from data it checks itself (say, the
    output of tests it runs, parsed by exact type), never from `ok`, `finished` or
    `exit_code` alone; `stdout` and `stderr` are the code's output, as hostile as the code.
    """

    stdout: str
    stderr: str
    exit_code: int
    timed_out: bool = False
    limit_hit: str | None = None
    duration: float = 0.0
    exception: str | None = None
    stdout_bytes: int = 0
    stderr_bytes: int = 0
    session_lost: bool = False
    finished: bool = False

    @property
    def ok(self) -> bool:
        """True when the code ran to the end without an exception or a limit."""
        return self.exit_code == 0 and not self.timed_out and self.limit_hit is None


def truncation_marker(total: int, shown: int) -> str:
    """The line appended to output cut at the limit."""
    return f"\n[... output truncated: {total} bytes total, showing first {shown} ...]"


def _with_marker(text: str, total: int, limit: int) -> str:
    if total > limit:
        return text + truncation_marker(total, limit)
    return text


class _WorkerDied(Exception):
    pass


def _parse_reply(body: bytes) -> dict:
    try:
        return decode_reply(body)
    except (ValueError, TypeError) as e:
        raise _WorkerDied(f"unreadable reply ({e})") from e


def _encode(msg: dict) -> bytes:
    """A request on the wire: its settings, then the call's bytes (`parts`) raw."""
    return encode_message({k: v for k, v in msg.items() if k != "parts"}, msg.get("parts", []))


class _Worker:
    """One sandboxed supervisor process and its protocol pipes (host side)."""

    def __init__(self, spec: backends.LaunchSpec, group: memcg.MemoryGroup | None = None):
        self.spec = spec
        self.calls = 0
        self.group = group
        self._err = tempfile.TemporaryFile()
        env = spec.env or {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        try:
            self.proc = subprocess.Popen(
                spec.argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._err,
                cwd=spec.cwd,
                env=env,
                start_new_session=True,
                bufsize=0,
                pass_fds=spec.pass_fds,
            )
        except BaseException:
            if group is not None:
                group.remove(0)
            raise
        if group is not None:
            group.close_fds()  # the supervisor holds its own copies
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._wfd = self.proc.stdin.fileno()
        self._rfd = self.proc.stdout.fileno()
        try:
            hello = self._read_frame(time.monotonic() + STARTUP_TIMEOUT)
        except _WorkerDied as e:
            self.kill()
            raise backends.SandboxUnavailableError(
                f"the sandbox failed to start: {e}. {self.stderr_tail()}"
            ) from e
        if not hello.get("ready"):
            self.kill()
            raise backends.SandboxUnavailableError(f"the sandbox failed to start: {hello}")
        # non-blocking, so an event loop can serve this worker too (`Sandbox.run`)
        os.set_blocking(self._wfd, False)
        os.set_blocking(self._rfd, False)

    def stderr_tail(self) -> str:
        """The last lines the sandbox wrote on its stderr (for diagnostics)."""
        try:
            self._err.seek(0)
            text = self._err.read()[-2000:].decode("utf-8", "replace").strip()
        except (OSError, ValueError):
            return ""
        return text

    def request(self, msg: dict, timeout: float) -> dict:
        """Send one request and wait for its reply; raise `_WorkerDied` on any failure."""
        deadline = time.monotonic() + timeout
        data = _encode(msg)
        view = memoryview(data)
        try:
            while view:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise _WorkerDied("timed out sending the request")
                _, w, _ = select.select([], [self._wfd], [], left)
                if w:
                    try:
                        n = os.write(self._wfd, view[: 1 << 20])
                    except BlockingIOError:
                        continue
                    view = view[n:]
        except OSError as e:
            raise _WorkerDied(f"the sandbox closed its input ({e})") from e
        self.calls += 1
        return self._read_frame(deadline)

    def _read_exact(self, n: int, deadline: float) -> bytes:
        chunks = []
        while n > 0:
            left = deadline - time.monotonic()
            if left <= 0:
                raise _WorkerDied("timed out")
            r, _, _ = select.select([self._rfd], [], [], left)
            if not r:
                continue
            try:
                chunk = os.read(self._rfd, min(n, 1 << 20))
            except BlockingIOError:
                continue
            except OSError as e:
                raise _WorkerDied(str(e)) from e
            if not chunk:
                raise _WorkerDied("the sandbox exited")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def _read_frame(self, deadline: float) -> dict:
        (n,) = HEADER.unpack(self._read_exact(HEADER.size, deadline))
        if n > MAX_REPLY:
            raise _WorkerDied(f"reply of {n} bytes is too large")
        return _parse_reply(self._read_exact(n, deadline))

    async def arequest(self, msg: dict, timeout: float) -> dict:
        """`request` on the running event loop: no thread, the loop watches the pipes."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[bytes] = loop.create_future()
        pending = memoryview(_encode(msg))
        reply = bytearray()
        wfd, rfd = self._wfd, self._rfd

        def fail(reason: str) -> None:
            if not done.done():
                done.set_exception(_WorkerDied(reason))

        def write() -> None:
            nonlocal pending
            try:
                n = os.write(wfd, pending[: 1 << 20])
            except BlockingIOError:
                return
            except OSError as e:
                fail(f"the sandbox closed its input ({e})")
                return
            pending = pending[n:]
            if not pending:
                loop.remove_writer(wfd)

        def read() -> None:
            try:
                chunk = os.read(rfd, 1 << 20)
            except BlockingIOError:
                return
            except OSError as e:
                fail(str(e))
                return
            if not chunk:
                fail("the sandbox exited")
                return
            reply.extend(chunk)
            if len(reply) >= HEADER.size:
                (n,) = HEADER.unpack_from(reply)
                if n > MAX_REPLY:
                    fail(f"reply of {n} bytes is too large")
                elif len(reply) >= HEADER.size + n and not done.done():
                    done.set_result(bytes(reply[HEADER.size : HEADER.size + n]))

        loop.add_reader(rfd, read)  # first: a loop without pipe support refuses before a byte goes
        self.calls += 1
        write()
        watching_write = bool(pending)
        if watching_write:  # a request larger than the pipe holds
            loop.add_writer(wfd, write)
        timer = loop.call_later(timeout, fail, "timed out")
        try:
            return _parse_reply(await done)
        finally:
            timer.cancel()
            if watching_write:
                loop.remove_writer(wfd)
            loop.remove_reader(rfd)

    def kill(self) -> None:
        """Kill the sandbox and everything in it."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                pass
            try:
                self.proc.kill()
            except OSError:
                pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            log.warning("sandbox process %d did not exit after SIGKILL", self.proc.pid)
        for f in (self.proc.stdin, self.proc.stdout, self._err):
            try:
                f.close()  # type: ignore[union-attr]
            except (OSError, AttributeError):
                pass
        for path in self.spec.cleanup:
            shutil.rmtree(path, ignore_errors=True)
        if self.group is not None:
            self.group.remove()


class Sandbox:
    """Runs untrusted Python in isolated, resource-limited, warm worker processes.

    Limits (per call): `timeout` seconds of wall time (CPU time is capped at the same),
    `memory_mb` of address space, `max_output` bytes kept of each of stdout and stderr,
    `file_size_mb` per written file, `max_processes` processes, `max_open_files` descriptors,
    and `disk_mb` of scratch space. `backend` is `auto` (bubblewrap, else unshare),
    `bwrap`, `unshare`, or `unsafe-local` (no isolation: only for code you trust).

    `memory_mb` counts everything a call holds, in all its processes (memfd and tmpfs files,
    shared memory and pipes included) where each sandbox gets a memory cgroup (`memory_scope`
    is then "call"); without one it caps each process's address space ("process", and the
    reason is logged once). `hidden_paths` names host paths the code must not see even where
    they lie inside a shared folder (datasets with expected answers); gemkit's own installed
    packages are always hidden.
    """

    def __init__(
        self,
        *,
        backend: str = "auto",
        timeout: float = 10.0,
        memory_mb: int = 512,
        max_output: int = 10_000,
        file_size_mb: int = 16,
        max_processes: int = 32,
        max_open_files: int = 256,
        disk_mb: int = 64,
        workers: int = 8,
        python: str | None = None,
        ro_paths: tuple[str, ...] = (),
        hidden_paths: tuple[str, ...] = (),
    ):
        if timeout <= 0 or memory_mb <= 0 or max_output < 0 or workers < 1:
            raise SandboxError(
                "timeout and memory_mb must be > 0, max_output >= 0 and workers >= 1; got "
                f"timeout={timeout}, memory_mb={memory_mb}, max_output={max_output}, "
                f"workers={workers}"
            )
        self.python = python or sys.executable
        self.backend = backends.choose_backend(backend, self.python)
        if self.backend == "unsafe-local":
            log.warning("sandbox backend 'unsafe-local': code runs unisolated on this host")
        self.timeout = float(timeout)
        self.memory_mb = int(memory_mb)
        self.max_output = int(max_output)
        self.file_size_mb = int(file_size_mb)
        self.max_processes = int(max_processes)
        self.max_open_files = int(max_open_files)
        self.disk_mb = int(disk_mb)
        self.ro_paths = list(ro_paths)
        relative = [p for p in hidden_paths if not os.path.isabs(p)]
        if relative:
            raise SandboxError(
                f"hidden_paths must be absolute host paths, e.g. '/data/answers'; got {relative}"
            )
        self.hidden_paths = tuple(hidden_paths)
        if self.backend != "unsafe-local":
            shared = backends.shared_paths(self.python, self.ro_paths)  # refuses paths it hides
            backends.masked_paths(self.python, shared, self.hidden_paths)
        #: "call": memory_mb holds for all of a call's processes and files; "process": per process
        self.memory_scope = "process" if self.backend == "unsafe-local" else _memory_scope()
        self.max_workers = int(workers)
        self._idle: list[_Worker] = []
        # async callers waiting for a busy pool, first come first served: (their loop, future)
        self._waiters: deque[tuple[asyncio.AbstractEventLoop, asyncio.Future]] = deque()
        self._count = 0
        self._cond = threading.Condition()
        self._closed = False
        self._starting = False
        self._executor = ThreadPoolExecutor(
            max_workers=self.max_workers + 2, thread_name_prefix="gemkit-sandbox"
        )
        _LIVE.add(self)

    # -- workers -------------------------------------------------------------------------------

    def _spawn(self) -> _Worker:
        # bubblewrap's --die-with-parent fires when the *thread* that started it exits, so
        # sandboxes are started only from threads that live as long as the process
        return _SPAWNERS.submit(self._spawn_here).result()

    def _spawn_here(self) -> _Worker:
        config: dict[str, Any] = {}
        if self.backend == "unsafe-local":
            workdir = tempfile.mkdtemp(prefix="gemkit-sandbox-")
            spec = backends.unsafe_local_command(self.python, config, workdir=workdir)
            return _Worker(spec)
        group = None
        if self.memory_scope == "call":
            try:
                group = memcg.MemoryGroup.create(self.memory_mb * 1024 * 1024)
            except OSError as e:
                raise backends.SandboxUnavailableError(
                    f"could not make the sandbox's memory cgroup: {e.strerror or e}"
                ) from e
            config["memcg"] = {"procs": group.procs_fd, "events": group.events_fd}
        command = backends.bwrap_command if self.backend == "bwrap" else backends.unshare_command
        try:
            spec = command(
                self.python,
                config,
                disk_mb=self.disk_mb,
                ro_paths=self.ro_paths,
                hidden=self.hidden_paths,
            )
        except BaseException:
            if group is not None:
                group.remove(0)
            raise
        return _Worker(spec, group)

    def _take_idle(self) -> _Worker | None:
        """A live idle worker, least recently used first, or None (with the lock held).

        Least recently used: it has long finished forking its next child. A worker that died
        while idle (say, the OOM killer) is dropped on the way.
        """
        while self._idle:
            worker = self._idle.pop(0)
            if worker.proc.poll() is None:
                return worker
            self._count -= 1
            self._cond.notify()
            threading.Thread(target=worker.kill, daemon=True).start()
        return None

    def _acquire(self) -> _Worker:
        """A live worker: an idle one, else a new one while the pool may grow, else the next
        one released (waiting in this thread)."""
        with self._cond:
            while True:
                self._check_open()
                worker = self._take_idle()
                if worker is not None:
                    break
                if self._count < self.max_workers:
                    self._count += 1
                    break
                self._cond.wait()
            spare = self._reserve_spare()
        self._start_spare_if(spare)
        if worker is not None:
            return worker
        try:
            return self._spawn()
        except BaseException:
            with self._cond:
                self._count -= 1
                self._cond.notify()
            raise

    def _reserve_spare(self) -> bool:
        # keep one warm worker idle while the pool may grow: a call then never waits for a
        # start, and back-to-back calls alternate between workers
        if self._idle or self._count >= self.max_workers or self._starting:
            return False
        self._count += 1
        self._starting = True
        return True

    def _check_open(self) -> None:
        if self._closed:
            raise SandboxError("this sandbox is closed; create a new Sandbox")

    def _start_spare_if(self, reserved: bool) -> None:
        if reserved:
            threading.Thread(target=self._start_spare, daemon=True).start()

    def _start_spare(self) -> None:
        try:
            worker = self._spawn()
        except Exception as e:
            log.debug("could not start a spare sandbox: %s", e)
            with self._cond:
                self._count -= 1
                self._starting = False
                self._cond.notify()
            return
        with self._cond:
            self._starting = False
        self._release(worker, True)

    def _release(self, worker: _Worker, healthy: bool) -> None:
        with self._cond:
            if healthy and not self._closed and worker.calls < RECYCLE_AFTER:
                if not self._hand_over(worker):
                    self._idle.append(worker)
                    self._cond.notify()
                return
            self._count -= 1
            self._cond.notify()
            self._hand_over(None)  # the pool may grow again: a waiter can start a worker
        worker.kill()

    def _hand_over(self, worker: _Worker | None) -> bool:
        """Give `worker` (None: room to start one) to the first async waiter; False if none.

        Called with the lock held, from any thread: the waiter's own loop delivers it.
        """
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        while self._waiters:
            loop, future = self._waiters.popleft()
            if future.done():
                continue
            try:
                if loop is running:  # no need to wake the loop through its self-pipe
                    loop.call_soon(self._deliver, future, worker)
                else:
                    loop.call_soon_threadsafe(self._deliver, future, worker)
            except RuntimeError:  # that loop is closed
                continue
            return True
        return False

    def _deliver(self, future: asyncio.Future, worker: _Worker | None) -> None:
        if not future.done():
            future.set_result(worker)
        elif worker is not None:  # the waiter was cancelled meanwhile: the next one gets it
            self._release(worker, True)
        else:
            with self._cond:
                self._hand_over(None)

    async def _await_worker(self) -> _Worker | None:
        """An idle worker, waiting on the event loop while the pool is full and busy.

        None when the pool may start another worker (the caller then starts one in a thread).
        """
        loop = asyncio.get_running_loop()
        while True:
            with self._cond:
                self._check_open()
                worker = self._take_idle()
                if worker is not None or self._count < self.max_workers:
                    # as `_acquire` does: taking the last idle one starts a spare
                    spare = worker is not None and self._reserve_spare()
                    break
                future: asyncio.Future[_Worker | None] = loop.create_future()
                self._waiters.append((loop, future))
            worker = await future
            if worker is not None:
                return worker
        self._start_spare_if(spare)
        return worker

    def warm(self, n: int | None = None) -> None:
        """Start `n` workers now (default: the pool size) so the first calls skip startup."""
        n = self.max_workers if n is None else min(n, self.max_workers)
        started = [self._acquire() for _ in range(n)]
        for w in started:
            self._release(w, True)

    # -- running code --------------------------------------------------------------------------

    def _limits(self, memory_mb: int | None = None) -> dict[str, Any]:
        return {
            "memory_bytes": (memory_mb or self.memory_mb) * 1024 * 1024,
            "file_bytes": self.file_size_mb * 1024 * 1024,
            "nofile": self.max_open_files,
            # unisolated, the kernel counts every process of this user (or exempts root): a
            # per-sandbox process limit cannot be expressed there
            "nproc": None if self.backend == "unsafe-local" else self.max_processes,
            "max_output": self.max_output,
        }

    def _request(
        self,
        code: str,
        *,
        stdin: str | None,
        timeout: float | None,
        files: Mapping[str, str | bytes] | None,
        stateful: bool,
    ) -> dict[str, Any]:
        if not isinstance(code, str):
            raise SandboxError(f"code must be a str, got {type(code).__name__}")
        t = self.timeout if timeout is None else float(timeout)
        if t <= 0:
            raise SandboxError(f"timeout must be > 0 seconds, got {timeout}")
        limits = self._limits()
        encoded = _encode_files(files)
        # the child's own request, made here: the supervisor passes it on unread, as the
        # stdin of a stateless call (a session's comes inside its request)
        if stateful:
            parts = [encode_request(code, t, limits, encoded, stdin)]
        else:
            raw_stdin = b"" if stdin is None else stdin.encode("utf-8", "surrogatepass")
            parts = [encode_request(code, t, limits, encoded), raw_stdin]
        return {"op": "exec", "timeout": t, "limits": limits, "stateful": stateful, "parts": parts}

    def _exec_on(self, worker: _Worker, req: dict[str, Any]) -> tuple[ExecResult, bool]:
        """Run a request on a worker; return the result and whether the worker is reusable."""
        start = time.monotonic()
        try:
            reply = worker.request(req, req["timeout"] + GRACE)
        except _WorkerDied as e:
            return self._lost(worker, req, e, time.monotonic() - start), False
        return self._to_result(reply, req["timeout"]), bool(reply.get("clean", True))

    async def _aexec_on(self, worker: _Worker, req: dict[str, Any]) -> tuple[ExecResult, bool]:
        """`_exec_on` on the running event loop."""
        start = time.monotonic()
        try:
            reply = await worker.arequest(req, req["timeout"] + GRACE)
        except _WorkerDied as e:
            return self._lost(worker, req, e, time.monotonic() - start), False
        return self._to_result(reply, req["timeout"]), bool(reply.get("clean", True))

    def _lost(
        self, worker: _Worker, req: dict[str, Any], e: Exception, duration: float
    ) -> ExecResult:
        """The result of a call whose sandbox stopped answering (it is then replaced)."""
        timed_out = duration >= req["timeout"]
        log.debug(
            "sandbox worker lost: %s (exit status %s) %s",
            e,
            worker.proc.poll(),
            worker.stderr_tail(),
        )
        if timed_out:
            message = f"TimeoutError: code ran longer than {_fmt_s(req['timeout'])} s"
        else:
            message = (
                "SandboxError: the sandbox process died while running the code (it was "
                "killed or crashed); it has been replaced"
            )
        return ExecResult(
            stdout="",
            stderr=message,
            exit_code=-9,
            timed_out=timed_out,
            limit_hit="wall" if timed_out else "crashed",
            duration=duration,
            exception=message,
            session_lost=bool(req.get("stateful")),
        )

    def _to_result(self, reply: dict[str, Any], timeout: float) -> ExecResult:
        limit = self.max_output
        stdout = _with_marker(
            str(reply.get("stdout", "")), int(reply.get("stdout_bytes", 0)), limit
        )
        stderr = _with_marker(
            str(reply.get("stderr", "")), int(reply.get("stderr_bytes", 0)), limit
        )
        exc = reply.get("exception") or {}
        limit_hit = reply.get("limit_hit")
        exception = exc.get("last_line") or None
        if reply.get("error"):
            exception = f"SandboxError: the sandbox could not run the code: {reply['error']}"
            stderr = exception
        if limit_hit in ("wall", "cpu"):
            exception = f"TimeoutError: code ran longer than {_fmt_s(timeout)} s"
        elif limit_hit == "memory":
            exception = f"MemoryError: code used more than the {self.memory_mb} MB memory limit"
        elif limit_hit == "file_size":
            exception = f"OSError: a file grew past the {self.file_size_mb} MB file-size limit"
        elif limit_hit == "killed" and not exception:
            exception = (
                f"SandboxError: the code was killed by signal {-int(reply.get('exit_code', -9))}"
            )
        elif limit_hit == "exited" and not exception:
            exception = (
                "SystemExit: the Python process exited during the call "
                f"(status {reply.get('exit_code')})"
            )
        return ExecResult(
            stdout=stdout,
            stderr=stderr,
            exit_code=int(reply.get("exit_code", 0)),
            timed_out=bool(reply.get("timed_out")),
            limit_hit=limit_hit,
            duration=float(reply.get("duration", 0.0)),
            exception=exception,
            stdout_bytes=int(reply.get("stdout_bytes", 0)),
            stderr_bytes=int(reply.get("stderr_bytes", 0)),
            session_lost=bool(reply.get("session_lost")),
            finished=bool(reply.get("finished")) and limit_hit is None,
        )

    def run_sync(
        self,
        code: str,
        *,
        stdin: str | None = None,
        timeout: float | None = None,
        files: Mapping[str, str | bytes] | None = None,
    ) -> ExecResult:
        """Run code in a fresh namespace on a pooled worker (blocking)."""
        req = self._request(code, stdin=stdin, timeout=timeout, files=files, stateful=False)
        return self._run_request(req)

    def _run_request(self, req: dict[str, Any]) -> ExecResult:
        worker = self._acquire()
        healthy = False
        try:
            result, healthy = self._exec_on(worker, req)
        finally:
            self._release(worker, healthy)
        return result

    async def run(
        self,
        code: str,
        *,
        stdin: str | None = None,
        timeout: float | None = None,
        files: Mapping[str, str | bytes] | None = None,
    ) -> ExecResult:
        """Run code in a fresh namespace on a pooled worker; `stdin` feeds its standard input.

        The event loop itself talks to an idle worker (no thread); while the pool is full and
        busy it waits for the next one freed, and a thread starts a worker while it may grow.
        """
        loop = asyncio.get_running_loop()
        req = self._request(code, stdin=stdin, timeout=timeout, files=files, stateful=False)
        worker = await self._await_worker()
        if worker is None:  # the pool may grow (or was closed): a thread starts a worker
            return await loop.run_in_executor(self._executor, self._run_request, req)
        healthy = False
        try:
            try:
                result, healthy = await self._aexec_on(worker, req)
            except NotImplementedError:  # an event loop that cannot watch pipes
                result, healthy = await loop.run_in_executor(
                    self._executor, self._exec_on, worker, req
                )
        finally:
            if healthy:
                self._release(worker, True)
            else:  # killing waits for the process: not on the event loop
                try:
                    loop.run_in_executor(self._executor, self._release, worker, False)
                except RuntimeError:  # the sandbox was closed meanwhile
                    self._release(worker, False)
        return result

    def session(self) -> Session:
        """A stateful session: variables survive between its calls until `reset()`."""
        return Session(self)

    def close(self) -> None:
        """Kill every worker; later calls raise `SandboxError`."""
        with self._cond:
            self._closed = True
            idle, self._idle = self._idle, []
            self._count -= len(idle)
            self._cond.notify_all()
            while self._hand_over(None):  # waiters wake up to the closed sandbox
                pass
        for w in idle:
            w.kill()
        self._executor.shutdown(wait=False)

    async def aclose(self) -> None:
        """Async twin of `close`."""
        self.close()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Sandbox backend={self.backend!r} workers={self._count}/{self.max_workers}>"


class Session:
    """One stateful interpreter session in its own sandbox; `reset()` drops every variable."""

    def __init__(self, sandbox: Sandbox):
        self.sandbox = sandbox
        self._worker: _Worker | None = None
        self._lock = threading.Lock()
        self._closed = False

    def run_sync(
        self,
        code: str,
        *,
        stdin: str | None = None,
        timeout: float | None = None,
        files: Mapping[str, str | bytes] | None = None,
    ) -> ExecResult:
        """Run code in this session's namespace (blocking)."""
        req = self.sandbox._request(code, stdin=stdin, timeout=timeout, files=files, stateful=True)
        with self._lock:
            if self._closed:
                raise SandboxError("this session is closed; open a new one with Sandbox.session()")
            if self._worker is not None and self._worker.proc.poll() is not None:
                self._worker.kill()  # died between calls: its variables are gone
                self._worker = None
                lost = True
            else:
                lost = False
            if self._worker is None:
                self._worker = self.sandbox._spawn()
            result, healthy = self.sandbox._exec_on(self._worker, req)
            if not healthy:
                self._worker.kill()
                self._worker = None
            if lost:
                result.session_lost = True
            return result

    async def run(
        self,
        code: str,
        *,
        stdin: str | None = None,
        timeout: float | None = None,
        files: Mapping[str, str | bytes] | None = None,
    ) -> ExecResult:
        """Run code in this session's namespace."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self.sandbox._executor,
            lambda: self.run_sync(code, stdin=stdin, timeout=timeout, files=files),
        )

    def reset_sync(self) -> None:
        """Drop the session's variables, files and processes (the sandbox stays warm)."""
        with self._lock:
            if self._worker is None:
                return
            try:
                reply = self._worker.request({"op": "reset"}, 10.0)
                clean = bool(reply.get("clean"))
            except _WorkerDied:
                clean = False
            if not clean:
                self._worker.kill()
                self._worker = None

    async def reset(self) -> None:
        """Async twin of `reset_sync`."""
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self.sandbox._executor, self.reset_sync)

    def close(self) -> None:
        """Kill this session's sandbox."""
        with self._lock:
            self._closed = True
            if self._worker is not None:
                self._worker.kill()
                self._worker = None

    def __del__(self) -> None:
        worker = getattr(self, "_worker", None)
        if worker is not None:
            worker.kill()


_SHARED: dict[tuple[Any, ...], Sandbox] = {}
_SHARED_LOCK = threading.Lock()


def shared_sandbox(**options: Any) -> Sandbox:
    """A process-wide `Sandbox` for these options: one warm pool serves every caller.

    Envs and stateless tools use it, so a vector of 64 envs does not start 64 pools. Closing it
    is allowed (the next call builds a new one).
    """
    key = tuple(sorted(options.items()))
    with _SHARED_LOCK:
        sb = _SHARED.get(key)
        if sb is None or sb._closed:
            sb = _SHARED[key] = Sandbox(**options)
        return sb


def _encode_files(files: Mapping[str, str | bytes] | None) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for name, content in (files or {}).items():
        parts = name.replace("\\", "/").split("/")
        if not name or name.startswith("/") or ".." in parts or "" in parts:
            raise SandboxError(
                f"file name {name!r} must be a relative path inside the sandbox without '..', "
                "e.g. 'data/input.txt'"
            )
        out[name] = content.encode("utf-8") if isinstance(content, str) else bytes(content)
    return out


def _fmt_s(seconds: float) -> str:
    return str(int(seconds)) if math.isclose(seconds, round(seconds)) else f"{seconds:g}"


_LIVE: weakref.WeakSet[Sandbox] = weakref.WeakSet()


def _memory_scope() -> str:
    """ "call" where sandboxes get a memory cgroup each, else "process" (said once, in the log)."""
    reason = memcg.why_unavailable()
    if reason is None:
        return "call"
    if not _SAID_SCOPE:
        _SAID_SCOPE.append(True)
        log.warning(
            "sandbox memory_mb limits each process only (no memory cgroup: %s); a call's "
            "processes, memfd and tmpfs files together can hold more",
            reason,
        )
    return "process"


_SAID_SCOPE: list[bool] = []


@atexit.register
def _close_all() -> None:
    for sb in list(_LIVE):
        try:
            sb.close()
        except Exception:  # interpreter shutdown: best effort
            pass
