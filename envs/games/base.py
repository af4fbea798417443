"""What every game shares: rules shown at reset, `\\boxed{move}` parsing, turn limit, rewards."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from gemkit.answers import extract_boxed
from gemkit.core import Env, ResetResult, StepResult

INVALID_PENALTY = -0.1


class InvalidMove(Exception):
    """A move the game cannot apply; the message says what was wrong."""


@dataclass(slots=True)
class Outcome:
    """What one legal move did: feedback text, reward, whether the game ended and was won."""

    feedback: str
    reward: float = 0.0
    terminated: bool = False
    success: bool = False
    info: dict[str, Any] | None = None  # extra info keys (None: none; no dict per move)


class GameEnv(Env):
    """A turn-based text game: each action must hold one move as `\\boxed{move}`.

    Subclasses implement `rules`, `new_game`, `play`, `state_text`, `move_format` and
    `random_action`. Invalid moves cost `INVALID_PENALTY`, count as a turn and leave the state
    unchanged; after `max_turns` turns the episode is truncated. `rules()` and `move_format()`
    depend only on the constructor arguments (the game state goes in `state_text()`), so the
    intro text is built once per instance.
    """

    _intro: str | None = None

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

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> ResetResult:
        """Start a new game; the observation holds the rules, the move format and the state."""
        super().reset(seed=seed)
        self.turn = 0
        self.done = False
        self.new_game()
        if self._intro is None:
            self._intro = (
                f"{self.rules()}\n\nAnswer with one move per turn as {self.move_format()}. "
                f"You have {self.max_turns} turns."
            )
        return f"{self._intro}\n\n{self.state_text()}", {"turn": 0}

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
        move = extract_boxed(action) if type(action) is str else None
        if move is None:
            outcome = self._invalid(
                f"no move found: put your move inside \\boxed{{}}, e.g. {self.move_format()}"
            )
        else:
            try:
                outcome = self.play(move)
            except InvalidMove as e:
                outcome = self._invalid(f"{e} Expected format: {self.move_format()}")
        terminated = outcome.terminated
        truncated = not terminated and self.turn >= self.max_turns
        info = {"turn": self.turn, **outcome.info} if outcome.info else {"turn": self.turn}
        if terminated:
            text = outcome.feedback
        elif truncated:
            text = f"{outcome.feedback}\n\n{self.state_text()}\n\nOut of turns: the game is over."
        else:
            left = self.max_turns - self.turn
            text = f"{outcome.feedback}\n\n{self.state_text()}\n\nTurns left: {left}."
        if terminated or truncated:
            self.done = True
            info["success"] = outcome.success
        return text, float(outcome.reward), terminated, truncated, info

    def randint(self, low: int, high: int) -> int:
        """A uniform integer in [low, high] from `self.np_random` (faster than `integers`)."""
        return low + int(self.np_random.random() * (high - low + 1))

    def _invalid(self, message: str) -> Outcome:
        return Outcome(f"Invalid move: {message}", INVALID_PENALTY, info={"invalid": True})

    def render(self) -> str:
        """The current state as text."""
        return self.state_text()
