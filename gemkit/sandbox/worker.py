"""The supervisor that runs INSIDE a sandbox: executes code requests sent by the host.

This file is passed to the sandboxed interpreter as source (`python -I -c <source> <config>`),
so it must stay standard-library only and import nothing from gemkit. The host imports it for
the framing helpers (`encode_message`, `encode_request`, `decode_reply`, `HEADER`) and the
pure functions that read a call's outcome (`exec_outcome`, `parse_report`, `seccomp_filter`).

Protocol: each message is a 4-byte big-endian length followed by that many bytes. A host
request is a `marshal` frame of settings (`{"op": "exec" | "reset" | "ping", ...}`: never call
data) followed by the call's bytes raw (`payload` gives their lengths): the child's request,
made by the host (`encode_request`: code, limits, files, a session's stdin, packed with
`struct`), and a stateless call's stdin. A reply is a JSON header, which the host can parse
safely whatever this process sends, followed raw by the call's kept stdout, stderr and the
child's report (`tail` gives their lengths).

The supervisor never runs user code in its own process: each `exec` runs in a forked child
(stateless mode: a fresh child per call; stateful mode: one long-lived session child), in the
sandbox's memory cgroup, with resource limits, a dropped uid (or, without root, no
capabilities), and no access to the protocol pipes; every process of the sandbox runs under a
seccomp filter (`seccomp_filter`). No byte of a call passes through a Python object here: the
call's bytes move between pipes and memory regions that `fork` leaves out of every child
(`_Region`), so no later call's code can find them in the memory it inherits. The child's
report (`encode_report`) is its own word: the code can forge it (see `exec_outcome`).
"""

from __future__ import annotations

import _signal
import gc
import io
import json
import linecache
import marshal
import mmap
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
#: the largest report a child sends (its exception's last line is cut to fit)
MAX_RESULT = 16 * 1024


def encode_frame(obj: object) -> bytes:
    """One framed object (host to supervisor): length header + marshal body."""
    body = marshal.dumps(obj)
    return HEADER.pack(len(body)) + body


def encode_message(meta: dict, parts: list[bytes]) -> bytes:
    """A request to the supervisor: `meta` (no call data) framed, then the call's bytes.

    The supervisor reads `parts` (the child's request, its stdin) straight into memory that
    no child it forks inherits, and passes them on unread.
    """
    return encode_frame({**meta, "payload": [len(p) for p in parts]}) + b"".join(parts)


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


def encode_reply(obj: dict, tail: int = 0) -> bytes:
    """The head of a reply (supervisor to host): length header, JSON header, then `tail` bytes.

    A call's reply carries its output and report raw in the tail (`obj["tail"]` gives the
    parts' lengths): the supervisor never makes a Python object of them.
    """
    if _reply_chunks is None:
        text = json.dumps(obj, separators=(",", ":"))
    else:
        text = "".join(_reply_chunks(obj, 0))
    body = text.encode("utf-8")
    return HEADER.pack(HEADER.size + len(body) + tail) + HEADER.pack(len(body)) + body


def decode_reply(body: bytes) -> dict:
    """The host's view of a reply body; a call's reply becomes its outcome (`exec_outcome`).

    Raises ValueError on anything that is not a well-formed reply.
    """
    if len(body) < HEADER.size:
        raise ValueError("reply too short")
    (n,) = HEADER.unpack_from(body)
    header = json.loads(body[HEADER.size : HEADER.size + n])
    if not isinstance(header, dict):
        raise ValueError("reply is not an object")
    lengths = header.pop("tail", None)
    if lengths is None:
        return header
    tail = body[HEADER.size + n :]
    if (
        not isinstance(lengths, list)
        or len(lengths) != 3
        or not all(type(k) is int and k >= 0 for k in lengths)
        or sum(lengths) != len(tail)
    ):
        raise ValueError("reply parts do not add up")
    a, b, _ = lengths
    reply = {
        "stdout": tail[:a].decode("utf-8", "replace"),
        "stderr": tail[a : a + b].decode("utf-8", "replace"),
        "stdout_bytes": int(header.get("stdout_bytes", 0)),
        "stderr_bytes": int(header.get("stderr_bytes", 0)),
        "duration": float(header.get("duration", 0.0)),
    }
    if "clean" in header:
        reply["clean"] = bool(header["clean"])
    report = tail[a + b :] if header.get("reported") else None
    reply.update(exec_outcome(header, report))
    return reply


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


