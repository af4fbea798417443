"""GEM's rules in gemkit: `game:<Name>-v0-<level>-gem` plays as GEM's game of that name.

gemkit's games and GEM's games of the same name differ in rules and rewards (docs/from-gem.md
lists how). These variants reproduce GEM's (same levels, same rewards, same end of episode),
so a number published on GEM compares with one measured here, without GEM installed and with
gemkit's seeding (the secret comes from `self.np_random`). tests/byo/test_gem_rules.py plays
each against GEM's own code, move for move. GEM's rules, common to its games:

- a move is the *last* `\\boxed{...}` of the action; an action without one that parses is a
  format error: reward -0.1 and the episode ends (`terminated`; `truncated` too when it was the
  last turn);
- a move that parses but breaks a rule (out of range, repeated) gets reward 0 and costs a turn;
- the last turn ends the episode with `terminated` and `truncated` both true, and the game's
  out-of-turns reward (partial credit in GuessTheNumber).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from gemkit.core import ResetResult, StepResult
from gemkit.envs.games.base import INVALID_PENALTY, GameEnv
from gemkit.envs.games.mastermind import score

#: `gem.utils.constants.LanguageGameReward` (its format error costs what an invalid move costs here)
FORMAT_ERROR_REWARD = INVALID_PENALTY
INVALID_ACTION_REWARD = 0.0
SUCCESS_REWARD = 1.0


class GemRulesGame(GameEnv):
    """A gemkit game under GEM's rules: its own `step` and intro; the rest is `GameEnv`'s.

    A subclass implements `GameEnv`'s `rules`, `move_format`, `new_game`, `state_text` and
    `random_action`, plus `parse` (the move of an action) and `judge` (a parsed move's
    outcome) in place of `GameEnv.play`.
    """

    #: the boxed-move pattern; the last match is the move (GEM's `finditer(...)[-1]`)
    MOVE_RE: re.Pattern[str]

    def parse(self, text: str) -> Any:
        """The move in the last `\\boxed{...}`, or None (a format error)."""
        raise NotImplementedError

    def judge(self, move: Any) -> tuple[str, float, bool, bool]:
        """Apply a parsed move: `(feedback, reward, won, broke_a_rule)`."""
        raise NotImplementedError

    def out_of_turns_reward(self, move: Any, reward: float) -> float:
        """The reward of the move that used the last turn (default: the move's own)."""
        return reward

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> ResetResult:
        """A new game: the rules, the move format and the turn limit."""
        super().reset(seed=seed)
        self.turn, self.done = 0, False
        self.new_game()
        intro = (
            f"{self.rules()}\n\nAnswer with one move per turn as {self.move_format()} "
            f"(GEM's rules: an answer without a move ends the game). "
            f"You have {self.max_turns} turns."
        )
        return intro, {"turn": 0}

    def step(self, action: str) -> StepResult:
        """One move under GEM's rules."""
        if self.done:
            return "The game is over; call reset() to start a new one.", 0.0, True, False, {}
        self.turn += 1
        move = self.parse(action) if isinstance(action, str) else None
        if move is None:
            self.done = True
            text = (
                f"Invalid move: no move found at turn {self.turn}: put your move inside "
                f"\\boxed{{}}, e.g. {self.move_format()}. The game is over."
            )
            invalid = {"turn": self.turn, "invalid": True, "success": False}
            return text, FORMAT_ERROR_REWARD, True, self.turn == self.max_turns, invalid
        feedback, reward, won, broke = self.judge(move)
        info: dict[str, Any] = {"turn": self.turn}
        if broke:
            info["invalid"] = True
            feedback = f"Invalid move: {feedback} Expected format: {self.move_format()}"
        if won:
            self.done = True
            return feedback, reward, True, False, {**info, "success": True}
        if self.turn >= self.max_turns:
            self.done = True
            reward = self.out_of_turns_reward(move, reward)
            text = f"{feedback}\n\nYou have reached the maximum number of turns."
            return text, reward, True, True, {**info, "success": False}
        return f"{feedback}\n\n{self.state_text()}", reward, False, False, info


class GuessTheNumberGem(GemRulesGame):
    """GEM's GuessTheNumber: a boxed guess in [low, high]; partial credit when out of turns.

    A guess out of range or repeated scores 0 (and costs a turn); `\\boxed{0}` is a format
    error, as in GEM. Out of turns, the last guess scores `1 - |guess - target| / (high - low)`
    when in range.
    """

    MOVE_RE = re.compile(r"\\boxed{(\d+)}")

    def __init__(self, low: int = 1, high: int = 10, max_turns: int = 4):
        super().__init__(max_turns)
        if low >= high:
            raise ValueError(f"low must be below high, got {low}..{high}")
        self.low, self.high = low, high
        self.target = low
        self.guesses: list[int] = []

    def rules(self) -> str:
        """Rules text."""
        return (
            f"Guess the number between {self.low} and {self.high} (inclusive) within "
            f"{self.max_turns} turns; after each guess you hear whether the target is higher "
            "or lower."
        )

    def move_format(self) -> str:
        """A boxed integer."""
        return "\\boxed{" + str((self.low + self.high) // 2) + "}"

    def new_game(self) -> None:
        """Draw the target."""
        self.target = int(self.np_random.integers(self.low, self.high + 1))
        self.guesses = []

    def parse(self, text: str) -> int | None:
        """The last boxed integer; 0 (falsy in GEM's check) is a format error too."""
        matches = list(self.MOVE_RE.finditer(text))
        if not matches:
            return None
        try:
            return int(matches[-1].group(1)) or None
        except ValueError:  # beyond Python's int() digit limit: GEM's `try` gives None too
            return None

    def judge(self, move: int) -> tuple[str, float, bool, bool]:
        """Compare the guess with the target."""
        if not self.low <= move <= self.high:
            return f"{move} is outside {self.low}..{self.high}.", INVALID_ACTION_REWARD, False, True
        if move in self.guesses:
            return f"{move} was guessed before.", INVALID_ACTION_REWARD, False, True
        self.guesses.append(move)
        if move == self.target:
            return f"Correct! The number was {self.target}.", SUCCESS_REWARD, True, False
        hint = "lower" if move > self.target else "higher"
        return f"The target number is {hint} than {move}.", 0.0, False, False

    def out_of_turns_reward(self, move: int, reward: float) -> float:
        """Partial credit: how close the last (in-range) guess came."""
        if not self.low <= move <= self.high:
            return INVALID_ACTION_REWARD
        return 1 - abs(move - self.target) / (self.high - self.low)

    def state_text(self) -> str:
        """Guesses so far."""
        return f"Your guesses so far: {', '.join(map(str, self.guesses)) or 'none'}."

    def random_action(self, rng: np.random.Generator) -> str:
        """A random guess in range."""
        return f"\\boxed{{{int(rng.integers(self.low, self.high + 1))}}}"


class MastermindGem(GemRulesGame):
    """GEM's Mastermind: digits 1..`num_numbers`, no repeats in the code; dense rewards.

    Each guess that raises the best count of black pegs so far scores the rise divided by the
    code length (so a game's rewards add up to 1 when it is won); a guess of the wrong
    length, with digits out of range, or repeated, scores 0 and costs a turn.
    """

    MOVE_RE = re.compile(r"\\boxed{(\d+(?:\s+\d+)*)}")

    def __init__(self, code_length: int = 2, num_numbers: int = 6, max_turns: int = 10):
        super().__init__(max_turns)
        if not 1 <= code_length <= num_numbers:
            raise ValueError(f"code_length must be in 1..num_numbers, got {code_length}")
        self.code_length, self.num_numbers = code_length, num_numbers
        self.code: list[int] = []
        self.guesses: set[tuple[int, ...]] = set()
        self.history: list[str] = []
        self.milestone = 0

    def rules(self) -> str:
        """Rules text."""
        return (
            f"Guess the secret code of {self.code_length} different digits from 1 to "
            f"{self.num_numbers} within {self.max_turns} turns. Each guess gets black pegs "
            "(right digit, right place) and white pegs (right digit, wrong place)."
        )

    def move_format(self) -> str:
        """Boxed digits separated by spaces."""
        return "\\boxed{" + " ".join(str(d + 1) for d in range(self.code_length)) + "}"

    def new_game(self) -> None:
        """Draw a code without repeated digits."""
        digits = self.np_random.permutation(self.num_numbers)[: self.code_length] + 1
        self.code = [int(d) for d in digits]
        self.guesses, self.history, self.milestone = set(), [], 0

    def parse(self, text: str) -> list[int] | None:
        """The digits of the last boxed guess."""
        matches = list(self.MOVE_RE.finditer(text))
        if not matches:
            return None
        try:
            return [int(x) for x in matches[-1].group(1).split()]
        except ValueError:  # a number beyond Python's int() digit limit
            return None

    def judge(self, move: list[int]) -> tuple[str, float, bool, bool]:
        """Score the guess."""
        if len(move) != self.code_length:
            return (
                f"The code has {self.code_length} digits, not {len(move)}.",
                INVALID_ACTION_REWARD,
                False,
                True,
            )
        if any(not 1 <= d <= self.num_numbers for d in move):
            return f"Digits must be 1 to {self.num_numbers}.", INVALID_ACTION_REWARD, False, True
        if tuple(move) in self.guesses:
            return f"{move} was guessed before.", INVALID_ACTION_REWARD, False, True
        self.guesses.add(tuple(move))
        black, white = score(tuple(move), tuple(self.code))
        reward = 0.0
        if black > self.milestone:
            reward, self.milestone = (black - self.milestone) / self.code_length, black
        self.history.append(f"{' '.join(map(str, move))}: {black} black, {white} white")
        if black == self.code_length:
            return f"Correct! The code was {' '.join(map(str, self.code))}.", reward, True, False
        return f"{move} gets {black} black peg(s) and {white} white peg(s).", reward, False, False

    def state_text(self) -> str:
        """Guesses so far with their pegs."""
        return "Guesses so far: " + ("; ".join(self.history) or "none") + "."

    def random_action(self, rng: np.random.Generator) -> str:
        """A random code of distinct digits."""
        digits = rng.permutation(self.num_numbers)[: self.code_length] + 1
        return "\\boxed{" + " ".join(str(int(d)) for d in digits) + "}"
