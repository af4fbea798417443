"""The wire protocol between host, supervisor and child: frames, replies, requests, reports."""

from __future__ import annotations

import json
import marshal
import os
import struct

HEADER = struct.Struct(">I")
MAX_REQUEST = 256 * 1024 * 1024
#: the largest report a child sends (its exception's last line is cut to fit)
MAX_RESULT = 16 * 1024


def encode_frame(obj: dict) -> bytes:
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
