"""Java game engines (TextWorldExpress, ScienceWorld) kept running between envs of a process.

Both engines are Java programs their Python packages start through py4j, seconds per start
and about 200 MB each. An env takes an engine at its first reset and gives it back on
`close()`; the next env of the same kind takes that one instead of starting another (a few
are kept, the rest shut down), and the idle ones are shut down when the process exits.
An engine holds no episode between envs: every reset loads its game anew.
"""

from __future__ import annotations

import atexit
import contextlib
import shutil
import threading
from collections.abc import Callable
from typing import Any

from gemkit.errors import GemkitError

#: idle engines kept per kind
KEEP = 2

_idle: dict[str, list[Any]] = {}
_lock = threading.Lock()


def need_java(family: str) -> None:
    """Raise with what to install when no Java runtime is on the PATH."""
    if shutil.which("java") is None:
        raise GemkitError(
            f"{family}: envs run a Java engine and need a Java runtime (17 or later) on the "
            "PATH: apt-get install default-jre-headless"
        )


def take(kind: str, start: Callable[[], Any]) -> Any:
    """An idle engine of `kind`, or a new one from `start()`."""
    with _lock:
        idle = _idle.get(kind)
        if idle:
            return idle.pop()
    return start()


def give_back(kind: str, engine: Any) -> None:
    """Keep `engine` for the next env of `kind`, or shut it down when enough are kept."""
    with _lock:
        idle = _idle.setdefault(kind, [])
        if len(idle) < KEEP:
            idle.append(engine)
            return
    shut_down(engine)


def shut_down(engine: Any) -> None:
    """Stop an engine's Java process (once: both packages close again in `__del__`)."""
    with contextlib.suppress(Exception):
        engine.close()
    engine.close = lambda: None


@atexit.register
def _shut_down_idle() -> None:
    with _lock:
        engines = [e for idle in _idle.values() for e in idle]
        _idle.clear()
    for engine in engines:
        shut_down(engine)
