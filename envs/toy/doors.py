"""Doors: find the prize behind one of N doors; each wrong door is ruled out."""

from __future__ import annotations

import re
import string
from typing import Any

import numpy as np

from gemkit.core import Env, ResetResult, StepResult
from gemkit.policy import SyncPolicy

_TRIED = re.compile(r"\bnot ([a-z])\b")


def first_door(action: str, doors: str) -> str | None:
    """The first word of `action` that is exactly one door's name (a, b, ...), or None.

    A word must be a single door letter: `in doors` on the whole word would take "ab", or an
    empty word, as a door (substring tests on the string of names).
    """
    for word in action.lower().replace("\\boxed{", " ").replace("}", " ").split():
        name = word.strip(".,!?")
        if len(name) == 1 and name in doors:
            return name
    return None


class Doors(Env):
    """The prize is behind one of `num_doors` doors named a, b, c...; answer with a door's name.

    A right door ends the episode with reward 1; a wrong one is ruled out (reward 0) and a
    door already ruled out, or an answer that is no door, is a wasted turn. With a discount
    γ < 1 the best policy never repeats a door.
    """

    def __init__(self, num_doors: int = 4, max_turns: int = 4):
        if not 2 <= num_doors <= 26:
            raise ValueError(f"num_doors must be in 2..26, got {num_doors}")
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        self.doors = string.ascii_lowercase[:num_doors]
        self.max_turns = max_turns
        self.prize = "a"
        self.tried: list[str] = []
        self.turn = 0
        self.done = False

    def _state(self) -> str:
        ruled_out = " ".join(f"not {d}" for d in self.tried)
        return f"Doors: {' '.join(self.doors)}. {ruled_out}".rstrip()

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> ResetResult:
        """Hide the prize; the observation names the doors."""
        super().reset(seed=seed)
        self.prize = self.doors[int(self.np_random.integers(len(self.doors)))]
        self.tried, self.turn, self.done = [], 0, False
        return f"Pick a door. {self._state()}", {"turn": 0}

    def step(self, action: str) -> StepResult:
        """Open the door named by the first letter-word of the action."""
        if self.done:
            return "The episode is over; call reset().", 0.0, True, False, {"success": False}
        self.turn += 1
        door = first_door(action, self.doors) if isinstance(action, str) else None
        info: dict[str, Any] = {"turn": self.turn}
        if door == self.prize:
            self.done = True
            info["success"] = True
            return f"Yes, the prize was behind {door}.", 1.0, True, False, info
        if door is None:
            feedback = f"Answer with one door name: {', '.join(self.doors)}."
        elif door in self.tried:
            feedback = f"Door {door} was already ruled out."
        else:
            self.tried.append(door)
            feedback = f"Door {door} is empty."
        if self.turn >= self.max_turns:
            self.done = True
            info["success"] = False
            return f"{feedback} Out of turns.", 0.0, False, True, info
        return f"{feedback} {self._state()}", 0.0, False, False, info

    def random_action(self, rng: np.random.Generator) -> str:
        """A random door name."""
        return self.doors[int(rng.integers(len(self.doors)))]


class DoorsExpert(SyncPolicy):
    """Opens the first door not yet ruled out."""

    def __init__(self, num_doors: int = 4, **_: object):
        self.doors = string.ascii_lowercase[:num_doors]

    def choose(self, observation: str) -> str:
        """The first untried door."""
        tried = set(_TRIED.findall(observation))
        return next((d for d in self.doors if d not in tried), self.doors[0])
