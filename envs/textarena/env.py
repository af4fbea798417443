"""`TextArenaEnv`: one of TextArena's single-player games under gemkit's contract.

TextArena's own loop is `env.reset(num_players=1, seed)`, `env.get_observation()` (a list of
messages), `env.step(action) -> (done, info)`, and `env.close() -> (rewards, game_info)`
at the end. Here each step's observation is the game's new messages (`[GAME] ...` lines, as
TextArena's `LLMObservationWrapper` writes them, without the echo of the player's own move,
and without repeating the earlier ones: gemkit's history wrappers keep the history), the
reward is 0 until the game ends and then TextArena's reward for player 0, and `info` carries
`success` (reward 1) and TextArena's `reason`. Actions go through TextArena's
`ActionFormattingWrapper`, which adds the square brackets a move needs when they are missing,
as TextArena's default wrappers do.

TextArena seeds and draws from the global `random`: each env has a private copy of that state
(`gemkit.global_rng`), so seeded episodes are reproduced in any vector slot or clone. Its
level generators print to stdout; that output is kept out of the caller's stdout.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
import io
from collections.abc import Iterator
from typing import Any

import numpy as np

from gemkit.core import Env, ResetResult, StepResult
from gemkit.errors import GemkitError
from gemkit.global_rng import PrivateGlobalRNG, privatize

#: the message kinds a player is shown (not the echo of its own move)
_SHOWN = ("PROMPT", "GAME_MESSAGE", "GAME_ADMIN", "GAME_BOARD", "GAME_ACTION_DESCRIPTION")


def import_textarena() -> Any:
    """Import TextArena; a missing one raises with the package to install."""
    try:
        import textarena
    except ImportError as e:
        raise GemkitError(
            f"textarena: envs need TextArena: pip install 'gemkit[textarena]' ({e})"
        ) from e
    privatize(["textarena"])
    return textarena


def messages_text(messages: list[tuple[int, str, Any]], role_mapping: dict[int, str]) -> str:
    """TextArena messages as `[SENDER] text` lines, the player's own moves left out."""
    lines = []
    for sender, text, kind in messages:
        if getattr(kind, "name", str(kind)) not in _SHOWN:
            continue
        name = "GAME" if sender == -1 else role_mapping.get(sender, f"Player {sender}")
        lines.append(f"[{name}] {text}")
    return "\n".join(lines)


def _number(value: Any) -> float | None:
    """`value` as a float, or None when it is not a number."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.number):
        return None
    return float(value)


class TextArenaEnv(Env):
    """A TextArena single-player game by its TextArena id (`GuessTheNumber-v0`)."""

    def __init__(self, ta_id: str, **kwargs: Any):
        ta = import_textarena()
        from textarena.envs.registration import ENV_REGISTRY
        from textarena.wrappers import ActionFormattingWrapper

        raw = f"{ta_id}-raw"
        if raw not in ENV_REGISTRY:
            close = difflib.get_close_matches(ta_id, sorted(ENV_REGISTRY), n=5, cutoff=0.5)
            hint = f"; closest: {', '.join(close)}" if close else ""
            raise GemkitError(f"TextArena has no env {ta_id!r}{hint}")
        self.ta_id = ta_id
        self.rng = PrivateGlobalRNG()
        entry_point = ENV_REGISTRY[raw].entry_point
        if isinstance(entry_point, str):  # its module's draws are private from the first one
            importlib.import_module(entry_point.split(":", 1)[0])
        with self._calling():
            self.ta_env = ActionFormattingWrapper(ta.make(raw, **kwargs))
        self.done = False

    @contextlib.contextmanager
    def _calling(self) -> Iterator[None]:
        with self.rng.active(), contextlib.redirect_stdout(io.StringIO()):
            yield

    def _observation(self) -> str:
        _, messages = self.ta_env.get_observation()
        return messages_text(messages, self.ta_env.state.role_mapping)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> ResetResult:
        """Start a game with TextArena's `reset(num_players=1, seed)`.

        Without a seed, the game gets one drawn from `np_random`, so that, as in gymnasium,
        the episodes after a seeded reset are reproduced too.
        """
        super().reset(seed=seed)
        if seed is None:  # some games draw from unseeded sources: always hand them a seed
            seed = int(self.np_random.integers(2**31))
        with self._calling():
            self.ta_env.reset(num_players=1, seed=seed)
            obs = self._observation()
        self.done = False
        return obs, {}

    def step(self, action: str) -> StepResult:
        """Play one move; at the end, TextArena's reward and its reason."""
        if self.done:
            return "The game is over; call reset() to start a new one.", 0.0, True, False, {}
        try:
            with self._calling():
                done, step_info = self.ta_env.step(action if isinstance(action, str) else "")
                obs = self._observation()
                if done:
                    rewards, game_info = self.ta_env.close()
        except Exception as e:  # noqa: BLE001 - TextArena raised on model input: end, never crash
            self.done = True
            error = f"{type(e).__name__}: {e}"[:300]
            obs = f"The game could not apply this move ({error}); the game is over."
            return obs, 0.0, False, True, {"error": error, "success": False}
        info: dict[str, Any] = dict(step_info or {})
        if not done:
            return obs, 0.0, False, False, info
        self.done = True
        reward = _number((rewards or {}).get(0, 0.0))
        if reward is None:  # a game that reports its reason as the reward (Countdown 0.7.4)
            info["reward_error"] = f"TextArena gave no number as the reward: {rewards!r:.200}"
            reward = 0.0
        player = (game_info or {}).get(0, {})
        reason = player.get("reason")
        if reason:
            obs = f"{obs}\n[GAME] {reason}" if obs else f"[GAME] {reason}"
        info.update(success=reward >= 1.0, reason=reason, invalid=bool(player.get("invalid_move")))
        return obs, reward, True, False, info

    def random_action(self, rng: np.random.Generator) -> str:
        """A random bracketed number: most TextArena moves are `[...]` (for the random policy)."""
        return f"[{int(rng.integers(0, 10))}]"

    def __repr__(self) -> str:
        return f"<TextArenaEnv {self.ta_id}>"
