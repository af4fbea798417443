"""The supervisor that runs INSIDE a sandbox: executes code requests sent by the host.

This file is passed to the sandboxed interpreter as source (`python -I -c <source> <config>`),
so it must stay standard-library only and import nothing from gemkit. The host imports it only
for the framing helpers (`encode_frame`, `encode_request`, `HEADER`).

Protocol: each message is a 4-byte big-endian length followed by that many bytes. The host's
requests are `marshal` data (the host is trusted; marshal is the cheapest to read here):
`{"op": "exec" | "reset" | "ping", ...}`; the supervisor's replies are UTF-8 JSON, which the
host can parse safely whatever this process sends. The supervisor never runs user code in its
own process: each `exec` runs in a forked child (stateless mode: a fresh child per call;
stateful mode: one long-lived session child), with resource limits, a dropped uid where
possible, and no access to the protocol pipes. A stateless request carries its child's request
ready-made (`encode_request`, packed with `struct` by the host), which the supervisor passes on
unread; every child's report is packed with `struct` (`encode_report`); a session's requests
are marshal frames.
"""

from __future__ import annotations

import _signal
import gc
import io
import json
import linecache
import marshal
import os
import resource
import select
import signal
import struct
import sys
import time
import traceback

HEADER = struct.Struct(">I")
_SIGPIPE, _SIGTERM, _SIG_DFL = int(signal.SIGPIPE), int(signal.SIGTERM), int(signal.SIG_DFL)
_STDIO_NAMES = ("stdin", "stdout", "stderr")
#: the filename this source is compiled under in the sandbox (its frames are hidden)
WORKER_FILENAME = "<gemkit-sandbox>"
MAX_REQUEST = 256 * 1024 * 1024
MAX_RESULT = 1024 * 1024


def encode_frame(obj: object) -> bytes:
    """One request (host to supervisor, supervisor to session): length header + marshal body."""
    body = marshal.dumps(obj)
    return HEADER.pack(len(body)) + body


def _not_json(obj: object) -> object:
    raise TypeError(f"{type(obj).__name__} is not JSON serializable")


# the C encoder json.dumps would build anew for every reply, built once
_make_encoder = getattr(json.encoder, "c_make_encoder", None)
_reply_chunks = (
    None
    if _make_encoder is None
    else _make_encoder(
        None, _not_json, json.encoder.encode_basestring_ascii, None, ":", ",", False, False, True
    )
)


def encode_reply(obj: dict) -> bytes:
    """One reply (supervisor to host): length header + JSON body."""
    if _reply_chunks is None:
        text = json.dumps(obj, separators=(",", ":"))
    else:
        text = "".join(_reply_chunks(obj, 0))
    body = text.encode("utf-8")
    return HEADER.pack(len(body)) + body


