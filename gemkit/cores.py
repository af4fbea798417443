"""How many cores a gemkit process counts as its own: `GEMKIT_CORES`, else its CPU affinity.

Whatever spreads work over cores sizes itself by `usable_cores()`: the process vector's
default layout, the process executor's default pool, and the math grader's helper processes. Setting `GEMKIT_CORES` caps them (a
trainer that keeps cores for itself); the process vector sets it in each worker process to
that worker's share, so a vector of workers does not start a full set of helpers in each.
"""

from __future__ import annotations

import os

from gemkit.errors import GemkitError

#: the environment variable that overrides the CPU affinity's count
CORES_ENV = "GEMKIT_CORES"


class CoresError(GemkitError, ValueError):
    """A `GEMKIT_CORES` that is not a whole number of cores."""


def usable_cores() -> int:
    """`GEMKIT_CORES` where set, else the cores this process may run on; at least 1."""
    raw = os.environ.get(CORES_ENV, "").strip()
    if raw:
        if not raw.isdigit() or int(raw) < 1:
            raise CoresError(
                f"{CORES_ENV} must be a whole number of cores, at least 1 (or unset, for the "
                f"cores this process may run on), got {raw!r}"
            )
        return int(raw)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)
