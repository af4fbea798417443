"""`TextWorldExpressEnv`: one TextWorldExpress game under gemkit's contract.

The engine's own loop is `reset(seed, gameFold, gameName, gameParams)` then
`step(action) -> (obs, reward, done, infos)`, with `infos["score"]` in [0, 1] and
`tasksuccess` / `taskfailure`. Here the reward is the engine's (its step rewards add up to the
final score), `info` carries `score`, `moves`, `task_failure` and the engine's valid actions,
and `info["success"]` is its `tasksuccess`. Commands go through `commands.clean_command`.
The engine's gold path is the walkthrough the expert plays. `clone()` loads the same game on
another engine and replays the episode's commands.
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

#: moves the random policy draws from: verbs every TextWorldExpress game understands
RANDOM_COMMANDS = ("look around", "inventory", "move north", "move south", "move east", "move west")


def _start_engine(max_steps: int) -> Any:
    engines.need_java("twx")
    try:
        from textworld_express import TextWorldExpressEnv as Engine
    except ImportError as e:
        raise GemkitError(
            f"twx: envs need TextWorldExpress: pip install 'gemkit[twx]' ({e})"
        ) from e
    return Engine(envStepLimit=max_steps + 1)


class TextWorldExpressEnv(Env):
    """TextWorldExpress's `game` with its game parameters `params`; at most `max_steps` moves."""

    def __init__(
        self, game: str = "coin", params: str = "", fold: str = "train", max_steps: int = 50
    ):
        if fold not in ("train", "dev", "test"):
            raise ValueError(f"fold must be 'train', 'dev' or 'test', got {fold!r}")
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        self.game, self.params, self.fold, self.max_steps = game, params, fold, max_steps
        self._engine: Any = None
        self.game_seed: int | None = None
        self.commands: list[str] = []
        self.turn, self.score, self.done = 0, 0.0, True
        self._infos: dict[str, Any] = {}

    def _kind(self) -> str:
        return f"twx/{self.max_steps}"

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> ResetResult:
        """Load the game the engine generates for `seed` (drawn when None)."""
        super().reset(seed=seed)
        self.game_seed = seed if seed is not None else int(self.np_random.integers(2**31))
        if self._engine is None:
            self._engine = engines.take(self._kind(), lambda: _start_engine(self.max_steps))
        obs, self._infos = self._engine.reset(
            seed=self.game_seed,
            gameFold=self.fold,
            gameName=self.game,
            gameParams=self.params,
            generateGoldPath=True,
        )
        intro = f"{self._infos.get('taskDescription', '')}\n\n{obs}".strip()
        remember_walkthrough(intro, tuple(self._engine.getGoldActionSequence()))
        self.commands, self.turn, self.score, self.done = [], 0, 0.0, False
        return intro, self._info()

    def _info(self) -> dict[str, Any]:
        infos = self._infos
        return {
            "score": float(infos.get("score", self.score)),
            "moves": int(infos.get("numMoves", self.turn)),
            "task_failure": bool(infos.get("taskfailure", False)),
            "admissible_commands": list(infos.get("validActions", [])),
            "game_seed": self.game_seed,
            "turn": self.turn,
        }

    def step(self, action: str) -> StepResult:
        """Send one command; the reward is the engine's."""
        if self.done:
            return "The game is over; call reset() to start a new one.", 0.0, True, False, {}
        self.turn += 1
        command, problem = clean_command(action)
        reward = 0.0
        if command is None:
            obs = problem or ""
        else:
            self.commands.append(command)
            obs, reward, _, self._infos = self._engine.step(command)
            self.score = float(self._infos.get("score", self.score))
        info = self._info()
        won, lost = bool(self._infos.get("tasksuccess")), bool(self._infos.get("taskfailure"))
        terminated = won or lost
        truncated = not terminated and self.turn >= self.max_steps
        if terminated or truncated:
            self.done = True
            info["success"] = won
            if truncated:
                obs = f"{obs}\nOut of moves ({self.max_steps})."
        if problem is not None:
            info["invalid"] = problem
        return obs, float(reward), terminated, truncated, info

    def random_action(self, rng: np.random.Generator) -> str:
        """A command every TextWorldExpress game understands (for the random policy)."""
        return RANDOM_COMMANDS[int(rng.integers(len(RANDOM_COMMANDS)))]

    def clone(self) -> TextWorldExpressEnv:
        """The same game in the same state, on another engine: the episode's commands replayed."""
        twin = TextWorldExpressEnv(self.game, self.params, self.fold, self.max_steps)
        twin._np_random = copy.deepcopy(self._np_random)
        if self.game_seed is None:
            return twin
        twin.reset(seed=self.game_seed)
        twin._np_random = copy.deepcopy(self._np_random)
        for command in self.commands:
            _, _, _, twin._infos = twin._engine.step(command)
        twin.commands = list(self.commands)
        twin.turn, twin.score, twin.done = self.turn, self.score, self.done
        twin._infos = dict(self._infos)
        return twin

    def close(self) -> None:
        """Give the engine back for the next env."""
        if self._engine is not None:
            engines.give_back(self._kind(), self._engine)
            self._engine = None
