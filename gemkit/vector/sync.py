"""`SyncVectorEnv`: steps its envs one after another in the calling thread."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gemkit.vector.base import SlotGen, SlotResult, VectorEnv, drive_sync


class SyncVectorEnv(VectorEnv):
    """A vector env that runs each slot in turn; best for CPU-trivial envs."""

    def _drive(self, gens: dict[int, SlotGen]) -> dict[int, Any]:
        envs = self.envs
        return {i: drive_sync(gen, envs[i]) for i, gen in gens.items()}

    def _step_results(self, actions: Sequence[Any] | Mapping[int, Any]) -> dict[int, SlotResult]:
        envs, step = self.envs, self._step_sync
        return {i: step(i, a, envs[i]) for i, a in self._plan_step(actions).items()}
