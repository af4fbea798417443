"""`TextWorldEnv`: a generated TextWorld game under gemkit's contract.

TextWorld's own API is not gymnasium's: no seed on reset (a game is a file), `step` returns
`(state, score, done)` with the *cumulative* score, and the first observation opens with an
ASCII-art banner. Here `reset(seed=s)` plays the game TextWorld generates for the world's size
and seed `s` (built once, `games.build`), the reward of a step is the points it gained (the
rewards of an episode add up to TextWorld's final score), `info` carries TextWorld's `score`,
`max_score`, `moves`, `won`, `lost` and the commands it would accept, and `info["success"]`
is TextWorld's `won`. The banner is dropped; the objective and the first room are kept.

Commands go through `commands.clean_command`: a `\\boxed{...}` command is unboxed, junk is
answered with what a command looks like, and the interpreter's session commands (`quit`,
`restore`, a leading backslash) never reach it.
"""

from __future__ import annotations

import contextlib
import copy
import re
import warnings
from typing import Any

import numpy as np

from gemkit.core import Env, ResetResult, StepResult
from gemkit.envs.textworld.commands import clean_command
from gemkit.envs.textworld.games import World, build, import_textworld
from gemkit.envs.textworld.walkthroughs import remember_walkthrough

_ART = re.compile(r"^[ $|\\/_<>]*$")
# the interpreter's status line after some replies: `>   -= Bedroom =-0/2` (room, score/moves)
_STATUS = re.compile(r"\n*>[^\n]*-=[^\n]*=-\d+/\d+\s*$")
# what the interpreter asks once a game ended (its session commands never reach it here)
_AFTER_END = re.compile(r"\n*Would you like to RESTART, RESTORE.*$", re.DOTALL)
#: moves the random policy draws from: the verbs every TextWorld game understands
RANDOM_COMMANDS = (
    "look",
    "inventory",
    "go north",
    "go south",
    "go east",
    "go west",
    "take all",
    "open door",
    "examine room",
)


def without_banner(text: str) -> str:
    """TextWorld's first observation without its ASCII-art title (lines of `$|\\/_` only)."""
    lines = text.splitlines()
    while lines and _ART.match(lines[0]):
        lines.pop(0)
    return clean_feedback("\n".join(lines))


def clean_feedback(text: str) -> str:
    """The game's reply without the interpreter's status line."""
    return _AFTER_END.sub("", _STATUS.sub("", text)).strip()


class TextWorldEnv(Env):
    """A TextWorld game of `nb_rooms` rooms, `nb_objects` objects and a quest of
    `quest_length` actions, drawn by the reset seed; at most `max_steps` commands."""

    def __init__(
        self, nb_rooms: int = 5, nb_objects: int = 10, quest_length: int = 5, max_steps: int = 50
    ):
        import_textworld()
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        self.world = World(nb_rooms, nb_objects, quest_length)
        self.max_steps = max_steps
        self.game_seed: int | None = None
        self.commands: list[str] = []
        self.turn = 0
        self.score = 0
        self.done = True
        self._tw: Any = None
        self._last: Any = None

    def _start(self, seed: int) -> str:
        textworld = import_textworld()
        game = build(self.world, seed)
        self.close()
        infos = textworld.EnvInfos(
            score=True, max_score=True, won=True, lost=True, moves=True, admissible_commands=True
        )
        with warnings.catch_warnings():  # Jericho: "not fully supported" (TextWorld scores)
            warnings.simplefilter("ignore")
            self._tw = textworld.start(str(game.path), request_infos=infos)
            self._last = self._tw.reset()
        intro = without_banner(self._last.feedback)
        remember_walkthrough(intro, game.walkthrough)
        return intro

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> ResetResult:
        """Play the game TextWorld generates for this world and `seed` (drawn when None)."""
        super().reset(seed=seed)
        self.game_seed = seed if seed is not None else int(self.np_random.integers(2**31))
        obs = self._start(self.game_seed)
        self.commands, self.turn, self.score, self.done = [], 0, 0, False
        return obs, self._info()

    def _info(self) -> dict[str, Any]:
        state = self._last
        return {
            "score": self.score,
            "max_score": int(state["max_score"]),
            "moves": int(state["moves"] or 0),
            "won": bool(state["won"]),
            "lost": bool(state["lost"]),
            "admissible_commands": list(state["admissible_commands"] or []),
            "game_seed": self.game_seed,
            "turn": self.turn,
        }

    def step(self, action: str) -> StepResult:
        """Send one command; the reward is the points it gained."""
        if self.done:
            return "The game is over; call reset() to start a new one.", 0.0, True, False, {}
        self.turn += 1
        command, problem = clean_command(action)
        gained = 0
        if command is None:
            obs = problem or ""
        else:
            self.commands.append(command)
            self._last, score, game_over = self._tw.step(command)
            gained, self.score = int(score) - self.score, int(score)
            obs = clean_feedback(self._last.feedback)
        info = self._info()
        terminated = bool(info["won"] or info["lost"])
        truncated = not terminated and self.turn >= self.max_steps
        if terminated or truncated:
            self.done = True
            info["success"] = info["won"]
            if truncated:
                obs = f"{obs}\nOut of moves ({self.max_steps})."
        if problem is not None:
            info["invalid"] = problem
        return obs, float(gained), terminated, truncated, info

    def random_action(self, rng: np.random.Generator) -> str:
        """A command every TextWorld game understands (for the random policy)."""
        return RANDOM_COMMANDS[int(rng.integers(len(RANDOM_COMMANDS)))]

    def clone(self) -> TextWorldEnv:
        """The same game in the same state (TextWorld copies its interpreter)."""
        twin = copy.copy(self)
        twin._np_random = copy.deepcopy(self._np_random)
        twin.commands = list(self.commands)
        if self._tw is not None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                twin._tw = self._tw.copy()
        return twin

    def render(self) -> str | None:
        """The last text the game printed."""
        return None if self._last is None else self._last.feedback

    def close(self) -> None:
        """Stop the interpreter."""
        if self._tw is not None:
            with contextlib.suppress(Exception):
                self._tw.close()
            self._tw = None
