"""What every game shares: rules shown at reset, `\\boxed{move}` parsing, turn limit, rewards."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gemkit.core import Env, ResetResult, StepResult
from gemkit.parsing import extract_boxed

INVALID_PENALTY = -0.1


class InvalidMove(Exception):
    """A move the game cannot apply; the message says what was wrong."""


@dataclass
class Outcome:
    """What one legal move did: feedback text, reward, whether the game ended and was won."""

    feedback: str
    reward: float = 0.0
    terminated: bool = False
    success: bool = False
    info: dict[str, Any] = field(default_factory=dict)


class GameEnv(Env):
    """A turn-based text game: each action must hold one move as `\\boxed{move}`.

    Subclasses implement `rules`, `new_game`, `play`, `state_text`, `move_format` and
    `random_action`. Invalid moves cost `INVALID_PENALTY`, count as a turn and leave the state
    unchanged; after `max_turns` turns the episode is truncated.
    """

    def __init__(self, max_turns: int = 20):
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        self.max_turns = max_turns
        self.turn = 0
        self.done = False

    # -- to implement ---------------------------------------------------------------------

    def rules(self) -> str:
        """The rules and goal, shown at reset."""
        raise NotImplementedError

    def move_format(self) -> str:
        """One line describing a well-formed move, e.g. `\\boxed{42}`."""
        raise NotImplementedError

    def new_game(self) -> None:
        """Set up a new game using `self.np_random` only."""
        raise NotImplementedError

    def play(self, move: str) -> Outcome:
        """Apply the content of `\\boxed{...}`; raise `InvalidMove` if it cannot be applied."""
        raise NotImplementedError

    def state_text(self) -> str:
        """The current state as the player sees it (board, guesses so far, ...)."""
        raise NotImplementedError

    def random_action(self, rng: np.random.Generator) -> str:
        """A well-formed random move (for the random policy)."""
        raise NotImplementedError

    # -- shared machinery -----------------------------------------------------------------

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> ResetResult:
        """Start a new game; the observation holds the rules, the move format and the state."""
        super().reset(seed=seed)
        self.turn = 0
        self.done = False
        self.new_game()
        obs = (
            f"{self.rules()}\n\nAnswer with one move per turn as {self.move_format()}. "
            f"You have {self.max_turns} turns.\n\n{self.state_text()}"
        )
        return obs, {"turn": 0}

    def step(self, action: str) -> StepResult:
        """Play the boxed move in `action`; invalid moves get a message, never an exception."""
        if self.done:
            return (
                "The game is over; call reset() to start a new one.",
                0.0,
                True,
                False,
                {"success": False, "invalid": True},
            )
        self.turn += 1
        move = extract_boxed(action) if isinstance(action, str) else None
        if move is None:
            outcome = self._invalid(
                f"no move found: put your move inside \\boxed{{}}, e.g. {self.move_format()}"
            )
        else:
            try:
                outcome = self.play(move)
            except InvalidMove as e:
                outcome = self._invalid(f"{e} Expected format: {self.move_format()}")
        truncated = not outcome.terminated and self.turn >= self.max_turns
        self.done = outcome.terminated or truncated
        info = {"turn": self.turn, **outcome.info}
        text = outcome.feedback
        if not outcome.terminated:
            text += f"\n\n{self.state_text()}"
            text += (
                "\n\nOut of turns: the game is over."
                if truncated
                else f"\n\nTurns left: {self.max_turns - self.turn}."
            )
        if self.done:
            info["success"] = outcome.success
        return text, float(outcome.reward), outcome.terminated, truncated, info

    def _invalid(self, message: str) -> Outcome:
        return Outcome(f"Invalid move: {message}", INVALID_PENALTY, info={"invalid": True})

    def render(self) -> str:
        """The current state as text."""
        return self.state_text()
