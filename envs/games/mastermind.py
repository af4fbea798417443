"""Mastermind: crack a hidden colour code from black/white peg feedback."""

from __future__ import annotations

import functools
import re

import numpy as np

from gemkit.envs.games.base import GameEnv, InvalidMove, Outcome
from gemkit.policy import SyncPolicy

#: Progress shaping over a whole game adds up to at most this; cracking the code adds 1.0.
SHAPING = 0.5
HISTORY_RE = re.compile(r"^\s*\d+\.\s+([\d ]+?)\s+->\s+(\d+) black, (\d+) white", re.MULTILINE)
_SEPARATORS = re.compile(r"[\s,;]+")


def score(guess: tuple[int, ...], code: tuple[int, ...]) -> tuple[int, int]:
    """Black pegs (right colour, right place) and white pegs (right colour, wrong place)."""
    black = sum(g == c for g, c in zip(guess, code, strict=True))
    common = sum(min(guess.count(k), code.count(k)) for k in set(guess))
    return black, common - black


class Mastermind(GameEnv):
    """Guess a code of `code_length` colours (digits 1..num_colors, repeats allowed).

    Each guess is answered with black pegs (right colour in the right place) and white pegs
    (right colour in the wrong place). Reward: `0.5 * gain / code_length` whenever the number
    of black pegs beats the best so far (at most 0.5 per game), plus 1.0 for cracking the code.
    """

    def __init__(self, code_length: int = 4, num_colors: int = 6, max_turns: int = 12):
        super().__init__(max_turns)
        if not 1 <= code_length <= 8:
            raise ValueError(f"code_length must be in 1..8, got {code_length}")
        if not 2 <= num_colors <= 9:
            raise ValueError(f"num_colors must be in 2..9 (one digit per colour), got {num_colors}")
        self.code_length, self.num_colors = code_length, num_colors
        self.code: tuple[int, ...] = (1,) * code_length
        self.history: list[tuple[tuple[int, ...], int, int]] = []
        self.best_black = 0

    def rules(self) -> str:
        """Rules text."""
        return (
            f"Mastermind: I hide a code of {self.code_length} colours, each a digit from 1 to "
            f"{self.num_colors} (colours may repeat). Guess the code. After each guess I say how "
            "many black pegs (right colour in the right position) and white pegs (right colour "
            "in a wrong position) it earns; each code peg counts at most once."
        )

    def move_format(self) -> str:
        """A boxed code, digits separated by spaces."""
        example = " ".join(str(1 + i % self.num_colors) for i in range(self.code_length))
        return f"\\boxed{{{example}}} ({self.code_length} digits from 1 to {self.num_colors})"

    def new_game(self) -> None:
        """Draw the hidden code."""
        digits = self.np_random.integers(1, self.num_colors + 1, size=self.code_length)
        self.code = tuple(int(d) for d in digits)
        self.history = []
        self.best_black = 0

    def parse(self, move: str) -> tuple[int, ...]:
        """The guess in `move`, or raise `InvalidMove` saying what is wrong."""
        text = move.strip()
        parts = list(text) if text.isascii() and text.isdigit() else _SEPARATORS.split(text)
        parts = [p for p in parts if p]
        if len(parts) != self.code_length:
            raise InvalidMove(
                f"a code has exactly {self.code_length} digits, got {len(parts)} item(s)."
            )
        guess = []
        for p in parts:
            if not (len(p) == 1 and "1" <= p <= str(self.num_colors)):
                raise InvalidMove(f"{p[:20]!r} is not a colour; colours are 1..{self.num_colors}.")
            guess.append(int(p))
        return tuple(guess)

    def play(self, move: str) -> Outcome:
        """Score the guess against the hidden code."""
        guess = self.parse(move)
        black, white = score(guess, self.code)
        self.history.append((guess, black, white))
        reward = 0.0
        if black > self.best_black:
            reward = SHAPING * (black - self.best_black) / self.code_length
            self.best_black = black
        shown = " ".join(map(str, guess))
        if black == self.code_length:
            return Outcome(f"{shown}: cracked! The code was {shown}.", reward + 1.0, True, True)
        return Outcome(f"{shown}: {black} black, {white} white.", reward)

    def state_text(self) -> str:
        """All guesses so far with their pegs."""
        if not self.history:
            return "No guesses yet."
        lines = [
            f"{i}. {' '.join(map(str, g))} -> {b} black, {w} white"
            for i, (g, b, w) in enumerate(self.history, 1)
        ]
        return "Guesses so far:\n" + "\n".join(lines)

    def random_action(self, rng: np.random.Generator) -> str:
        """A random code."""
        digits = rng.integers(1, self.num_colors + 1, size=self.code_length)
        return "\\boxed{" + " ".join(str(int(d)) for d in digits) + "}"


@functools.cache
def _all_codes(code_length: int, num_colors: int) -> np.ndarray:
    """Every code, shape (num_colors**code_length, code_length), digits 1..num_colors."""
    grids = np.indices((num_colors,) * code_length).reshape(code_length, -1).T
    return (grids + 1).astype(np.int8)


@functools.cache
def _score_table(code_length: int, num_colors: int) -> np.ndarray:
    """Feedback of every code against every code, encoded `black * (L + 1) + white`."""
    codes = _all_codes(code_length, num_colors)
    black = (codes[:, None, :] == codes[None, :, :]).sum(-1)
    counts = np.stack([(codes == k).sum(1) for k in range(1, num_colors + 1)], 1)
    common = np.minimum(counts[:, None, :], counts[None, :, :]).sum(-1)
    return (black * (code_length + 1) + (common - black)).astype(np.int16)


class MastermindExpert(SyncPolicy):
    """Knuth-style minimax: keep the codes consistent with all feedback, play the guess whose
    worst-case answer leaves the fewest (preferring consistent codes, then the smallest)."""

    def __init__(self, code_length: int = 4, num_colors: int = 6, **_: object):
        self.code_length, self.num_colors = code_length, num_colors

    def reset(self) -> None:
        """Nothing to forget: every turn is read from the observation's history."""

    def choose(self, observation: str) -> str:
        """Filter the codes by the history in the observation and pick a minimax guess."""
        L, C = self.code_length, self.num_colors
        codes, table = _all_codes(L, C), _score_table(L, C)
        alive = np.ones(len(codes), dtype=bool)
        for m in HISTORY_RE.finditer(observation):
            digits = m[1].split()
            if len(digits) != L or not all(d.isdigit() and 1 <= int(d) <= C for d in digits):
                continue
            g = _code_index(tuple(int(d) for d in digits), C)
            alive &= table[g] == int(m[2]) * (L + 1) + int(m[3])
        cand = np.flatnonzero(alive)
        if len(cand) == 0:  # inconsistent history (should not happen): fall back to any code
            cand = np.arange(len(codes))
        if len(cand) <= 2:
            pick = int(cand[0])
        else:
            sub = table[:, cand].astype(np.int64)
            k = (L + 1) ** 2
            flat = (sub + np.arange(len(codes))[:, None] * k).ravel()
            worst = np.bincount(flat, minlength=len(codes) * k).reshape(len(codes), k).max(1)
            # rank by worst case, then prefer a code that could itself be the answer
            key = worst * 2 - alive.astype(np.int64)
            pick = int(np.argmin(key))
        return "\\boxed{" + " ".join(str(int(d)) for d in codes[pick]) + "}"


def _code_index(code: tuple[int, ...], num_colors: int) -> int:
    """Row of `code` in `_all_codes` (codes are enumerated in base-`num_colors` order)."""
    i = 0
    for d in code:
        i = i * num_colors + (d - 1)
    return i
