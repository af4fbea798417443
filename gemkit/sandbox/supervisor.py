"""The supervisor inside a sandbox: forks children, pumps their output, answers the host."""

from __future__ import annotations

import gc
import mmap
import os
import select
import signal
import time

from gemkit.sandbox.child import (
    _child_plan,
    _run_session_child,
    _run_stateless_child,
    _stateless_stdio,
    _warm_child_path,
)
from gemkit.sandbox.wire import (
    HEADER,
    MAX_REQUEST,
    MAX_RESULT,
    _read_frame,
    _read_into,
    _write_all,
    _write_views,
    encode_reply,
)


class _Region:
    """Memory for call data (a request, output, a report) that no forked child inherits.

    The supervisor forks every child, and a child can read all of its own memory: whatever the
    supervisor's heap held of an earlier call, freed or not, would be readable by the next
    call's code. So the bytes of a call only ever pass through these mappings, which `fork`
    leaves out of the child (MADV_DONTFORK), and never through a Python object.
    """

    def __init__(self, size: int):
        self.base = max(size, mmap.PAGESIZE)
        self.map: mmap.mmap | None = None
        self.view = memoryview(b"")
        self._new(self.base)

    def _new(self, size: int) -> None:
        self.view.release()
        if self.map is not None:
            self.map.close()
        # private: a shared anonymous mapping would be shmem, and shared with any child that
        # did inherit it
        self.map = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE)
        dontfork = getattr(mmap, "MADV_DONTFORK", None)
        if dontfork is not None:  # Linux; elsewhere only unsafe-local runs
            self.map.madvise(dontfork)
        self.view = memoryview(self.map)

    def get(self, size: int) -> memoryview:
        """The first `size` bytes; grown to fit, and shrunk back after an outsized call."""
        if size > len(self.view) or (len(self.view) > self.base >= size):
            self._new(max(size, self.base))
        return self.view[:size]


class _Capture:
    """Reads one stream into a region: the first `limit` bytes are kept, the rest counted."""

    def __init__(self, fd: int, limit: int, region: _Region, scratch: memoryview):
        self.fd = fd
        self.view = region.get(limit)
        self.scratch = scratch
        self.kept = 0
        self.total = 0
        self.open = True

    def read(self) -> None:
        room = len(self.view) - self.kept
        try:
            n = os.readv(self.fd, [self.view[self.kept :] if room > 0 else self.scratch])
        except BlockingIOError:
            return
        except OSError:
            n = 0
        if not n:
            self.open = False
            return
        self.total += n
        if room > 0:
            self.kept += n

    def part(self) -> memoryview:
        return self.view[: self.kept]


class _Report:
    """The child's framed report, read into a region."""

    def __init__(self, region: _Region):
        self.view = region.get(HEADER.size + MAX_RESULT)
        self.got = 0
        self.open = True

    def read(self, fd: int) -> None:
        try:
            n = os.readv(fd, [self.view[self.got :]]) if self.got < len(self.view) else 0
        except OSError:
            n = 0
        if not n:
            self.open = False
            return
        self.got += n

    def body(self) -> memoryview | bool | None:
        """The report once it is whole; False when what came is no report of ours."""
        if self.got < HEADER.size:
            return None
        (n,) = HEADER.unpack_from(self.view)
        if n > MAX_RESULT:  # not our child's report: the code wrote to the pipe
            return False
        return self.view[HEADER.size : HEADER.size + n] if self.got >= HEADER.size + n else None


def _kill_all_others(pidns: bool, pgid: int | None) -> None:
    """Kill every process of the sandbox but this one (and the namespace's init).

    Without a pid namespace (unsafe-local) `kill(-1)` would reach the user's other processes,
    so only the child's process group is killed there.
    """
    try:
        if pidns:
            os.kill(-1, signal.SIGKILL)
        elif pgid:
            os.killpg(pgid, signal.SIGKILL)
    except OSError:
        pass


