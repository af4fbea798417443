"""A private copy of the global random state, for envs written against `random.seed`.

Envs from GEM and TextArena draw from the *global* `random` and `numpy.random` state (their
`reset(seed)` calls `random.seed(seed)`), so two of them stepped in one vector draw from each
other's stream, and a seeded episode is not reproduced once another env has drawn in between.
An adapter gives each env a `PrivateGlobalRNG` and runs every call into the env inside
`active()`: the env's own copy is swapped in (under one process-wide lock, so threads cannot
interleave), and the caller's global state is put back afterwards. Same seed, same episode,
in any vector slot, thread or clone, as for an env that draws from `self.np_random`.

Covered: `random`'s module functions and numpy's legacy global (`np.random.seed`,
`np.random.random`, ...). Not covered: generators an env builds itself without a seed
(`np.random.default_rng()`, `random.Random()`), which no swap can reach.
"""

from __future__ import annotations

import contextlib
import random
import threading
from collections.abc import Iterator

import numpy as np

# one lock for the process-wide state every copy swaps in and out
_LOCK = threading.RLock()


class PrivateGlobalRNG:
    """A private copy of the global `random` and legacy `numpy.random` states."""

    def __init__(self, seed: int | None = None):
        self.py_state = random.Random(seed).getstate()
        self.np_state = np.random.RandomState(seed).get_state()

    @contextlib.contextmanager
    def active(self, *, numpy: bool = True) -> Iterator[None]:
        """Make this copy the global state for the block; keep what the block drew.

        `numpy=False` swaps only `random`'s state: numpy's costs about 200 µs a swap (its
        `get_state` copies 2.5 KB), `random`'s about 30 µs, so an adapter swaps numpy's only
        around the calls that touch it (construction and `reset`, where these libraries seed
        it) and `random`'s around every call.
        """
        with _LOCK:
            saved_py = random.getstate()
            random.setstate(self.py_state)
            saved_np = None
            if numpy:
                saved_np = np.random.get_state()
                np.random.set_state(self.np_state)
            try:
                yield
            finally:
                self.py_state = random.getstate()
                random.setstate(saved_py)
                if saved_np is not None:
                    self.np_state = np.random.get_state()
                    np.random.set_state(saved_np)
