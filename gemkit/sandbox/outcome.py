"""What a sandboxed call did, read on the host from the supervisor's reply."""

from __future__ import annotations

import json
import os
import signal

from gemkit.sandbox.wire import HEADER, parse_report


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


def _status_of(status: int, oom: bool = False) -> tuple[int, str | None]:
    """Exit code (minus the signal if killed) and the limit a wait status shows, if any.

    `oom`: the memory cgroup killed a process of this call, so a SIGKILL is its memory limit.
    """
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        limit = {int(signal.SIGXCPU): "cpu", int(signal.SIGXFSZ): "file_size"}.get(sig)
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
