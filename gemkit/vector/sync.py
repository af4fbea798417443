"""`SyncVectorEnv`: steps its envs one after another in the calling thread."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gemkit.vector.base import VectorEnv, VectorStep, drive_sync


class SyncVectorEnv(VectorEnv):
    """A vector env that runs each slot in turn; best for CPU-trivial envs."""

    def reset(
        self,
        *,
        seed: int | Sequence[int | None] | None = None,
        options: dict[str, Any] | None = None,
        indices: Sequence[int] | None = None,
    ) -> tuple[list[str], list[dict[str, Any]]]:
        """Reset every env (or `indices`); return observations and infos for all slots."""
        plan = self._plan_reset(seed, indices)
        results = {
            i: drive_sync(self._reset_slot(i, s, options), self.envs[i]) for i, s in plan.items()
        }
        return self._collect_reset(results)

    def step(self, actions: Sequence[Any] | Mapping[int, Any]) -> VectorStep:
        """Step every env (list) or a subset (dict index → action)."""
        plan = self._plan_step(actions)
        envs, slot = self.envs, self._step_slot
        results = {i: drive_sync(slot(i, a), envs[i]) for i, a in plan.items()}
        return self._collect_step(results)

    async def areset(self, **kwargs: Any) -> tuple[list[str], list[dict[str, Any]]]:
        """Same as `reset` (the envs are run synchronously)."""
        return self.reset(**kwargs)

    async def astep(self, actions: Sequence[Any] | Mapping[int, Any]) -> VectorStep:
        """Same as `step` (the envs are run synchronously)."""
        return self.step(actions)
