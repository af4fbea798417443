"""Word lists shipped with the games, loaded lazily and cached (built by `build_words.py`)."""

from __future__ import annotations

import functools
from importlib import resources


@functools.cache
def _read(name: str) -> tuple[str, ...]:
    text = resources.files(__name__).joinpath(name).read_text(encoding="ascii")
    return tuple(text.split())


def dictionary() -> tuple[str, ...]:
    """All dictionary words (lowercase a-z, 4 to 12 letters), sorted."""
    return _read("words.txt")


def common_five() -> tuple[str, ...]:
    """Common five-letter words (the Wordle answers for `common_only`), sorted."""
    return _read("common5.txt")


@functools.cache
def words_of_length(length: int) -> tuple[str, ...]:
    """Dictionary words with exactly `length` letters, sorted."""
    return tuple(w for w in dictionary() if len(w) == length)
