"""The forked child that runs user code: its set-up, limits, privileges and execution."""

from __future__ import annotations

import _signal
import io
import linecache
import os
import resource
import signal
import sys
import traceback

from gemkit.sandbox.wire import (
    _limit_values,
    _read_request,
    _write_all,
    encode_report,
    encode_request,
)

_SIGPIPE, _SIGTERM, _SIG_DFL = int(signal.SIGPIPE), int(signal.SIGTERM), int(signal.SIG_DFL)
_STDIO_NAMES = ("stdin", "stdout", "stderr")
#: the filename this source is compiled under in the sandbox (its frames are hidden)
WORKER_FILENAME = "<gemkit-sandbox>"


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
