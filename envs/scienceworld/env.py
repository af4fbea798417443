"""`ScienceWorldTaskEnv`: one ScienceWorld task under gemkit's contract.

The engine's own loop is `load(task, variation, simplifications)`, `reset()`, then
`step(action) -> (obs, reward, done, info)` with `info["score"]` from 0 to 100 (a failed task
ends at -100). Here the reward is the engine's (the points a step gained or lost), `info`
carries `score`, `moves` and the engine's valid actions, and `info["success"]` is a score of
100. The reset seed picks a variation of the fold (`train` by default). Commands go through
`commands.clean_command`. The engine's gold path is the walkthrough the expert plays.
`clone()` loads the same variation on another engine and replays the episode's commands.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from gemkit.core import Env, ResetResult, StepResult
from gemkit.envs.textworld import engines
from gemkit.envs.textworld.commands import clean_command
from gemkit.envs.textworld.walkthroughs import remember_walkthrough
from gemkit.errors import GemkitError

RANDOM_COMMANDS = ("look around", "inventory", "open door", "wait", "focus on agent")
_FOLDS = ("train", "dev", "test")
#: (task, fold) -> the task's variations in that fold, read from the engine once
_VARIATIONS: dict[tuple[str, str], tuple[int, ...]] = {}


def _start_engine(max_steps: int) -> Any:
    engines.need_java("scienceworld")
    try:
        from scienceworld import ScienceWorldEnv
    except ImportError as e:
        raise GemkitError(
            f"scienceworld: envs need ScienceWorld: pip install 'gemkit[scienceworld]' ({e})"
        ) from e
    return ScienceWorldEnv("", envStepLimit=max_steps + 1)


class ScienceWorldTaskEnv(Env):
    """ScienceWorld's `task`, a variation of `fold` per reset seed; at most `max_steps` moves."""

    def __init__(
        self,
        task: str = "boil",
        simplification: str = "",
        fold: str = "train",
        max_steps: int = 100,
    ):
        if fold not in _FOLDS:
            raise ValueError(f"fold must be 'train', 'dev' or 'test', got {fold!r}")
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        self.task, self.simplification, self.fold, self.max_steps = (
            task,
            simplification,
            fold,
            max_steps,
        )
        self._engine: Any = None
        self.variation: int | None = None
        self.commands: list[str] = []
        self.turn, self.score, self.done = 0, 0.0, True
        self._info_raw: dict[str, Any] = {}

    def _kind(self) -> str:
        return f"scienceworld/{self.max_steps}"

    def _load(self, variation: int) -> str:
        if self._engine is None:
            self._engine = engines.take(self._kind(), lambda: _start_engine(self.max_steps))
        self._engine.load(self.task, variation, self.simplification, generateGoldPath=True)
        obs, self._info_raw = self._engine.reset()
        return f"{self._engine.get_task_description()}\n\n{obs}".strip()

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> ResetResult:
        """Load the variation the seed picks (drawn when None) and start it."""
        super().reset(seed=seed)
        variations = _VARIATIONS.get((self.task, self.fold))
        if variations is None:
            if self._engine is None:
                self._engine = engines.take(self._kind(), lambda: _start_engine(self.max_steps))
            self._engine.load(self.task, 0, self.simplification)
            variations = tuple(getattr(self._engine, f"get_variations_{self.fold}")())
            _VARIATIONS[(self.task, self.fold)] = variations
        pick = seed if seed is not None else int(self.np_random.integers(2**31))
        self.variation = int(variations[pick % len(variations)])
        intro = self._load(self.variation)
        remember_walkthrough(intro, tuple(self._engine.get_gold_action_sequence()))
        self.commands, self.turn, self.score, self.done = [], 0, 0.0, False
        return intro, self._info()

    def _info(self) -> dict[str, Any]:
        raw = self._info_raw
        return {
            "score": float(raw.get("score", self.score)),
            "moves": int(raw.get("moves", self.turn)),
            "admissible_commands": list(raw.get("valid", [])),
            "variation": self.variation,
            "turn": self.turn,
        }

    def step(self, action: str) -> StepResult:
        """Send one command; the reward is the points it gained (or lost)."""
        if self.done:
            return "The task is over; call reset() to start a new one.", 0.0, True, False, {}
        self.turn += 1
        command, problem = clean_command(action)
        reward, finished = 0.0, False
        if command is None:
            obs = problem or ""
        else:
            self.commands.append(command)
            obs, reward, finished, self._info_raw = self._engine.step(command)
            self.score = float(self._info_raw.get("score", self.score))
        info = self._info()
        terminated = bool(finished) or self.score >= 100 or self.score < 0
        truncated = not terminated and self.turn >= self.max_steps
        if terminated or truncated:
            self.done = True
            info["success"] = self.score >= 100
            if truncated:
                obs = f"{obs}\nOut of moves ({self.max_steps})."
        if problem is not None:
            info["invalid"] = problem
        return obs, float(reward), terminated, truncated, info

    def random_action(self, rng: np.random.Generator) -> str:
        """A command every ScienceWorld task understands (for the random policy)."""
        return RANDOM_COMMANDS[int(rng.integers(len(RANDOM_COMMANDS)))]

    def clone(self) -> ScienceWorldTaskEnv:
        """The same task in the same state, on another engine: the commands replayed."""
        twin = ScienceWorldTaskEnv(self.task, self.simplification, self.fold, self.max_steps)
        twin._np_random = copy.deepcopy(self._np_random)
        if self.variation is None:
            return twin
        twin.variation = self.variation
        twin._load(self.variation)
        for command in self.commands:
            _, _, _, twin._info_raw = twin._engine.step(command)
        twin.commands = list(self.commands)
        twin.turn, twin.score, twin.done = self.turn, self.score, self.done
        twin._info_raw = dict(self._info_raw)
        return twin

    def close(self) -> None:
        """Give the engine back for the next env."""
        if self._engine is not None:
            engines.give_back(self._kind(), self._engine)
            self._engine = None
