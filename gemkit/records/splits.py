"""Train and test splits that do not leak: by answer, with one copy of each question.

A split by record lets the same answer sit on both sides (one entity asked about twice, in
other words): a policy then scores on the test set for what it memorised in training. So a
record's side is a function of its normalised answer alone (a stable hash, the same on
every machine and for every run size: a run extended from 1,000 to 2,000 records moves no
answer across), and two records whose questions read the same once normalised are one
question.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Callable, Iterable
from typing import TypeVar

T = TypeVar("T")

#: the split names, in the order an export lists them
SPLITS = ("train", "test")
#: the share of answers a split puts in `test` unless told otherwise
TEST_FRACTION = 0.1


def normalized(text: str) -> str:
    """Text compared without case, accents, punctuation, articles or spacing."""
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode().lower()
    words = [w for w in re.findall(r"[a-z0-9]+", text) if w not in ("a", "an", "the")]
    return " ".join(words)


def answer_split(answer: str, test_fraction: float = TEST_FRACTION) -> str:
    """`train` or `test` for a record with this answer (every record of one answer alike)."""
    if not 0 <= test_fraction <= 1:
        raise ValueError(f"test_fraction must be in [0, 1], got {test_fraction}")
    digest = hashlib.sha256(normalized(answer).encode()).digest()
    bucket = int.from_bytes(digest[:8], "big") / 2**64
    return "test" if bucket < test_fraction else "train"


def first_of_each(items: Iterable[T], key: Callable[[T], str]) -> list[T]:
    """The items in order, each dropped whose normalised `key` an earlier one had."""
    seen: set[str] = set()
    out = []
    for item in items:
        k = normalized(key(item))
        if k not in seen:
            seen.add(k)
            out.append(item)
    return out
