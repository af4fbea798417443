"""Seeded syllable-based names: pronounceable, made up, and never repeated within one world."""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np

ONSETS = "b br c cr d dr f fl g gr h j k kl l m n p pr r s st t tr v z th sh ch".split()
VOWELS = "a e i o u a e o ai ei ou ae ia".split()
CODAS = ("", "", "", "n", "r", "l", "s", "th", "m", "nd", "rn", "x", "sk", "v")
#: suffixes that give a place name its flavour
PLACE_SUFFIXES = ("", "", "ton", "holm", "vik", "ford", "burg", "stad", "mere", "wick", "dale")
_VOWEL_RUN = re.compile(r"[aeiou]{3}", re.IGNORECASE)
COUNTRY_SUFFIXES = ("ia", "and", "esh", "ora", "istan", "ovia", "eria", "ane")


class Dice:
    """Uniform draws from a seeded generator, fetched in blocks: one numpy call per 4096 draws."""

    def __init__(self, rng: np.random.Generator, block: int = 4096):
        self.rng = rng
        self.block = block
        self._buf: list[float] = []
        self._i = 0

    def random(self) -> float:
        """A float in [0, 1)."""
        if self._i >= len(self._buf):
            self._buf = self.rng.random(self.block).tolist()
            self._i = 0
        self._i += 1
        return self._buf[self._i - 1]

    def below(self, n: int) -> int:
        """An integer in [0, n)."""
        return min(int(self.random() * n), n - 1)

    def between(self, lo: int, hi: int) -> int:
        """An integer in [lo, hi)."""
        return lo + self.below(max(1, hi - lo))


class NameGenerator:
    """Draws unique names from a seeded generator; `used` holds every name handed out."""

    def __init__(self, rng: np.random.Generator | Dice):
        self.dice = rng if isinstance(rng, Dice) else Dice(rng)
        self.used: set[str] = set()

    def _pick(self, options: tuple[str, ...] | list[str]) -> str:
        return options[self.dice.below(len(options))]

    def word(self, min_syllables: int = 2, max_syllables: int = 3) -> str:
        """One capitalised made-up word of a few syllables."""
        n = self.dice.between(min_syllables, max_syllables + 1)
        parts = []
        for i in range(n):
            onset = self._pick(ONSETS) if i == 0 or self.dice.random() < 0.8 else ""
            coda = self._pick(CODAS) if i == n - 1 or self.dice.random() < 0.3 else ""
            parts.append(onset + self._pick(VOWELS) + coda)
        return "".join(parts).capitalize()

    def _clean(self, make: Callable[[], str]) -> str:
        # three vowels in a row ("Raeeigiax") read as noise, not as a name
        for _ in range(20):
            name = make()
            if not _VOWEL_RUN.search(name):
                return name
        return name

    def unique(self, make: Callable[[], str], attempts: int = 50) -> str:
        """Call `make()` until it returns a name not used yet (words grow longer if needed)."""
        for _ in range(attempts):
            name = self._clean(make)
            if name not in self.used:
                self.used.add(name)
                return name
        # Crowded name space (a very large world): a numbered suffix keeps names unique.
        base, i = make(), 2
        while f"{base} {_roman(i)}" in self.used:
            i += 1
        name = f"{base} {_roman(i)}"
        self.used.add(name)
        return name

    def person(self) -> str:
        """A given name and a family name."""
        return self.unique(lambda: f"{self.word(2, 2)} {self.word(2, 3)}")

    def place(self) -> str:
        """A town-like name."""
        return self.unique(lambda: self.word(2, 2) + self._pick(PLACE_SUFFIXES))

    def country(self) -> str:
        """A country-like name."""
        return self.unique(lambda: self.word(1, 2) + self._pick(COUNTRY_SUFFIXES))

    def pattern(self, fmt: str) -> str:
        """A name from a format with `{w}` slots, each filled by a fresh word."""
        return self.unique(lambda: fmt.format(w=self.word(2, 3), w2=self.word(2, 3)))


def _roman(n: int) -> str:
    vals = ((10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I"))
    out = ""
    for v, s in vals:
        while n >= v:
            out, n = out + s, n - v
    return out