def _reap() -> list[tuple[int, int]]:
    done: list[tuple[int, int]] = []
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return done
        if pid == 0:
            return done
        done.append((pid, status))


def _force_remove(func, p, _exc):  # noqa: ANN001, ANN202
    """`shutil.rmtree`'s error hook: make the parent and the entry writable, then retry."""
    # the code may have made a directory unwritable; never chmod through a symlink
    try:
        for q in (os.path.dirname(p), p):
            if not os.path.islink(q):
                os.chmod(q, 0o700)
        func(p)
    except OSError:
        pass


def _wipe(path: str, keep: tuple[str, ...] = ()) -> bool:
    """Empty a directory the user could write to; False if something could not be removed.

    Paths in `keep` stay, and the folders that lead to them are emptied around them: they are
    read-only binds from the host (a virtualenv under /tmp), which no wipe can remove.
    """
    try:
        entries = os.listdir(path)
    except OSError:
        return False
    ok = True
    for name in entries:
        p = os.path.join(path, name)
        if p in keep:
            continue
        if any(k.startswith(p + "/") for k in keep) and os.path.isdir(p) and not os.path.islink(p):
            ok = _wipe(p, keep) and ok
            continue
        try:
            if os.path.isdir(p) and not os.path.islink(p):
                # imported only when needed: shutil loads zlib, bz2 and lzma, whose pages every
                # later fork would copy
                import shutil

                shutil.rmtree(p, onerror=_force_remove)
            else:
                os.unlink(p)
        except OSError:
            ok = False
        if os.path.lexists(p):
            ok = False
    return ok


def _collect(
    captures: list[_Capture],
    report: _Report,
    result_fd: int,
    deadline: float,
    stdin: list | None = None,
    child: int | None = None,
) -> tuple[memoryview | None, bool, int | None]:
    """Pump output until the child's framed report arrives, the child dies, or time runs out.

    Returns (report body or None, timed out, the child's wait status if it was reaped here).
    """
    # stdin is [fd, data]; fd becomes -1 once written out and closed
    stdin = stdin if stdin is not None else [-1, b""]
    stdin_view = memoryview(stdin[1])
    if stdin[0] >= 0 and not stdin_view:
        os.close(stdin[0])
        stdin[0] = -1
    status: int | None = None
    while True:
        body = report.body()
        if body is not None:
            # False: what came is no report of ours
            return (None if isinstance(body, bool) else body or None), False, status
        if not report.open or status is not None:
            return None, False, status
        left = deadline - time.monotonic()
        if left <= 0:
            return None, True, status
        readers = [c.fd for c in captures if c.open] + [result_fd]
        writers = [stdin[0]] if stdin[0] >= 0 else []
        try:
            r, w, _ = select.select(readers, writers, [], min(left, 0.02 if child else 0.5))
        except InterruptedError:
            continue
        if w:
            try:
                n = os.write(stdin[0], stdin_view[: 1 << 16])
                stdin_view = stdin_view[n:]
            except OSError:
                stdin_view = stdin_view[:0]
            if not stdin_view:
                os.close(stdin[0])
                stdin[0] = -1
        for c in captures:
            if c.fd in r:
                c.read()
        if result_fd in r:
            report.read(result_fd)
        if child is not None and not r:
            # the child may be gone while its descendants still hold the pipes open
            try:
                pid, st = os.waitpid(child, os.WNOHANG)
            except ChildProcessError:
                pid, st = child, 0
            if pid == child:
                status = st
                while report.open and select.select([result_fd], [], [], 0)[0]:
                    report.read(result_fd)


def _drain(captures: list[_Capture], wait: float) -> None:
    """Read what the pipes hold; with `wait` > 0, keep reading until EOF or the time is up."""
    deadline = time.monotonic() + wait
    while any(c.open for c in captures):
        left = max(0.0, deadline - time.monotonic())
        r, _, _ = select.select([c.fd for c in captures if c.open], [], [], min(left, 0.05))
        if not r:
            if left <= 0:
                return
            continue
        for c in captures:
            if c.fd in r:
                c.read()


