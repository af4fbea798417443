"""Reading a reasoning-gym item so that the same index is always the same item."""

from __future__ import annotations

import random
from typing import Any

import numpy as np


def item_at(dataset: Any, index: int) -> dict[str, Any]:
    """`dataset[index]`, with Python's and NumPy's global generators pinned to `index` meanwhile.

    Some upstream generators draw from the global generators as well as the item's own seed
    (`codeio`: 5 of 101 sampled items came out different on every read), which broke "same
    seed, same episode". The caller's global generator states are restored afterwards, so
    nothing outside the item is changed.
    """
    py_state, np_state = random.getstate(), np.random.get_state()
    try:
        random.seed(index)
        np.random.seed(index % (1 << 32))
        return dataset[index]
    finally:
        random.setstate(py_state)
        np.random.set_state(np_state)