def _read_into(fd: int, view: memoryview) -> bool:
    """Fill `view` from `fd` (no intermediate object); False at end of file."""
    got = 0
    while got < len(view):
        n = os.readv(fd, [view[got:]])
        if not n:
            return False
        got += n
    return True


def _write_views(fd: int, views: list) -> None:
    """Write every buffer in order (one `writev` when the pipe takes them all)."""
    pending = [memoryview(v) for v in views if len(v)]
    while pending:
        n = os.writev(fd, pending)
        while pending and n >= len(pending[0]):
            n -= len(pending[0])
            pending.pop(0)
        if pending and n:
            pending[0] = pending[0][n:]


# A child's request and report are packed by hand, not JSON: a forked child copies every
# memory page it touches, and the json module's machinery spans many of them.
# timeout; memory, file size, open files, processes; lengths of code, files, stdin (-1: none)
_REQUEST = struct.Struct(">d4q3q")
_REPORT = struct.Struct(">qB")  # exit code, flags (1: ran to its end, 2: raised)
_LIMIT_KEYS = ("memory_bytes", "file_bytes", "nofile", "nproc")


def _limit_values(limits: dict) -> list[int]:
    """Memory, file size, open files and processes from a limits dict, None as -1 (`_limit`)."""
    return [-1 if limits.get(k) is None else int(limits[k]) for k in _LIMIT_KEYS]


def encode_request(
    code: str,
    timeout: float,
    limits: dict,
    files: dict[str, bytes] | None = None,
    stdin: str | None = None,
) -> bytes:
    """The frame that hands a child its code, limits, files and (a session's) stdin.

    A limit that is None packs as -1; the child writes the files itself, with its own rights.
    """
    raw_code = code.encode("utf-8", "surrogatepass")
    raw_files = marshal.dumps(dict(files)) if files else b""
    raw_stdin = b"" if stdin is None else stdin.encode("utf-8", "surrogatepass")
    sizes = (len(raw_code), len(raw_files), -1 if stdin is None else len(raw_stdin))
    body = _REQUEST.pack(float(timeout), *_limit_values(limits), *sizes)
    body += raw_code + raw_files + raw_stdin
    return HEADER.pack(len(body)) + body


def _read_request(fd: int) -> tuple | None:
    """A child's request: (code, timeout, memory, file size, open files, processes, files,
    stdin); a limit that was None arrives as -1, no files as {}, no stdin as None."""
    body = _read_body(fd)
    if body is None or len(body) < _REQUEST.size:
        return None
    timeout, memory, file_size, nofile, nproc, n_code, n_files, n_stdin = _REQUEST.unpack_from(body)
    at = _REQUEST.size
    code = body[at : at + n_code].decode("utf-8", "surrogatepass")
    at += n_code
    files = marshal.loads(body[at : at + n_files]) if n_files else {}
    at += n_files
    stdin = None if n_stdin < 0 else body[at : at + n_stdin].decode("utf-8", "surrogatepass")
    return code, timeout, memory, file_size, nofile, nproc, files, stdin


def encode_report(result: dict) -> bytes:
    """The frame a child sends back: exit code, whether it finished, the exception if any."""
    code = result["exit_code"]
    code = code if -(1 << 63) <= code < (1 << 63) else 1
    exc = result["exception"]
    flags = (1 if result["finished"] else 0) | (2 if exc else 0)
    body = _REPORT.pack(code, flags)
    if exc:
        kind = exc["type"].replace("\0", "?").encode("utf-8", "backslashreplace")[:200]
        limit = (exc.get("limit") or "").encode()
        last = exc["last_line"].encode("utf-8", "backslashreplace")
        room = MAX_RESULT - _REPORT.size - len(kind) - len(limit) - 2
        if len(last) > room:
            last = last[: room - 6] + b" [...]"
        body += b"\0".join((kind, last, limit))
    return HEADER.pack(len(body)) + body


