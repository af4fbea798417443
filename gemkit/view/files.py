"""Reading files under the viewed folder safely: plain files only, no link followed, sizes capped."""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path
from typing import Any, BinaryIO

from gemkit.errors import GemkitError

#: a line longer than this is listed as too large, not parsed (parsing holds ~10x its size)
MAX_RECORD_BYTES = 64 * 1024 * 1024


class ViewError(GemkitError):
    """Something the viewer cannot show; the message says what and why."""


def too_large(size: int, line: int) -> str:
    """The message for a record the viewer does not parse."""
    limit = MAX_RECORD_BYTES // 2**20
    return f"line {line} is {size / 2**20:.0f} MB, over the viewer's {limit} MB limit for a record"


def parse_line(data: bytes, line: int) -> tuple[dict[str, Any] | None, str | None]:
    """A JSONL line as a dict, or a one-line message saying why it is not one."""
    if len(data) > MAX_RECORD_BYTES:
        return None, too_large(len(data), line)
    try:
        value = json.loads(data)
    except UnicodeDecodeError:
        return None, f"line {line} is not UTF-8 text"
    except json.JSONDecodeError as e:
        return None, f"line {line} is not valid JSON ({e.msg} at column {e.colno})"
    except (ValueError, RecursionError) as e:  # nesting deeper than the parser allows
        return None, f"line {line} is not valid JSON ({type(e).__name__})"
    if not isinstance(value, dict):
        return None, f"line {line} is JSON but not an object (a {type(value).__name__})"
    return value, None


def open_plain(path: Path, rel: str, nofollow: int | None = None) -> BinaryIO:
    """`path` opened for reading, if it is a regular file; a link is refused unless
    `nofollow` is 0 (discovery checked where it leads). Opened without blocking, so a FIFO
    put in a file's place is refused instead of hanging the viewer."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)
    flags |= getattr(os, "O_NOFOLLOW", 0) if nofollow is None else nofollow
    try:
        fd = os.open(path, flags)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise ViewError(f"{rel} was replaced by a link; it is not followed") from None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ViewError(f"{rel} is not a regular file; it is not read")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def is_plain(path: Path) -> bool:
    """Whether `path` itself (not where a link leads) is a regular file."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def read_plain(path: Path, rel: str, limit: int) -> bytes:
    """The first `limit` bytes of a regular file that is not a link."""
    with open_plain(path, rel) as f:
        return f.read(limit)


def read_tail(path: Path, limit: int = 64 * 1024) -> tuple[bytes, int]:
    """The last `limit` bytes of a side file and its size (a link is followed only if it was
    one at discovery, which checked where it leads; a FIFO or device is refused)."""
    with open_plain(path, path.name, 0 if path.is_symlink() else None) as f:
        size = os.fstat(f.fileno()).st_size
        f.seek(max(0, size - limit))
        return f.read(limit), size


#: how much of a datasets folder's JSON files is read
DATASET_JSON_BYTES = 16 * 1024 * 1024


def inside(root: Path, path: Path) -> bool:
    """Whether `path`, links resolved, lies under `root`."""
    try:
        return path.resolve().is_relative_to(root.resolve())
    except (OSError, RuntimeError):  # a link loop
        return False
