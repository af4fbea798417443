"""`GemEnv`: one GEM env (`gem.make(id)`) under gemkit's contract.

GEM envs draw from the *global* `random` and `numpy.random` state (`reset(seed)` calls
`random.seed(seed)`), so two GEM envs stepped in one vector would draw from each other's
stream. `GemEnv` gives each env a private copy of that state (`gemkit.global_rng`) that GEM's
modules draw from during every call into GEM: same seed, same episode, in any vector slot,
thread or clone, and the caller's own global random state is left as it was. Making a copy
the running one costs about 0.1 µs, so a `gem:` step costs about what GEM's own step costs
(`bench/gem_family.py`).

Everything else is GEM's own code, unchanged: observation text, rules, rewards. On top of it:
`info["success"]` on the last step (`gem_success`), and an action that makes GEM raise ends
the episode with an error observation instead of an exception.
"""

from __future__ import annotations

import difflib
import importlib
import logging
from typing import Any

import numpy as np

from gemkit.core import Env, ResetResult, StepResult
from gemkit.envs.gem.rules import SUCCESS_REWARD
from gemkit.errors import GemkitError
from gemkit.global_rng import PrivateGlobalRNG, privatize


def import_gem() -> Any:
    """Import GEM's registry; a missing GEM raises with the package to install.

    `import gem` calls `logging.basicConfig(level=INFO)`, which would make every library's
    INFO logs print: the root logger is put back as it was.
    """
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        from gem.envs import registration
    except ImportError as e:
        raise GemkitError(
            f"gem: envs need GEM (the gem-llm package): pip install 'gemkit[gem]' ({e})"
        ) from e
    finally:
        root.handlers[:], root.level = handlers, level
    privatize(["gem"])
    return registration


def _import_entry_point(registration: Any, gem_id: str) -> None:
    """Import the module of a GEM id's class, so that its draws are private from the first."""
    entry_point = registration.ENV_REGISTRY[gem_id].entry_point
    if isinstance(entry_point, str):
        importlib.import_module(entry_point.split(":", 1)[0])


def gem_success(gem_id: str, obs: Any, reward: float) -> bool:
    """Whether a GEM episode that just ended was won; GEM itself does not say.

    GEM's games end a won game with "Congratulations!" (a win may score less than 1: in
    Mastermind the rewards of a game add up to 1); its single-turn tasks score 1 when right.
    """
    if gem_id.startswith("game:"):
        return isinstance(obs, str) and obs.startswith("Congratulations!")
    return reward >= SUCCESS_REWARD


def _error_text(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}"
    return text if len(text) <= 300 else text[:300] + "..."


class GemEnv(Env):
    """A GEM env by its GEM id (`game:Sudoku-v0-easy`), with GEM's own rules and rewards.

    `kwargs` go to GEM's constructor (they override GEM's registered ones). `gem_env` is the
    GEM object itself, for anything GEM-specific (`gem_env.get_task_suffix()`).
    """

    def __init__(self, gem_id: str, **kwargs: Any):
        registration = import_gem()
        if gem_id not in registration.ENV_REGISTRY:
            known = sorted(registration.ENV_REGISTRY)
            close = difflib.get_close_matches(gem_id, known, n=5, cutoff=0.5)
            hint = f"; closest: {', '.join(close)}" if close else ""
            raise GemkitError(f"GEM has no env {gem_id!r}{hint}")
        self.gem_id = gem_id
        self.rng = PrivateGlobalRNG()
        _import_entry_point(registration, gem_id)
        with self.rng.active():  # GEM envs draw a first game in their constructor
            self.gem_env = registration.make(gem_id, **kwargs)
        self.done = False

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> ResetResult:
        """Start an episode with GEM's `reset(seed)` under this env's own random state."""
        super().reset(seed=seed)
        obs, info = self.rng.call(self.gem_env.reset, seed)
        self.done = False
        return obs, dict(info or {})

    def step(self, action: str) -> StepResult:
        """GEM's `step`; an exception inside GEM ends the episode with its message."""
        if self.done:
            return "The episode is over; call reset() to start a new one.", 0.0, True, False, {}
        try:
            obs, reward, terminated, truncated, info = self.rng.call(self.gem_env.step, action)
        except Exception as e:  # noqa: BLE001 - GEM raised on model input: end, never crash
            self.done = True
            error = _error_text(e)
            obs = f"The env could not apply this action ({error}); the episode is over."
            return obs, 0.0, False, True, {"error": error, "success": False}
        if terminated or truncated:
            self.done = True
            info = dict(info or {})
            info.setdefault("success", gem_success(self.gem_id, obs, float(reward)))
        elif type(info) is not dict:
            info = dict(info or {})
        return obs, float(reward), bool(terminated), bool(truncated), info

    def random_action(self, rng: np.random.Generator) -> str:
        """GEM's `sample_random_action()`, drawn from `rng` (the random policy's generator).

        GEM envs that have no sampler (Sudoku, say) get the random policy's default move.
        """
        private = PrivateGlobalRNG(int(rng.integers(2**31)))
        try:
            with private.active():
                return self.gem_env.sample_random_action()
        except NotImplementedError:
            return f"\\boxed{{{int(rng.integers(1, 101))}}}"

    def __repr__(self) -> str:
        return f"<GemEnv {self.gem_id}>"