def _write_all(fd: int, data: bytes | memoryview) -> None:
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
    """The calls that drop the child's privileges, as (function, args).

    With a uid of its own (gemkit runs as root): that uid and gid, which leaves no capability.
    Without one, in a user namespace: every capability is dropped, so the code cannot change
    the sandbox itself (mounts, hostname, network) for the calls after it.
    """
    uid = config.get("uid")
    if uid is None:
        return [(_capability_dropper(), ())] if config.get("drop_caps") else []
    gid = config.get("gid", uid)
    return [(os.setgroups, ([],)), (os.setresgid, (gid,) * 3), (os.setresuid, (uid,) * 3)]


def _capability_dropper() -> object:
    """A function that empties this process's capability sets (raises if the kernel refuses)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable: all empty

    def drop() -> None:
        if libc.capset(header, data) != 0:
            raise OSError(ctypes.get_errno(), "capset")

    return drop


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
        elif isinstance(e, OSError) and e.errno == 12:  # ENOMEM: a memory limit (the cgroup's)
            result["exception"]["limit"] = "memory"
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

    Its own session, default SIGPIPE/SIGTERM, the sandbox's memory cgroup, its pipes on 0/1/2,
    every other descriptor but the result and request pipes closed (the protocol pipes to the
    host and the cgroup's files stay out of reach), no privileges, the working directory. The
    supervisor works the list out before it forks, so the child only runs it: a forked child
    copies every page it touches, and looking up names and attributes touches many.
    """
    plan: list[tuple] = [
        (os.setsid, ()),
        (_signal.signal, (_SIGPIPE, _SIG_DFL)),
        (_signal.signal, (_SIGTERM, _SIG_DFL)),
    ]
    memcg = config.get("memcg")
    if memcg:
        # "0": the writer itself; from here on every page it or its descendants make counts
        plan.append((os.write, (memcg["procs"], b"0")))
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
        code, timeout, memory, file_size, nofile, nproc, files, _ = req
        # a fresh child has used next to no CPU time: no need to ask how much
        cpu = int(timeout) + 1
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        # the host's files before the limits: the file-size limit is the code's, not theirs
        refused = _place_files(files) if files else None
        _limit(memory, file_size, nofile, nproc)
        if refused is None:
            result = _execute(code, {"__name__": "__main__", "__builtins__": __builtins__})
        else:
            result = refused
        _write_all(fds["result"], encode_report(result))
    except BaseException:
        os._exit(70)
    os._exit(0)


def _place_files(files: dict) -> dict | None:
    """Write the call's files into the working directory; None, or the result of a refusal.

    The child writes them after dropping its privileges: a symlink the code planted earlier
    (in a session) can then lead nowhere the code could not write itself.
    """
    for name, content in files.items():
        try:
            folder = os.path.dirname(name)
            if folder:
                os.makedirs(folder, exist_ok=True)
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                _write_all(fd, content)
            finally:
                os.close(fd)
        except OSError as e:
            line = (
                "OSError: could not write the files into the working directory (check the "
                f"names): {name}: {e.strerror}"
            )
            try:
                os.write(2, line.encode("utf-8", "backslashreplace") + b"\n")
            except OSError:
                pass
            return {
                "exit_code": 1,
                "finished": False,
                "exception": {"type": "OSError", "last_line": line},
            }
    return None


def _run_session_child(plan: list[tuple], limits: dict, fds: dict) -> None:
    try:
        _child_enter(plan)
        _limit(*_limit_values(limits))
        namespace = {"__name__": "__main__", "__builtins__": __builtins__}
        while True:
            req = _read_request(fds["request"])
            if req is None:
                os._exit(0)
            code, timeout, *_, files, stdin = req
            _session_cpu_limit(timeout)
            _fresh_stdio(stdin)
            refused = _place_files(files) if files else None
            result = _execute(code, namespace) if refused is None else refused
            _write_all(fds["result"], encode_report(result))
    except BaseException:
        os._exit(70)


# -- the supervisor ----------------------------------------------------------------------------


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
            return (body or None), False, status
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


def _status_of(status: int, oom: bool = False) -> tuple[int, str | None]:
    """Exit code (minus the signal if killed) and the limit a wait status shows, if any.

    `oom`: the memory cgroup killed a process of this call, so a SIGKILL is its memory limit.
    """
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        limit = {signal.SIGXCPU: "cpu", signal.SIGXFSZ: "file_size"}.get(sig)
        if oom and sig == signal.SIGKILL:
            limit = "memory"
        return -sig, limit
    return os.WEXITSTATUS(status), None


