"""Which item of a dataset a reset shows: a given index, the item of a seed, or a draw."""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def pick_index(options: dict[str, Any] | None, size: int, rng: Any, seed: int | None = None) -> int:
    """`options["index"]` when given (checked against `size`), else the item for `seed`, else a
    draw from `rng`.

    A seeded reset maps the seed through a permutation of the items (`seeded_index`), so the
    `size` consecutive seeds of an eval or a vector (0, 1, 2, ...) are `size` different items;
    drawing with replacement gave seeds 0 and 2 the same item.
    """
    index = (options or {}).get("index")
    if index is None:
        if seed is not None:
            return seeded_index(seed, size)
        return int(rng.integers(size))
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < size:
        raise IndexError(f"options['index'] must be an integer in [0, {size}), got {index!r}")
    return index


def seeded_index(seed: int, size: int) -> int:
    """The item of `seed`: each block of `size` consecutive seeds visits every item once.

    Within block `seed // size` the map is `(a * seed + b) % size`, a bijection because `a` is
    coprime to `size`; `a` and `b` are drawn per block, so blocks visit the items in other
    orders. O(1) for any size (procedural sets hold billions of items).
    """
    if size <= 1:
        return 0
    block, offset = divmod(int(seed), size)
    draw = np.random.default_rng([size, block % (1 << 63)])
    while True:
        a = int(draw.integers(1, size))
        if math.gcd(a, size) == 1:
            break
    b = int(draw.integers(size))
    return (a * offset + b) % size
