"""CopyWord: repeat the word shown; one word per turn, reward 1 for each correct copy."""

from __future__ import annotations

from typing import Any

import numpy as np

from gemkit.core import Env, ResetResult, StepResult
from gemkit.policy import SyncPolicy

WORDS = (
    "apple", "river", "stone", "cloud", "tiger", "bread", "lamp", "chair",
    "grape", "snow", "horse", "piano", "mint", "candle", "forest", "coin",
)  # fmt: skip


def first_word(action: str) -> str:
    """The first word of an answer, lower-cased, without surrounding punctuation or `\\boxed{}`."""
    text = action.replace("\\boxed{", " ").replace("}", " ")
    for word in text.split():
        cleaned = word.strip(".,;:!?\"'`()[]").lower()
        if cleaned:
            return cleaned
    return ""


class CopyWord(Env):
    """Each turn shows one word; the answer must start with that word.

    Reward is 1 for a correct copy and 0 otherwise (dense, per turn); the episode ends after
    `turns` turns and succeeds when every copy was right. Words come from `self.np_random`.
    """

    def __init__(self, num_words: int = 8, turns: int = 3):
        if not 2 <= num_words <= len(WORDS):
            raise ValueError(f"num_words must be in 2..{len(WORDS)}, got {num_words}")
        if turns < 1:
            raise ValueError(f"turns must be >= 1, got {turns}")
        self.words = WORDS[:num_words]
        self.turns = turns
        self.turn = 0
        self.correct = 0
        self.word = self.words[0]

    def _draw(self) -> str:
        self.word = self.words[int(self.np_random.integers(len(self.words)))]
        return self.word

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> ResetResult:
        """Start an episode; the observation shows the first word."""
        super().reset(seed=seed)
        self.turn = 0
        self.correct = 0
        return f"Copy each word I show. Word: {self._draw()}", {"turn": 0}

    def step(self, action: str) -> StepResult:
        """Score the answer against the shown word and show the next one."""
        if self.turn >= self.turns:
            return "The episode is over; call reset().", 0.0, True, False, {"success": False}
        self.turn += 1
        answer = first_word(action) if isinstance(action, str) else ""
        right = answer == self.word
        self.correct += right
        feedback = "Correct." if right else f"Wrong, the word was {self.word}."
        info: dict[str, Any] = {"turn": self.turn, "correct": right}
        if self.turn >= self.turns:
            info["success"] = self.correct == self.turns
            return feedback, float(right), True, False, info
        return f"{feedback} Word: {self._draw()}", float(right), False, False, info

    def random_action(self, rng: np.random.Generator) -> str:
        """A random word from the task's list (for random policies and vocabularies)."""
        return self.words[int(rng.integers(len(self.words)))]

    def render(self) -> str:
        """The word to copy now."""
        return self.word


class CopyWordExpert(SyncPolicy):
    """Answers with the last word of the observation."""

    def __init__(self, **_: object):
        pass

    def choose(self, observation: str) -> str:
        """Copy the shown word."""
        return observation.rsplit("Word:", 1)[-1].strip()