def exec_outcome(header: dict, report: bytes | None) -> dict:
    """What a call did: exit code, whether it finished, its exception and the limit it hit.

    From the supervisor's account (`header`: the child's wait status, the clock, the memory
    cgroup) and the child's own `report`. The report comes from the process that ran the
    code, so the code can forge it: its exit code, `finished` and exception are the code's
    word, never a verdict. The wall clock, signals and the memory cgroup are not.
    """
    status = header.get("status")
    oom = bool(header.get("oom"))
    timed_out = bool(header.get("timed_out"))
    out: dict = {}
    if header.get("stateful"):
        if header.get("alive"):
            out.update(parse_report(report))
            _mark_limit(out, False, None)
        else:
            # the session is gone (timeout, crash, limit): its state is lost
            exit_code, limit_hit = _status_of(int(status or 0), oom)
            out["exit_code"] = exit_code if exit_code else 1
            out["session_lost"] = True
            # no report came: killed by a signal, or os._exit() in the code / a failed session
            _mark_limit(out, timed_out, limit_hit, "killed" if exit_code < 0 else "exited")
        if header.get("restarted"):
            out["session_lost"] = True
        return out
    exit_code, limit_hit = _status_of(int(status), oom) if status is not None else (0, None)
    result = parse_report(report)
    out.update(result)
    if exit_code != 0 and not result.get("exit_code"):
        out["exit_code"] = exit_code
    elif "exit_code" not in out:
        out["exit_code"] = exit_code
    killed = report is None and exit_code < 0
    _mark_limit(out, timed_out, limit_hit, "killed" if killed else None)
    return out


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
        tail = [captures[0].part(), captures[1].part(), raw if alive else self.scratch[:0]]
        return header, tail


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


def parse_report(raw: bytes | None) -> dict:
    """The child's own report; it ran user code, so anything unexpected means 'no report'."""
    if not raw or len(raw) < _REPORT.size:
        return {}
    exit_code, flags = _REPORT.unpack_from(raw)
    out: dict = {"exit_code": exit_code, "finished": bool(flags & 1)}
    if flags & 2:
        text = bytes(raw[_REPORT.size :]).decode("utf-8", "replace")
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


# -- the system-call filter every process of the sandbox runs under ---------------------------

#: namespace flags of clone/unshare: NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID,
#: NEWNET, NEWTIME (0x80 is an exit signal above 64 in clone's flags, which clone refuses)
_NAMESPACE_FLAGS = 0x00020000 | 0x7E000000 | 0x00000080
#: system calls refused outright: keyrings (kept per uid by the kernel, so seen by every later
#: call), System V IPC and POSIX message queues (objects that outlive their processes), and
#: the kernel interfaces sandboxed code has no use for (io_uring, bpf, userfaultfd, perf)
_REFUSED = (
    "setns add_key request_key keyctl shmget msgget semget mq_open io_uring_setup bpf "
    "userfaultfd perf_event_open"
).split()
_GENERIC_SYSCALLS = {
    "clone": 220, "unshare": 97, "clone3": 435, "setns": 268, "add_key": 217,
    "request_key": 218, "keyctl": 219, "shmget": 194, "msgget": 186, "semget": 190,
    "mq_open": 180, "io_uring_setup": 425, "bpf": 280, "userfaultfd": 282,
    "perf_event_open": 241,
}  # fmt: skip
#: per machine: its AUDIT_ARCH value and system-call numbers
SYSCALLS = {
    "x86_64": (0xC000003E, {
        "clone": 56, "unshare": 272, "clone3": 435, "setns": 308, "add_key": 248,
        "request_key": 249, "keyctl": 250, "shmget": 29, "msgget": 68, "semget": 64,
        "mq_open": 240, "io_uring_setup": 425, "bpf": 321, "userfaultfd": 323,
        "perf_event_open": 298,
    }),
    "aarch64": (0xC00000B7, _GENERIC_SYSCALLS),
    "riscv64": (0xC00000F3, _GENERIC_SYSCALLS),
}  # fmt: skip
_EPERM, _ENOSYS = 1, 38


