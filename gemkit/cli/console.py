"""The CLI's rich console (output goes to stdout; the library itself only logs), and the
heartbeat that shows a long run's progress where no progress bar is drawn."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO

from rich.console import Console

console = Console()
if not console.is_terminal and "COLUMNS" not in os.environ:
    # logs and CI captures are not 80 columns wide: keep tables on one line per row
    console = Console(width=140)

#: seconds between two heartbeat lines
HEARTBEAT_S = 30.0


def elapsed(seconds: float) -> str:
    """`7m05s`, `1h02m`, `42s`: a duration as a heartbeat line shows it."""
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


@contextmanager
def heartbeat(
    describe: Callable[[], str], *, every: float | None = None, stream: TextIO | None = None
) -> Iterator[None]:
    """While the block runs, write `describe()` and the time elapsed as one line to stderr every
    `every` seconds (`HEARTBEAT_S`), when the console is not a terminal.

    Off a terminal (a log file, CI, `nohup`) no progress bar is drawn, and one model reply
    of a slow server can take minutes: without these lines such a run looks hung.
    """
    if console.is_terminal:
        yield
        return
    out = stream or sys.stderr
    period = HEARTBEAT_S if every is None else every
    stop = threading.Event()
    start = time.monotonic()

    def beat() -> None:
        while not stop.wait(period):
            try:
                out.write(f"{describe()} ({elapsed(time.monotonic() - start)} elapsed)\n")
                out.flush()
            except Exception:  # noqa: BLE001 - a broken log must not end the run
                return

    thread = threading.Thread(target=beat, name="gemkit-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
