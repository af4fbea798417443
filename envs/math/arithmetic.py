"""Procedural arithmetic problems: an endless, seeded sequence with exact answers."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from fractions import Fraction
from typing import Any

import numpy as np

LEVELS = ("easy", "hard")
#: the sequence is endless in practice; a length lets envs draw an index with `integers(len)`
SIZE = 2**62

_NAMES = ["Ada", "Bo", "Chen", "Dara", "Eli", "Farah", "Gus", "Hana", "Ivo", "Juno", "Kai", "Lea"]
_ITEMS = ["apples", "marbles", "stickers", "pencils", "shells", "cards", "coins", "books"]


def format_fraction(value: Fraction) -> str:
    """An exact value as an integer or a reduced LaTeX fraction, e.g. `-\\frac{3}{4}`."""
    if value.denominator == 1:
        return str(value.numerator)
    sign = "-" if value < 0 else ""
    return f"{sign}\\frac{{{abs(value.numerator)}}}{{{value.denominator}}}"


def _int(rng: np.random.Generator, low: int, high: int) -> int:
    return int(rng.integers(low, high + 1))


def _pick(rng: np.random.Generator, options: Sequence[Any]) -> Any:
    return options[int(rng.integers(len(options)))]


# -- easy -----------------------------------------------------------------------------------


def _easy_sum(rng: np.random.Generator) -> tuple[str, str]:
    a, b = _int(rng, 10, 999), _int(rng, 10, 999)
    return f"What is {a} + {b}?", str(a + b)


def _easy_difference(rng: np.random.Generator) -> tuple[str, str]:
    a, b = _int(rng, 10, 999), _int(rng, 10, 999)
    return f"What is {a} - {b}?", str(a - b)


def _easy_product(rng: np.random.Generator) -> tuple[str, str]:
    a, b = _int(rng, 2, 99), _int(rng, 2, 30)
    return f"What is {a} \\times {b}?", str(a * b)


def _easy_division(rng: np.random.Generator) -> tuple[str, str]:
    q, b = _int(rng, 2, 50), _int(rng, 2, 12)
    return f"What is {q * b} \\div {b}?", str(q)


def _easy_story(rng: np.random.Generator) -> tuple[str, str]:
    name, item = _pick(rng, _NAMES), _pick(rng, _ITEMS)
    have, get = _int(rng, 5, 40), _int(rng, 2, 30)
    give = _int(rng, 1, min(5, (have + get) // 3))
    question = (
        f"{name} has {have} {item}, gets {get} more, then gives {give} to each of 3 friends. "
        f"How many {item} does {name} have now?"
    )
    return question, str(have + get - 3 * give)


# -- hard -----------------------------------------------------------------------------------


def _hard_expression(rng: np.random.Generator) -> tuple[str, str]:
    a, b, c, d = (_int(rng, 2, 40) for _ in range(4))
    e = _int(rng, 2, 9)
    text = f"({a} + {b}) \\times {c} - {d} \\times {e}"
    return f"Evaluate {text}.", str((a + b) * c - d * e)


def _hard_fractions(rng: np.random.Generator) -> tuple[str, str]:
    p, q = Fraction(_int(rng, 1, 9), _int(rng, 2, 12)), Fraction(_int(rng, 1, 9), _int(rng, 2, 12))
    op = _pick(rng, ["+", "-", "\\times"])
    value = p + q if op == "+" else p - q if op == "-" else p * q
    question = (
        f"Compute \\frac{{{p.numerator}}}{{{p.denominator}}} {op} "
        f"\\frac{{{q.numerator}}}{{{q.denominator}}}. Give the answer as a reduced fraction."
    )
    return question, format_fraction(value)


def _hard_linear(rng: np.random.Generator) -> tuple[str, str]:
    a = _int(rng, 2, 12) * _pick(rng, [1, -1])
    x = _int(rng, -20, 20)
    b = _int(rng, -50, 50)
    c = a * x + b
    sign = "+" if b >= 0 else "-"
    return f"Solve for x: {a}x {sign} {abs(b)} = {c}.", str(x)


def _hard_combinations(rng: np.random.Generator) -> tuple[str, str]:
    n = _int(rng, 5, 16)
    k = _int(rng, 2, min(6, n - 1))
    question = f"In how many ways can a committee of {k} be chosen from {n} people?"
    return question, str(math.comb(n, k))


def _hard_percent(rng: np.random.Generator) -> tuple[str, str]:
    price = _int(rng, 2, 20) * 20  # with 5%-step rates, a multiple of 20 keeps whole cents
    off = _pick(rng, [10, 15, 20, 25, 30, 40])
    tax = _pick(rng, [5, 10, 15])
    value = Fraction(price) * (100 - off) / 100 * (100 + tax) / 100
    question = (
        f"A jacket costs ${price}. It is discounted by {off}%, then a {tax}% sales tax is added "
        "to the discounted price. What is the final price in dollars?"
    )
    answer = f"{float(value):.2f}".rstrip("0").rstrip(".")
    return question, answer


GENERATORS: dict[str, tuple[Callable[[np.random.Generator], tuple[str, str]], ...]] = {
    "easy": (_easy_sum, _easy_difference, _easy_product, _easy_division, _easy_story),
    "hard": (_hard_expression, _hard_fractions, _hard_linear, _hard_combinations, _hard_percent),
}


def generate(rng: np.random.Generator, level: str = "easy") -> dict[str, str]:
    """One problem `{question, answer, topic}` of `level`, drawn with `rng` only."""
    if level not in GENERATORS:
        raise ValueError(f"unknown level {level!r}; expected one of {LEVELS}")
    make = _pick(rng, GENERATORS[level])
    question, answer = make(rng)
    return {"question": question, "answer": answer, "topic": make.__name__.split("_", 2)[-1]}


class ArithmeticProblems(Sequence[dict[str, str]]):
    """An endless sequence of problems: item `i` is always the same problem for one level."""

    def __init__(self, level: str = "easy"):
        if level not in GENERATORS:
            raise ValueError(f"unknown level {level!r}; expected one of {LEVELS}")
        self.level = level
        self.source = f"arithmetic/{level}"

    def __len__(self) -> int:
        return SIZE

    def __getitem__(self, index: Any) -> Any:
        if not isinstance(index, (int, np.integer)) or not 0 <= index < SIZE:
            raise IndexError(f"index must be an integer in [0, 2**62), got {index!r}")
        rng = np.random.default_rng([int(index), LEVELS.index(self.level)])
        return {"id": f"{self.level}-{int(index)}", **generate(rng, self.level)}

    def __iter__(self) -> Iterator[dict[str, str]]:
        i = 0
        while True:
            yield self[i]
            i += 1

    def __deepcopy__(self, memo: dict[int, Any]) -> ArithmeticProblems:
        return self