def seccomp_filter(machine: str) -> bytes | None:
    """The classic-BPF seccomp program for `machine` (None: no table for it).

    Refused with EPERM: any new namespace (a user namespace would hand the code a full set of
    capabilities), joining one, and the calls in `_REFUSED`. With ENOSYS: clone3, whose flags
    a filter cannot read (the C library then falls back to clone, whose flags it can), other
    ABIs (x32, 32-bit) whose numbers this table does not cover. Everything else is allowed.
    """
    if machine not in SYSCALLS:
        return None
    arch, nr = SYSCALLS[machine]
    ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    allow, errno = 0x7FFF0000, 0x00050000
    # (code, k, jump-if-true label, jump-if-false label); a label of None: the next one
    prog: list[tuple] = [(ld, 4, None, None), (jeq, arch, None, "nosys"), (ld, 0, None, None)]
    if machine == "x86_64":
        prog.append((jge, 0x40000000, "nosys", None))  # the x32 ABI
    refused = sorted(nr[name] for name in _REFUSED)
    prog.append((jge, min(refused + [nr["clone"], nr["unshare"]]), None, "allow"))
    prog += [(jeq, nr["clone3"], "nosys", None)]
    prog += [(jeq, nr[name], "flags", None) for name in ("clone", "unshare")]
    prog += [(jeq, n, "perm", None) for n in refused]
    labels = {"allow": len(prog)}
    prog.append((ret, allow, None, None))
    labels["flags"] = len(prog)
    # the flags are the first argument's low 32 bits (little-endian machines)
    prog += [(ld, 16, None, None), (jset, _NAMESPACE_FLAGS, "perm", None), (ret, allow, None, None)]
    labels["perm"] = len(prog)
    prog.append((ret, errno | _EPERM, None, None))
    labels["nosys"] = len(prog)
    prog.append((ret, errno | _ENOSYS, None, None))
    out = bytearray()
    for at, (code, k, yes, no) in enumerate(prog):
        jt = labels[yes] - at - 1 if yes else 0
        jf = labels[no] - at - 1 if no else 0
        out += struct.pack("=HBBI", code, jt, jf, k)
    return bytes(out)


def _install_seccomp(program: bytes) -> None:
    """Put this process (and every process it will fork) under `program`, for good."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    ulong = ctypes.c_ulong

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]

    prog = Program(len(program) // 8, program)
    # no_new_privs: lets a process without CAP_SYS_ADMIN install a filter; programs the code
    # starts gain no privilege from set-uid bits or file capabilities either
    if libc.prctl(38, ulong(1), ulong(0), ulong(0), ulong(0)) != 0:  # PR_SET_NO_NEW_PRIVS
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    if libc.prctl(22, ulong(2), ctypes.byref(prog), ulong(0), ulong(0)) != 0:  # SECCOMP_MODE_FILTER
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP): this kernel has no seccomp")


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
    if config.get("seccomp"):
        program = seccomp_filter(os.uname().machine)
        if program is not None:
            _install_seccomp(program)
    os.chdir(config["workdir"])
    supervisor = Supervisor(config, rfd, wfd)
    _release_free_memory()
    supervisor.serve()


def _setup_filesystem(config: dict) -> None:
    """Build a fresh root (read-only binds + tmpfs) and pivot into it (the unshare backend).

    Runs as root of fresh mount and pid namespaces. After `pivot_root` the host's tree is
    detached, so no chroot-style escape leads back to it. The paths in `hidden` are covered
    (an empty read-only folder, or an empty file), and the root itself is made read-only: the
    code can write only /tmp and the working directory, which are emptied after each call.
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
    for path in setup.get("hidden", ()):
        target = new + path
        if os.path.isdir(target):
            mount("tmpfs", target, "tmpfs", ms_rdonly | ms_nosuid | ms_nodev, "mode=0755,size=4k")
        else:
            mount("/dev/null", target, None, ms_bind, None)
            mount(None, target, None, ms_bind | ms_remount | ms_rdonly | ms_nosuid, None)
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
    mount(None, "/", None, ms_remount | ms_bind | ms_rdonly | ms_nosuid | ms_nodev, None)


if __name__ == "__main__":
    main(sys.argv)
