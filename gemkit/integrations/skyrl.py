"""Any gemkit env as a SkyRL-gym text env, for SkyRL's trainers.

SkyRL (`skyrl-gym`) builds an env per dataset row with `skyrl_gym.make(env_class,
env_config=..., extras=row)`, calls `init(prompt)` for the first messages, then
`step(action) -> {"observations", "reward", "done", "metadata"}` until `done`.
`GemkitTextEnv` is that for any gemkit id: the row's `env_id` and `seed` pick the env and the
episode (`env_config` may set both for every row, and `make` kwargs under `make_kwargs`, e.g.
`{"tools": ["python"]}`); the observation comes back as a user message, `done` is terminated
or truncated, and `metadata` carries the env's `info` as JSON data with both end flags.

    register_skyrl()                       # as skyrl_gym env class "gemkit"
    rows = skyrl_dataset("game:GuessTheNumber-v0-easy", 64)   # rows for SkyRL's dataset
"""

from __future__ import annotations

from typing import Any

from pydantic_core import to_jsonable_python

from gemkit.integrations.requires import MissingDependencyError
from gemkit.registry import make

try:
    from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput
except ImportError as _error:  # the class cannot exist without SkyRL-gym
    raise MissingDependencyError(
        f"gemkit.integrations.skyrl needs SkyRL-gym: pip install 'gemkit[skyrl]' ({_error})"
    ) from _error

#: the skyrl_gym env class name `register_skyrl` uses by default
ENV_CLASS = "gemkit"


def _setting(name: str, extras: dict[str, Any], env_config: Any) -> Any:
    """A row's own setting, else its `extra_info`'s, else the env config's."""
    if name in extras:
        return extras[name]
    extra_info = extras.get("extra_info")
    if isinstance(extra_info, dict) and name in extra_info:
        return extra_info[name]
    getter = getattr(env_config, "get", None)
    return getter(name) if callable(getter) else None


class GemkitTextEnv(BaseTextEnv):
    """A SkyRL-gym text env playing the gemkit env a dataset row names."""

    def __init__(self, env_config: Any = None, extras: dict[str, Any] | None = None):
        super().__init__()
        extras = dict(extras or {})
        env_id = _setting("env_id", extras, env_config)
        if not env_id:
            raise ValueError(
                "a gemkit SkyRL env needs an env id: put 'env_id' in the dataset row "
                "(skyrl_dataset writes it) or in the env config"
            )
        self.env_id = str(env_id)
        self.seed = _setting("seed", extras, env_config)
        make_kwargs = _setting("make_kwargs", extras, env_config) or {}
        self.env = make(self.env_id, **dict(make_kwargs))
        self.max_turns = int(_setting("max_turns", extras, env_config) or 1_000)

    def init(self, prompt: list[dict[str, str]]) -> tuple[list[dict[str, str]], dict[str, Any]]:
        """Reset the env; the row's prompt (a system prompt, say) then the task."""
        obs, info = self.env.reset(seed=None if self.seed is None else int(self.seed))
        messages = [m for m in (prompt or []) if m.get("role") != "user"]
        return [*messages, {"role": "user", "content": obs}], {
            "info": to_jsonable_python(info, fallback=str)
        }

    def step(self, action: str) -> BaseTextEnvStepOutput:
        """One gemkit step; the next observation as a user message until the episode ends."""
        self.turns += 1
        obs, reward, terminated, truncated, info = self.env.step(action)
        done = bool(terminated or truncated) or self.turns >= self.max_turns
        metadata = {
            "info": to_jsonable_python(info, fallback=str),
            "terminated": bool(terminated),
            "truncated": bool(truncated),
        }
        if "success" in info:
            metadata["success"] = bool(info["success"])
        return BaseTextEnvStepOutput(
            observations=[] if done else [{"role": "user", "content": obs}],
            reward=float(reward),
            done=done,
            metadata=metadata,
        )

    def close(self) -> None:
        """Close the gemkit env."""
        self.env.close()


def register_skyrl(env_class: str = ENV_CLASS) -> None:
    """Register `GemkitTextEnv` with skyrl_gym as `env_class` (again is a no-op)."""
    import skyrl_gym

    if env_class not in skyrl_gym.registry:
        skyrl_gym.register(id=env_class, entry_point="gemkit.integrations.skyrl:GemkitTextEnv")


def skyrl_dataset(
    env_id: str,
    n: int,
    *,
    seed: int = 0,
    env_class: str = ENV_CLASS,
    system_prompt: str | None = None,
) -> list[dict[str, Any]]:
    """`n` dataset rows for SkyRL, one episode each (seeds `seed` ... `seed + n - 1`).

    The prompt holds only the system prompt: the task comes from the env at `init`.
    """
    prompt = [{"role": "system", "content": system_prompt}] if system_prompt else []
    return [
        {
            "data_source": env_id,
            "prompt": prompt,
            "env_class": env_class,
            "env_id": env_id,
            "seed": seed + k,
            "extra_info": {"env_id": env_id, "seed": seed + k},
        }
        for k in range(n)
    ]
