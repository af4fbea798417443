"""What every terminal backend offers: the `Terminal` interface, its limits and results."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gemkit.errors import GemkitError

WORKDIR = "/work"
ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "HOME": WORKDIR, "LANG": "C"}
#: the tests' environment: HOME is their fresh /tmp, not the agent's /work (no rc files)
TEST_ENV = {**ENV, "HOME": "/tmp"}
#: what a command gets once the terminal is sealed for grading
SEALED = "The terminal is sealed: the episode is over and its tests run; reset() starts anew."


class TerminalError(GemkitError):
    """A terminal backend cannot start or was used wrongly."""


@dataclass(frozen=True)
class Limits:
    """Resource limits of one terminal (per container, or per bwrap command)."""

    memory_mb: int = 256
    cpus: float = 1.0
    pids: int = 64
    disk_mb: int = 64
    max_output: int = 10_000
    max_files: int = 20_000


@dataclass
class CommandResult:
    """What one command did: its merged stdout+stderr (maybe cut), exit status, time limit hit.

    `raw` holds the bytes behind `output` (before decoding and the cut marker), so a grader
    can compare them exactly.
    """

    output: str
    exit_code: int
    timed_out: bool = False
    output_bytes: int = 0
    duration: float = 0.0
    raw: bytes = field(default=b"", repr=False)

    @property
    def truncated(self) -> bool:
        """True when the output was cut at the terminal's `max_output`."""
        return self.output_bytes > len(self.raw)


def truncation_marker(total: int, shown: int) -> str:
    """The line that ends a cut output."""
    return f"\n[... output truncated: {total} bytes in all, the first {shown} shown ...]"


def _result(head: bytes, total: int, limit: int, code: int, timed_out: bool, begin: float):
    text = head[:limit].decode("utf-8", "replace")
    if total > limit:
        text += truncation_marker(total, limit)
    duration = time.monotonic() - begin
    return CommandResult(text, code, timed_out, total, duration, head[:limit])


def check_file_names(files: dict[str, Any]) -> None:
    """Refuse task file names that would land outside the work dir."""
    for name in files:
        p = Path(name)
        if p.is_absolute() or ".." in p.parts or not p.parts:
            raise TerminalError(f"task file {name!r} must be a relative path inside {WORKDIR}")


class Terminal:
    """A shell for one episode: `start`, the agent's `run`s, `seal`, the `run_test`s, `close`."""

    backend = ""

    def __init__(self, limits: Limits | None = None):
        self.limits = limits or Limits()
        self.sealed = False

    def start(self, files: dict[str, str | bytes] | None = None) -> None:
        """Start a fresh terminal holding `files` (relative paths) in the work dir."""
        raise NotImplementedError

    def run(self, command: str, timeout: float = 30.0) -> CommandResult:
        """Run `command` as the agent with `sh -c` in the work dir, stopped after `timeout` s."""
        raise NotImplementedError

    def seal(self) -> list[str]:
        """End the agent's part: kill its processes, keep only regular files and folders in
        /work (read-only from now on), empty /tmp; return the paths deleted from /work.

        Raises `TerminalError` when the terminal cannot be sealed (then nothing may be graded).
        """
        raise NotImplementedError

    def run_test(self, script: str, timeout: float, max_output: int) -> CommandResult:
        """Run a test script as the grader in the sealed terminal, with a fresh /tmp.

        Raises `TerminalError` when the test's leftovers cannot be stopped or the terminal is
        gone (no later test may run then).
        """
        raise NotImplementedError

    def close(self) -> None:
        """Stop the terminal and remove everything it made."""

    @property
    def running(self) -> bool:
        """True between `start` and `close`."""
        raise NotImplementedError


def _proc_start_time(pid: int) -> str:
    """The start time of process `pid` (clock ticks since boot), or '' when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[1].split()[19]
