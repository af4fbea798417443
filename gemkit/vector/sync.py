"""`SyncVectorEnv`: steps its envs one after another in the calling thread."""

from __future__ import annotations

from typing import Any

from gemkit.vector.base import SlotGen, VectorEnv, drive_sync


class SyncVectorEnv(VectorEnv):
    """A vector env that runs each slot in turn; best for CPU-trivial envs."""

    def _drive(self, gens: dict[int, SlotGen]) -> dict[int, Any]:
        envs = self.envs
        return {i: drive_sync(gen, envs[i]) for i, gen in gens.items()}