def _output_header(captures: list[_Capture]) -> dict:
    out, err = captures
    return {"stdout_bytes": out.total, "stderr_bytes": err.total}


def _oom_count(fd: int) -> int:
    """The memory cgroup's count of processes its limit killed (`oom_kill` in its events)."""
    try:
        text = os.pread(fd, 4096, 0)
    except OSError:
        return 0
    at = text.find(b"oom_kill ")
    return int(text[at + 9 :].split(None, 1)[0]) if at >= 0 else 0


class Supervisor:
    """Serves exec/reset requests on the protocol pipes, one at a time."""

    def __init__(self, config: dict, rfd: int, wfd: int):
        self.config = config
        self.rfd = rfd
        self.wfd = wfd
        self.session: dict | None = None
        self.pidns = bool(config.get("pidns"))
        self.next: dict | None = None  # the pre-forked stateless child
        self.pending: list[int] = []
        self.stateless_used = False
        self.stdio = _stateless_stdio()
        # every byte of a call passes through these (see _Region), none through Python objects
        self.inbox = _Region(1 << 16)
        self.outputs = (_Region(1 << 16), _Region(1 << 16))
        self.scratch = _Region(1 << 16).view
        self.report = _Region(HEADER.size + MAX_RESULT)
        self.parts: list[memoryview] = []
        memcg = config.get("memcg")
        self.oom_fd: int | None = memcg["events"] if memcg else None
        self.ooms = _oom_count(self.oom_fd) if self.oom_fd is not None else 0
        _warm_child_path()

    def serve(self) -> None:
        """Answer the host's requests until it closes the pipe."""
        # children share the supervisor's pages copy-on-write; a frozen heap is never touched
        # by their garbage collector, so forking stays cheap
        gc.freeze()
        self._send({"ready": True, "pid": os.getpid()})
        while True:
            req = _read_frame(self.rfd)
            if not isinstance(req, dict) or not self._read_payload(req):
                self._end_session()
                return
            tail: list[memoryview] = []
            try:
                reply, tail = self.handle(req)
            except Exception as e:  # report, and let the host replace this sandbox
                reply = {
                    "error": f"{type(e).__name__}: {e}",
                    "clean": False,
                    "exit_code": 1,
                    "session_lost": bool(req.get("stateful")),
                }
            self._send(reply, tail)
            self.parts = []
            self.after_reply()

    def _read_payload(self, req: dict) -> bool:
        """Read the call's bytes that follow the request into the inbox; False on a bad frame."""
        sizes = req.get("payload") or []
        total = sum(sizes)
        if total > MAX_REQUEST:
            return False
        view = self.inbox.get(total)
        if not _read_into(self.rfd, view):
            return False
        self.parts, at = [], 0
        for n in sizes:
            self.parts.append(view[at : at + n])
            at += n
        return True

    def _send(self, reply: dict, tail: list[memoryview] | None = None) -> None:
        """Write a reply: its JSON header, then the call's output and report straight from
        their regions."""
        tail = tail or []
        if tail:
            reply["tail"] = [len(v) for v in tail]
        head = encode_reply(reply, sum(len(v) for v in tail))
        _write_views(self.wfd, [head, *tail])

    def _captures(self, out: int, err: int, limit: int) -> list[_Capture]:
        return [
            _Capture(fd, limit, r, self.scratch)
            for fd, r in zip((out, err), self.outputs, strict=True)
        ]

    def _oom_killed(self) -> bool:
        """Whether the memory cgroup killed a process since the last look (one read)."""
        if self.oom_fd is None:
            return False
        count = _oom_count(self.oom_fd)
        killed, self.ooms = count > self.ooms, count
        return killed

    def _wait_until_alone(self, limit: float = 2.0) -> None:
        """Wait (briefly) until every killed process is gone, so the next call starts clean.

        `kill(-1, 0)` probes every process but this one and the namespace's init in one
        system call; it fails with ESRCH once none is left (zombies count until reaped).
        """
        deadline = time.monotonic() + limit
        while True:
            _reap()  # as the namespace's init (unshare) the killed processes are ours to reap
            try:
                os.kill(-1, 0)
            except ProcessLookupError:
                return
            except PermissionError:
                return self._wait_until_alone_proc(deadline)
            if time.monotonic() >= deadline:
                return
            time.sleep(0.001)

    def _wait_until_alone_proc(self, deadline: float) -> None:
        """The same wait by listing /proc (when this process may not signal the others)."""
        me = os.getpid()
        while time.monotonic() < deadline:
            _reap()
            try:
                others = [p for p in os.listdir("/proc") if p.isdigit() and int(p) not in (1, me)]
            except OSError:
                return
            if not others:
                return
            time.sleep(0.001)

    def handle(self, req: dict) -> tuple[dict, list[memoryview]]:
        """Serve one request: the reply's header and the raw parts that follow it."""
        op = req.get("op")
        if op == "exec":
            if req.get("stateful"):
                return self.exec_stateful(req)
            self.stateless_used = True
            return self.exec_stateless(req)
        if op == "reset":
            self._end_session()
            return {"clean": _wipe(self.config["workdir"]) and self._wipe_tmp()}, []
        if op == "ping":
            return {"pong": True}, []
        return {"error": f"unknown op {op!r}"}, []

    def _wipe_tmp(self) -> bool:
        keep = tuple(self.config.get("keep", ()))
        return all(_wipe(p, keep) for p in self.config.get("scratch", ()) if os.path.isdir(p))

    def prefork(self) -> None:
        """Fork the next stateless child now, so a request finds it set up and waiting."""
        if self.next is not None:
            return
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        res_r, res_w = os.pipe()
        in_r, in_w = os.pipe()
        req_r, req_w = os.pipe()
        fds = {"stdin": in_r, "stdout": out_w, "stderr": err_w, "result": res_w, "request": req_r}
        plan = _child_plan(self.config, fds)
        # what the supervisor made since the last fork joins the frozen heap: the child starts
        # with an empty young generation, so its collector never walks (and copies) our pages
        gc.freeze()
        pid = os.fork()
        if pid == 0:
            _run_stateless_child(plan, fds, self.stdio)
        for fd in (out_w, err_w, res_w, in_r, req_r):
            os.close(fd)
        self.next = {"pid": pid, "out": out_r, "err": err_r, "res": res_r, "in": in_w, "req": req_w}

    def exec_stateless(self, req: dict) -> tuple[dict, list[memoryview]]:
        limit = int(req["limits"].get("max_output", 10_000))
        request, stdin = self.parts
        self.prefork()
        child, self.next = self.next, None
        assert child is not None
        pid = child["pid"]
        start = time.monotonic()
        try:
            _write_all(child["req"], request)
        except OSError:
            pass
        os.close(child["req"])
        captures = self._captures(child["out"], child["err"], limit)
        report = _Report(self.report)
        deadline = start + float(req["timeout"])
        stdin_pipe = [child["in"], stdin]
        raw, timed_out, status = _collect(captures, report, child["res"], deadline, stdin_pipe, pid)
        duration = time.monotonic() - start
        if stdin_pipe[0] >= 0:
            os.close(stdin_pipe[0])
        # whatever the code left running (daemons, fork bombs, setsid escapees) dies here
        _kill_all_others(self.pidns, pid)
        if raw is None and status is None:
            try:
                _, status = os.waitpid(pid, 0)
            except ChildProcessError:
                status = 0
        if status is None:
            self.pending.append(pid)  # reaped after the reply is sent
        # output written before the result is already in the pipes
        _drain(captures, 0.2 if raw is None else 0)
        for fd in (child["out"], child["err"], child["res"]):
            os.close(fd)
        header = {
            "status": status,
            "timed_out": timed_out,
            "oom": self._oom_killed(),
            "reported": raw is not None,
            "duration": duration,
            "clean": _wipe(self.config["workdir"]) and self._wipe_tmp(),
            **_output_header(captures),
        }
        return header, [captures[0].part(), captures[1].part(), raw or self.scratch[:0]]

    def after_reply(self) -> None:
        """Work that need not delay the reply: reap the last child, fork the next one."""
        for pid in self.pending:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
        self.pending.clear()
        if self.session is not None:
            reaped = {pid for pid, _ in _reap()}
            if self.session["pid"] in reaped:
                self.session["dead"] = True
            return
        if self.pidns:
            self._wait_until_alone()  # reaps as it waits
        else:
            _reap()
        if self.stateless_used:
            self.prefork()

    def _start_session(self, limits: dict) -> None:
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        res_r, res_w = os.pipe()
        req_r, req_w = os.pipe()
        null = os.open(os.devnull, os.O_RDONLY)
        fds = {"stdin": null, "stdout": out_w, "stderr": err_w, "result": res_w, "request": req_r}
        plan = _child_plan(self.config, fds)
        pid = os.fork()
        if pid == 0:
            _run_session_child(plan, limits, fds)
        for fd in (out_w, err_w, res_w, req_r, null):
            os.close(fd)
        self.session = {"pid": pid, "out": out_r, "err": err_r, "res": res_r, "req": req_w}

    def _discard_next(self) -> None:
        if self.next is None:
            return
        child, self.next = self.next, None
        try:
            os.kill(child["pid"], signal.SIGKILL)
        except OSError:
            pass
        for key in ("out", "err", "res", "in", "req"):
            os.close(child[key])
        self.pending.append(child["pid"])

    def _end_session(self) -> None:
        self._discard_next()
        if self.session is None:
            return
        _kill_all_others(self.pidns, self.session["pid"])
        try:
            os.waitpid(self.session["pid"], 0)
        except ChildProcessError:
            pass
        for key in ("out", "err", "res", "req"):
            try:
                os.close(self.session[key])
            except OSError:
                pass
        self.session = None

    def exec_stateful(self, req: dict) -> tuple[dict, list[memoryview]]:
        (request,) = self.parts
        restarted = False
        if self.session is not None and self.session.get("dead"):
            self._end_session()
            restarted = True
        if self.session is None:
            self._start_session(req["limits"])
        s = self.session
        assert s is not None
        limit = int(req["limits"].get("max_output", 10_000))
        captures = self._captures(s["out"], s["err"], limit)
        report = _Report(self.report)
        start = time.monotonic()
        try:
            _write_all(s["req"], request)
        except OSError:
            pass
        deadline = start + float(req["timeout"])
        raw, timed_out, status = _collect(captures, report, s["res"], deadline, None, s["pid"])
        duration = time.monotonic() - start
        _drain(captures, 0)
        alive = raw is not None and not timed_out
        if not alive:
            # the session is gone (timeout, crash, limit): its state is lost
            pid = s["pid"]
            if status is None:
                # timed out, or its report was garbage: the session cannot be trusted further
                _kill_all_others(self.pidns, pid)
                try:
                    _, status = os.waitpid(pid, 0)
                except ChildProcessError:
                    status = 0
            _drain(captures, 0.2)
            self._end_session()
        header = {
            "stateful": True,
            "alive": alive,
            "status": status,
            "timed_out": timed_out,
            "oom": self._oom_killed(),
            "reported": alive,
            "restarted": restarted,
            "duration": duration,
            **_output_header(captures),
        }
        tail = [
            captures[0].part(),
            captures[1].part(),
            raw if alive and raw is not None else self.scratch[:0],
        ]
        return header, tail
