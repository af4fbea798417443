"""`SkyRLEnv`: a SkyRL-gym text env over dataset rows, under gemkit's contract.

SkyRL-gym's loop: `env = skyrl_gym.make(env_class, env_config=..., extras=row)`, then
`init(row["prompt"]) -> (messages, metadata)`, then `step(action) -> {"observations",
"reward", "done", "metadata"}`. Here `reset(seed)` builds the env of row `seed` (modulo the
number of rows; drawn when None) and returns the last message of `init` (earlier ones are in
`info["messages"]`); a step's observation is the text of the messages SkyRL returns, `done`
is `terminated`, and `info` carries SkyRL's `metadata` with `success` (a positive reward on the
last step, unless the metadata says otherwise). An exception inside the SkyRL env ends the
episode with its message, as for GEM's.
"""

from __future__ import annotations

from typing import Any

from gemkit.core import Env, ResetResult, StepResult
from gemkit.errors import GemkitError


def _text(messages: Any) -> str:
    if isinstance(messages, str):
        return messages
    return "\n".join(str(m.get("content", "")) for m in messages or [] if isinstance(m, dict))


class SkyRLEnv(Env):
    """SkyRL-gym's `env_class`, one episode per dataset row."""

    def __init__(
        self,
        env_class: str | None = None,
        rows: list[dict[str, Any]] | None = None,
        env_config: dict[str, Any] | None = None,
    ):
        if not env_class or not rows:
            raise GemkitError(
                "skyrl:Env-v0 needs a SkyRL-gym env class and dataset rows: gemkit.make("
                "'skyrl:Env-v0', env_class='gsm8k', rows=[{'prompt': [...], 'reward_spec': ...}])"
            )
        try:
            import skyrl_gym
        except ImportError as e:
            raise GemkitError(
                f"skyrl: envs need SkyRL-gym: pip install 'gemkit[skyrl]' ({e})"
            ) from e
        self._skyrl = skyrl_gym
        self.env_class, self.rows, self.env_config = env_class, list(rows), dict(env_config or {})
        self._env: Any = None
        self.row: int | None = None
        self.done = True

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> ResetResult:
        """Build the env of row `seed` and open it with the row's prompt."""
        super().reset(seed=seed)
        pick = seed if seed is not None else int(self.np_random.integers(2**31))
        self.row = pick % len(self.rows)
        row = self.rows[self.row]
        self.close()
        self._env = self._skyrl.make(self.env_class, env_config=self.env_config, extras=row)
        messages, metadata = self._env.init(row.get("prompt") or [])
        self.done = False
        last = messages[-1] if messages else {}
        return _text([last]), {"messages": list(messages), "metadata": metadata, "row": self.row}

    def step(self, action: str) -> StepResult:
        """SkyRL's `step`; its observations' text is the next observation."""
        if self.done:
            return "The episode is over; call reset() to start a new one.", 0.0, True, False, {}
        try:
            out = self._env.step(action if isinstance(action, str) else str(action))
        except Exception as e:  # noqa: BLE001 - the SkyRL env raised on model input: end, never crash
            self.done = True
            error = f"{type(e).__name__}: {e}"[:300]
            return (
                f"The env could not apply this action ({error}).",
                0.0,
                False,
                True,
                {
                    "error": error,
                    "success": False,
                },
            )
        reward, done = float(out.get("reward") or 0.0), bool(out.get("done"))
        info: dict[str, Any] = {"metadata": out.get("metadata") or {}}
        if done:
            self.done = True
            info["success"] = bool(info["metadata"].get("success", reward > 0))
        return _text(out.get("observations")), reward, done, False, info

    def close(self) -> None:
        """Close the SkyRL env."""
        if self._env is not None:
            self._env.close()
            self._env = None