def _read_exact(fd: int, n: int) -> bytes | None:
    chunks = []
    while n > 0:
        chunk = os.read(fd, min(n, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _read_body(fd: int) -> bytes | None:
    head = _read_exact(fd, HEADER.size)
    if head is None:
        return None
    (n,) = HEADER.unpack(head)
    if n > MAX_REQUEST:
        return None
    return _read_exact(fd, n)


def _read_frame(fd: int) -> object | None:
    body = _read_body(fd)
    return None if body is None else marshal.loads(body)


# A stateless child's request and report are packed by hand, not JSON: a forked child copies
# every memory page it touches, and the json module's machinery spans many of them.
_REQUEST = struct.Struct(">d4q")  # timeout, then memory, file size, open files, processes
_REPORT = struct.Struct(">qB")  # exit code, flags (1: ran to its end, 2: raised)
_LIMIT_KEYS = ("memory_bytes", "file_bytes", "nofile", "nproc")


def _limit_values(limits: dict) -> list[int]:
    """Memory, file size, open files and processes from a limits dict, None as -1 (`_limit`)."""
    return [-1 if limits.get(k) is None else int(limits[k]) for k in _LIMIT_KEYS]


def encode_request(code: str, timeout: float, limits: dict) -> bytes:
    """The frame that hands a stateless child its code and limits (None packs as -1)."""
    body = _REQUEST.pack(float(timeout), *_limit_values(limits))
    body += code.encode("utf-8", "surrogatepass")
    return HEADER.pack(len(body)) + body


def _read_request(fd: int) -> tuple | None:
    """A stateless child's request: (code, timeout, memory, file size, open files, processes).

    A limit that was None arrives as -1.
    """
    body = _read_body(fd)
    if body is None or len(body) < _REQUEST.size:
        return None
    return (body[_REQUEST.size :].decode("utf-8", "surrogatepass"), *_REQUEST.unpack_from(body))


def encode_report(result: dict) -> bytes:
    """The frame a child sends back: exit code, whether it finished, the exception if any."""
    code = result["exit_code"]
    code = code if -(1 << 63) <= code < (1 << 63) else 1
    exc = result["exception"]
    flags = (1 if result["finished"] else 0) | (2 if exc else 0)
    body = _REPORT.pack(code, flags)
    if exc:
        text = "\0".join((exc["type"], exc["last_line"], exc.get("limit") or ""))
        body += text.encode("utf-8", "backslashreplace")
    return HEADER.pack(len(body)) + body


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


# -- the child that runs user code -------------------------------------------------------------


def _cap(which: int, value: int) -> None:
    """Set a limit to `value`, or as close as an existing hard limit allows."""
    try:
        resource.setrlimit(which, (value, value))
    except (ValueError, OSError):
        # lowering never fails; a value above an existing hard cap keeps that cap
        soft, hard = resource.getrlimit(which)
        if hard == resource.RLIM_INFINITY or value < hard:
            resource.setrlimit(which, (min(value, hard), hard))


def _session_cpu_limit(seconds: float) -> None:
    """Let a session's next call use `seconds` more CPU time (a soft limit)."""
    used = resource.getrusage(resource.RUSAGE_SELF)
    soft = int(used.ru_utime + used.ru_stime + seconds) + 1
    # a session sets a new soft limit each call and can never raise a hard one, so the hard
    # limit stays where it is (the wall clock is the limit that always holds)
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


def _limit(memory: int, file_size: int, nofile: int, nproc: int) -> None:
    """Cap memory, file size, open files and processes (-1, or 0 but for file size: leave as
    is); no core dumps."""
    if memory > 0:
        _cap(resource.RLIMIT_AS, int(memory))
    if file_size >= 0:
        _cap(resource.RLIMIT_FSIZE, int(file_size))
    if nofile > 0:
        _cap(resource.RLIMIT_NOFILE, int(nofile))
    if nproc > 0:
        _cap(resource.RLIMIT_NPROC, int(nproc))
    _cap(resource.RLIMIT_CORE, 0)


def _privilege_calls(config: dict) -> list[tuple]:
    """The calls that drop to the code's own uid and gid (none without one), as (function, args)."""
    uid = config.get("uid")
    if uid is None:
        return []
    gid = config.get("gid", uid)
    return [(os.setgroups, ([],)), (os.setresgid, (gid,) * 3), (os.setresuid, (uid,) * 3)]


def _describe_exception(exc: BaseException) -> dict:
    try:
        lines = traceback.format_exception(type(exc), exc, exc.__traceback__)
        # drop the frames of this file: the user only wrote `<code>`
        text = "".join(line for line in lines if WORKER_FILENAME not in line)
    except MemoryError:
        text = f"{type(exc).__name__}\n"
    last = text.rstrip("\n").rsplit("\n", 1)[-1] if text.strip() else type(exc).__name__
    return {"type": type(exc).__name__, "last_line": last, "traceback": text}


def _execute(code: str, namespace: dict) -> dict:
    """Run code like `python -c` would: print the traceback on stderr; return what happened."""
    # finished: the code ran to its last line (no exception, no exit call)
    result: dict = {"exception": None, "exit_code": 0, "finished": False}
    # lets tracebacks quote the user's lines
    linecache.cache["<code>"] = (len(code), None, code.splitlines(True), "<code>")
    try:
        # dont_inherit: the code gets no __future__ flags from this file (its annotations stay live)
        compiled = compile(code, "<code>", "exec", dont_inherit=True)
        exec(compiled, namespace)
        result["finished"] = True
    except SystemExit as e:
        code_value = e.code
        if code_value is None:
            result["exit_code"] = 0
        elif isinstance(code_value, int):
            result["exit_code"] = code_value
        else:
            try:
                sys.stderr.write(f"{code_value}\n")
            except Exception:
                pass
            result["exit_code"] = 1
    except BaseException as e:  # the user's exception, whatever it is, is data
        info = _describe_exception(e)
        result["exception"] = {"type": info["type"], "last_line": info["last_line"]}
        if isinstance(e, OSError) and e.errno == 27:  # EFBIG: the file-size limit
            result["exception"]["limit"] = "file_size"
        result["exit_code"] = 1
        try:
            sys.stderr.write(info["traceback"])
        except Exception:
            pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    return result


def _fresh_stdio(stdin_text: str | None) -> None:
    sys.stdout = io.TextIOWrapper(
        os.fdopen(1, "wb", closefd=False),
        encoding="utf-8",
        errors="backslashreplace",
        line_buffering=False,
        write_through=False,
    )
    sys.stderr = io.TextIOWrapper(
        os.fdopen(2, "wb", closefd=False),
        encoding="utf-8",
        errors="backslashreplace",
        write_through=True,
    )
    sys.stdin = (
        io.StringIO(stdin_text or "")
        if stdin_text is not None
        else io.TextIOWrapper(os.fdopen(0, "rb", closefd=False), encoding="utf-8")
    )


def _child_plan(config: dict, fds: dict) -> list[tuple]:
    """The system calls a fresh child makes first, as (function, args) pairs.

    Its own session, default SIGPIPE/SIGTERM, its pipes on 0/1/2, every other descriptor but
    the result and request pipes closed (the protocol pipes to the host stay out of reach), no
    privileges, the working directory. The supervisor works the list out before it forks, so
    the child only runs it: a forked child copies every page it touches, and looking up names
    and attributes touches many.
    """
    plan: list[tuple] = [
        (os.setsid, ()),
        (_signal.signal, (_SIGPIPE, _SIG_DFL)),
        (_signal.signal, (_SIGTERM, _SIG_DFL)),
    ]
    plan += [(os.dup2, (fds[name], target)) for target, name in enumerate(_STDIO_NAMES)]
    low = 3
    for fd in sorted(fds[name] for name in ("result", "request") if name in fds):
        if fd > low:
            plan.append((os.closerange, (low, fd)))
        low = fd + 1
    plan.append((os.closerange, (low, 65536)))
    plan += _privilege_calls(config)
    plan.append((os.chdir, (config["workdir"],)))
    return plan


def _warm_child_path(rounds: int = 20) -> None:
    """Run the child's side-effect-free steps here until CPython has specialised their code.

    Forked children inherit that: specialised code skips the generic name and attribute
    lookups, whose cache writes would otherwise copy pages in every child.
    """
    r, w = os.pipe()
    try:
        frame = encode_request("pass", 1.0, {})
        report = {"exit_code": 0, "finished": True, "exception": None}
        for _ in range(rounds):
            os.write(w, frame)
            _read_request(r)
            encode_report(report)
            _execute("pass", {"__name__": "__main__", "__builtins__": __builtins__})
            _limit(-1, -1, -1, -1)  # only forbids core dumps, as the supervisor may
    finally:
        os.close(r)
        os.close(w)


def _child_enter(plan: list[tuple]) -> None:
    """Make the calls `_child_plan` worked out."""
    for call, args in plan:
        call(*args)


def _stateless_stdio() -> tuple:
    """Stream objects over fds 0/1/2, built once in the supervisor for every stateless child.

    Built while those fds are pipes, as they are in a child, so the objects hold the state a
    pipe gives them (not seekable). The supervisor never uses them; a forked child only
    installs them, which costs far less than building three text wrappers per call.
    """
    saved = [os.dup(fd) for fd in (0, 1, 2)]
    pipes = [os.pipe() for _ in range(3)]
    try:
        for fd, (r, w) in zip((0, 1, 2), pipes, strict=True):
            os.dup2(r if fd == 0 else w, fd)
        stdout = io.TextIOWrapper(
            os.fdopen(1, "wb", closefd=False),
            encoding="utf-8",
            errors="backslashreplace",
            line_buffering=False,
            write_through=False,
        )
        stderr = io.TextIOWrapper(
            os.fdopen(2, "wb", closefd=False),
            encoding="utf-8",
            errors="backslashreplace",
            write_through=True,
        )
        stdin = io.TextIOWrapper(os.fdopen(0, "rb", closefd=False), encoding="utf-8")
    finally:
        for fd, old in zip((0, 1, 2), saved, strict=True):
            os.dup2(old, fd)
            os.close(old)
        for r, w in pipes:
            os.close(r)
            os.close(w)
    return stdin, stdout, stderr


def _run_stateless_child(plan: list[tuple], fds: dict, stdio: tuple) -> None:
    """A pre-forked child: waits for one request, runs it in a fresh namespace, exits.

    Lean on purpose: every page of the supervisor's memory this touches is copied, per call.
    """
    try:
        _child_enter(plan)
        sys.stdin, sys.stdout, sys.stderr = stdio
        req = _read_request(fds["request"])
        if req is None:
            os._exit(0)
        code, timeout, memory, file_size, nofile, nproc = req
        # a fresh child has used next to no CPU time: no need to ask how much
        cpu = int(timeout) + 1
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        _limit(memory, file_size, nofile, nproc)
        result = _execute(code, {"__name__": "__main__", "__builtins__": __builtins__})
        _write_all(fds["result"], encode_report(result))
    except BaseException:
        os._exit(70)
    os._exit(0)


def _run_session_child(plan: list[tuple], limits: dict, fds: dict) -> None:
    try:
        _child_enter(plan)
        _limit(*_limit_values(limits))
        namespace = {"__name__": "__main__", "__builtins__": __builtins__}
        while True:
            req = _read_frame(fds["request"])
            if req is None:
                os._exit(0)
            _session_cpu_limit(req["timeout"])
            _fresh_stdio(req.get("stdin"))
            result = _execute(req["code"], namespace)
            _write_all(fds["result"], encode_report(result))
    except BaseException:
        os._exit(70)


# -- the supervisor ----------------------------------------------------------------------------


class _Capture:
    """Reads one stream, keeping the first `limit` bytes and counting the rest."""

    def __init__(self, fd: int, limit: int):
        self.fd = fd
        self.limit = limit
        self.kept = bytearray()
        self.total = 0
        self.open = True

    def read(self) -> None:
        try:
            chunk = os.read(self.fd, 1 << 16)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            self.open = False
            return
        self.total += len(chunk)
        room = self.limit - len(self.kept)
        if room > 0:
            self.kept += chunk[:room]

    def text(self) -> str:
        return self.kept.decode("utf-8", errors="replace")


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
    done = []
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


def _write_files(config: dict, files: dict) -> None:
    """Put the call's files in the working directory, as the code's own uid.

    Written by a child that has dropped privileges: a symlink the code planted earlier (in a
    session) can then lead nowhere the code could not write itself.
    """
    if not files:
        return
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            _child_enter(_privilege_calls(config))
            workdir = config["workdir"]
            for name, content in files.items():
                path = os.path.join(workdir, name)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "wb") as f:
                    f.write(content)
            status = 0
        except BaseException as e:
            try:
                os.write(2, f"{type(e).__name__}: {e}".encode()[:500])
            except OSError:
                pass
        os._exit(status)
    _, status = os.waitpid(pid, 0)
    if status != 0:
        raise OSError("could not write the files into the working directory (check the names)")


def _collect(
    captures: list[_Capture],
    result_fd: int,
    deadline: float,
    stdin: list | None = None,
    child: int | None = None,
) -> tuple[bytes | None, bool, int | None]:
    """Pump output until the child's framed result arrives, the child dies, or time runs out.

    Returns (result body or None, timed out, the child's wait status if it was reaped here).
    """
    result = bytearray()
    want = HEADER.size
    result_open = True
    # stdin is [fd, data]; fd becomes -1 once written out and closed
    stdin = stdin if stdin is not None else [-1, b""]
    stdin_view = memoryview(stdin[1])
    if stdin[0] >= 0 and not stdin_view:
        os.close(stdin[0])
        stdin[0] = -1
    status: int | None = None
    while True:
        if len(result) >= want:
            if want == HEADER.size:
                (n,) = HEADER.unpack(bytes(result[: HEADER.size]))
                if n > MAX_RESULT:  # not our child's report: the code wrote to the pipe
                    return None, False, status
                want = HEADER.size + n
                continue
            return bytes(result[HEADER.size : want]), False, status
        if not result_open or status is not None:
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
            try:
                chunk = os.read(result_fd, 1 << 16)
            except OSError:
                chunk = b""
            if chunk:
                result += chunk
            else:
                result_open = False
        if child is not None and not r:
            # the child may be gone while its descendants still hold the pipes open
            try:
                pid, st = os.waitpid(child, os.WNOHANG)
            except ChildProcessError:
                pid, st = child, 0
            if pid == child:
                status = st
                _drain_fd_into(result_fd, result)


def _drain_fd_into(fd: int, buf: bytearray) -> None:
    while True:
        r, _, _ = select.select([fd], [], [], 0)
        if not r:
            return
        try:
            chunk = os.read(fd, 1 << 16)
        except OSError:
            return
        if not chunk:
            return
        buf += chunk


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


def _reply_output(captures: list[_Capture]) -> dict:
    out, err = captures
    return {
        "stdout": out.text(),
        "stdout_bytes": out.total,
        "stderr": err.text(),
        "stderr_bytes": err.total,
    }


def _status_of(status: int) -> tuple[int, str | None]:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        limit = {signal.SIGXCPU: "cpu", signal.SIGXFSZ: "file_size"}.get(sig)
        return -sig, limit
    return os.WEXITSTATUS(status), None


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
        _warm_child_path()

    def serve(self) -> None:
        """Answer the host's requests until it closes the pipe."""
        # children share the supervisor's pages copy-on-write; a frozen heap is never touched
        # by their garbage collector, so forking stays cheap
        gc.freeze()
        _write_all(self.wfd, encode_reply({"ready": True, "pid": os.getpid()}))
        while True:
            req = _read_frame(self.rfd)
            if req is None:
                self._end_session()
                return
            try:
                reply = self.handle(req)
            except Exception as e:  # report, and let the host replace this sandbox
                reply = {
                    "error": f"{type(e).__name__}: {e}",
                    "clean": False,
                    "exit_code": 1,
                    "session_lost": bool(req.get("stateful")),
                }
            _write_all(self.wfd, encode_reply(reply))
            self.after_reply()

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

    def handle(self, req: dict) -> dict:
        """Serve one request."""
        op = req.get("op")
        if op == "exec":
            if req.get("stateful"):
                return self.exec_stateful(req)
            self.stateless_used = True
            return self.exec_stateless(req)
        if op == "reset":
            self._end_session()
            return {"clean": _wipe(self.config["workdir"]) and self._wipe_tmp()}
        if op == "ping":
            return {"pong": True}
        return {"error": f"unknown op {op!r}"}

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

    def exec_stateless(self, req: dict) -> dict:
        _write_files(self.config, req.get("files") or {})
        limit = int(req["limits"].get("max_output", 10_000))
        self.prefork()
        child, self.next = self.next, None
        assert child is not None
        pid = child["pid"]
        stdin = req.get("stdin")
        stdin_bytes = stdin.encode("utf-8") if stdin is not None else b""
        start = time.monotonic()
        try:
            _write_all(child["req"], req["child"])
        except OSError:
            pass
        os.close(child["req"])
        captures = [_Capture(child["out"], limit), _Capture(child["err"], limit)]
        deadline = start + float(req["timeout"])
        stdin_pipe = [child["in"], stdin_bytes]
        raw, timed_out, status = _collect(captures, child["res"], deadline, stdin_pipe, pid)
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
        exit_code, limit_hit = _status_of(status) if status is not None else (0, None)
        result = _parse_result(raw)
        reply = _reply_output(captures)
        reply.update(result)
        if exit_code != 0 and not result.get("exit_code"):
            reply["exit_code"] = exit_code
        elif "exit_code" not in reply:
            reply["exit_code"] = exit_code
        killed = raw is None and exit_code < 0
        _mark_limit(reply, timed_out, limit_hit, "killed" if killed else None)
        reply["duration"] = duration
        reply["clean"] = _wipe(self.config["workdir"]) and self._wipe_tmp()
        return reply

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

    def exec_stateful(self, req: dict) -> dict:
        _write_files(self.config, req.get("files") or {})
        restarted = False
        if self.session is not None and self.session.get("dead"):
            self._end_session()
            restarted = True
        if self.session is None:
            self._start_session(req["limits"])
        s = self.session
        assert s is not None
        limit = int(req["limits"].get("max_output", 10_000))
        captures = [_Capture(s["out"], limit), _Capture(s["err"], limit)]
        start = time.monotonic()
        try:
            _write_all(
                s["req"],
                encode_frame(
                    {"code": req["code"], "timeout": req["timeout"], "stdin": req.get("stdin")}
                ),
            )
        except OSError:
            pass
        deadline = start + float(req["timeout"])
        raw, timed_out, status = _collect(captures, s["res"], deadline, None, s["pid"])
        duration = time.monotonic() - start
        _drain(captures, 0)
        reply = _reply_output(captures)
        if raw is not None and not timed_out:
            reply.update(_parse_result(raw))
            _mark_limit(reply, False, None)
        else:
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
            reply.update(_reply_output(captures))
            exit_code, limit_hit = _status_of(status)
            self._end_session()
            reply["exit_code"] = exit_code if exit_code else 1
            reply["session_lost"] = True
            # no report came: killed by a signal, or os._exit() in the code / a failed session
            _mark_limit(reply, timed_out, limit_hit, "killed" if exit_code < 0 else "exited")
        if restarted:
            reply["session_lost"] = True
        reply["duration"] = duration
        return reply


def _mark_limit(
    reply: dict, timed_out: bool, limit_hit: str | None, otherwise: str | None = None
) -> None:
    """Name in `reply` the limit that stopped the code; the first that applies wins.

    The wall clock, then a limit signal (CPU time, file size), then what the code's own report
    shows (a MemoryError, a file-size OSError), then `otherwise` (how it ended, if given).
    """
    exception = reply.get("exception") or {}
    if timed_out:
        reply["timed_out"] = True
        reply["limit_hit"] = "wall"
    elif limit_hit:
        reply["limit_hit"] = limit_hit
        reply["timed_out"] = limit_hit == "cpu"
    elif exception.get("type") == "MemoryError":
        reply["limit_hit"] = "memory"
    elif exception.get("limit"):
        reply["limit_hit"] = exception["limit"]
    elif otherwise:
        reply["limit_hit"] = otherwise


def _parse_result(raw: bytes | None) -> dict:
    """The child's own report; it ran user code, so anything unexpected means 'no report'."""
    if not raw or len(raw) < _REPORT.size:
        return {}
    exit_code, flags = _REPORT.unpack_from(raw)
    out: dict = {"exit_code": exit_code, "finished": bool(flags & 1)}
    if flags & 2:
        text = raw[_REPORT.size :].decode("utf-8", "replace")
        if text.count("\0") < 2:
            return {}
        kind, rest = text.split("\0", 1)
        last_line, limit = rest.rsplit("\0", 1)
        out["exception"] = {"type": kind, "last_line": last_line}
        if limit:
            out["exception"]["limit"] = limit
    return out


class _SiteOnMiss:
    """The last import finder: the first import nothing else finds runs `site.main()` first.

    The supervisor starts without `site` (`-S`) and takes the sys.path it would have built;
    this runs what it skipped (the .pth files' import lines, which may install finders, e.g. an
    editable install's, and sitecustomize), once per process, then looks again.
    """

    done = False

    @classmethod
    def find_spec(cls, name: str, path: object = None, target: object = None) -> object:
        """Run `site.main()` once, then search sys.path again; None: not found."""
        if cls.done:
            return None
        cls.done = True
        import site
        from importlib.machinery import PathFinder

        site.main()
        return PathFinder.find_spec(name, path)  # type: ignore[arg-type]


def _adopt_site(info: dict) -> None:
    """Take the sys.path and prefixes `site` would have set, and the builtins it adds."""
    import site

    sys.path[:] = info["path"]
    sys.prefix, sys.exec_prefix = info["prefix"], info["exec_prefix"]
    site.setquit()  # exit() and quit()
    site.setcopyright()
    site.sethelper()
    sys.meta_path.append(_SiteOnMiss)


def _no_dump() -> None:
    """Keep same-uid code from opening this process's pipes through /proc or ptrace."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except Exception:
        pass


def _release_free_memory() -> None:
    """Hand back to the kernel the heap that compiling this file left free.

    Every fork copies the page tables of this process and every child unmaps them again, so
    each megabyte kept here costs on every call (glibc only; elsewhere a no-op).
    """
    gc.collect()
    try:
        import ctypes

        ctypes.CDLL(None).malloc_trim(0)
    except Exception:
        pass


def main(argv: list[str]) -> None:
    """Entry point inside the sandbox: the last argument is the JSON config."""
    config = json.loads(argv[-1])
    # set for this process alone (see backends.SUPERVISOR_ENV); the code's own programs never see it
    os.environ.pop("LD_BIND_NOW", None)
    if config.get("site"):
        _adopt_site(config["site"])
    # move the protocol pipes off 0/1 so nothing the code prints can reach the host
    rfd = os.dup(0)
    wfd = os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    _no_dump()
    if config.get("setup"):
        _setup_filesystem(config)
    os.chdir(config["workdir"])
    supervisor = Supervisor(config, rfd, wfd)
    _release_free_memory()
    supervisor.serve()


def _setup_filesystem(config: dict) -> None:
    """Build a fresh root (read-only binds + tmpfs) and pivot into it (the unshare backend).

    Runs as root of fresh mount and pid namespaces. After `pivot_root` the host's tree is
    detached, so no chroot-style escape leads back to it.
    """
    import ctypes

    setup = config["setup"]
    libc = ctypes.CDLL(None, use_errno=True)
    ms_rdonly, ms_nosuid, ms_nodev, ms_noexec = 1, 2, 4, 8
    ms_remount, ms_bind, ms_rec, ms_private = 32, 4096, 16384, 1 << 18

    def mount(src: str | None, dst: str, fstype: str | None, flags: int, data: str | None) -> None:
        enc = [None if x is None else x.encode() for x in (src, dst, fstype, data)]
        if libc.mount(enc[0], enc[1], enc[2], flags, enc[3]) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"mount {src} on {dst}: {os.strerror(err)}")

    mount(None, "/", None, ms_rec | ms_private, None)
    # the new root is a tmpfs mounted, in this private mount namespace, over a host folder
    # that holds none of the paths to bind (a virtualenv may live under /tmp)
    ro_paths = setup["ro_paths"]
    new = next(
        c
        for c in ("/tmp", "/mnt", "/media", "/srv", "/opt", "/home")
        if os.path.isdir(c) and not any(p == c or p.startswith(c + "/") for p in ro_paths)
    )
    mount("tmpfs", new, "tmpfs", ms_nosuid | ms_nodev, "mode=0755,size=16m")
    size = int(setup["disk_bytes"])
    for path, mode in (("/tmp", "1777"), (config["workdir"], "0777")):
        os.makedirs(new + path, mode=0o755, exist_ok=True)
        mount("tmpfs", new + path, "tmpfs", ms_nosuid | ms_nodev, f"mode={mode},size={size}")
    for path in ro_paths:
        target = new + path
        if os.path.islink(path):
            os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
            os.symlink(os.readlink(path), target)
            continue
        if os.path.isdir(path):
            os.makedirs(target, mode=0o755, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
            open(target, "a").close()
        mount(path, target, None, ms_bind | ms_rec, None)
        locked = os.statvfs(path).f_flag & (ms_nosuid | ms_nodev | ms_noexec)
        mount(None, target, None, ms_bind | ms_remount | ms_rdonly | ms_nosuid | locked, None)
    os.makedirs(new + "/dev", mode=0o755)
    for node in ("null", "zero", "full", "random", "urandom"):
        open(new + "/dev/" + node, "a").close()
        mount("/dev/" + node, new + "/dev/" + node, None, ms_bind, None)
    for link, target in (
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ):
        os.symlink(target, new + "/dev/" + link)
    os.makedirs(new + "/proc", mode=0o755)
    mount("proc", new + "/proc", "proc", ms_nosuid | ms_nodev | ms_noexec, None)
    os.chdir(new)
    if libc.syscall(int(setup["pivot_root"]), b".", b".") != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"pivot_root: {os.strerror(err)}")
    if libc.umount2(b".", 2) != 0:  # MNT_DETACH: the old root disappears from this namespace
        err = ctypes.get_errno()
        raise OSError(err, f"umount old root: {os.strerror(err)}")
    os.chdir("/")


if __name__ == "__main__":
    main(sys.argv)
