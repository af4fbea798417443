"""GuessTheNumber: find a hidden integer with higher/lower feedback."""

from __future__ import annotations

import re

import numpy as np

from gemkit.envs.games.base import GameEnv, InvalidMove, Outcome
from gemkit.policy import SyncPolicy

FEEDBACK_RE = re.compile(r"Your guess (-?\d+) is too (low|high)")


class GuessTheNumber(GameEnv):
    """Guess a hidden integer in [low, high]; each wrong guess is answered 'too low/high'.

    Reward 1 for the right guess and 0 for a wrong one, so with a discount γ < 1 a shorter
    game has a higher return: the optimal policy is binary search.
    """

    def __init__(self, low: int = 1, high: int = 20, max_turns: int = 8):
        super().__init__(max_turns)
        if low >= high:
            raise ValueError(f"low must be below high, got {low}..{high}")
        self.low, self.high = low, high
        self.target = low
        self.guesses: list[int] = []
        self._history = ""

    def rules(self) -> str:
        """Rules text."""
        return (
            f"I am thinking of an integer between {self.low} and {self.high} inclusive. "
            "Guess it; after each wrong guess I say whether it is too low or too high."
        )

    def move_format(self) -> str:
        """A boxed integer."""
        return (
            "\\boxed{n} with an integer n, e.g. \\boxed{" + str((self.low + self.high) // 2) + "}"
        )

    def new_game(self) -> None:
        """Draw the hidden number."""
        self.target = self.randint(self.low, self.high)
        self.guesses = []
        self._history = ""

    def play(self, move: str) -> Outcome:
        """Compare the guess with the hidden number."""
        try:
            guess = int(move)
        except ValueError:
            raise InvalidMove(f"{move[:40]!r} is not an integer.") from None
        if not self.low <= guess <= self.high:
            raise InvalidMove(f"{guess} is outside {self.low}..{self.high}.")
        self.guesses.append(guess)
        self._history = f"{self._history}, {guess}" if self._history else str(guess)
        if guess == self.target:
            return Outcome(f"Correct! The number was {self.target}.", 1.0, True, True)
        side = "low" if guess < self.target else "high"
        return Outcome(f"Your guess {guess} is too {side}.")

    def state_text(self) -> str:
        """Guesses so far."""
        if not self._history:
            return "No guesses yet."
        return f"Your guesses so far: {self._history}."

    def random_action(self, rng: np.random.Generator) -> str:
        """A random guess in range."""
        return f"\\boxed{{{int(rng.integers(self.low, self.high + 1))}}}"


class GuessTheNumberExpert(SyncPolicy):
    """Binary search on the feedback."""

    def __init__(self, low: int = 1, high: int = 20, **_: object):
        self.bounds = (low, high)
        self.reset()

    def reset(self) -> None:
        """Forget the interval."""
        self.lo, self.hi = self.bounds

    def choose(self, observation: str) -> str:
        """Narrow the interval by the last feedback and guess its middle."""
        matches = FEEDBACK_RE.findall(observation)
        if matches:
            guess, side = int(matches[-1][0]), matches[-1][1]
            if side == "low":
                self.lo = max(self.lo, guess + 1)
            else:
                self.hi = min(self.hi, guess - 1)
        return f"\\boxed{{{(self.lo + self.hi) // 2}}}"
