"""Vector envs: many envs stepped together with autoreset and error isolation."""

from gemkit.vector.aio import AsyncVectorEnv
from gemkit.vector.base import AUTORESET_MODES, VectorEnv, VectorStep
from gemkit.vector.process import ProcessVectorEnv
from gemkit.vector.sync import SyncVectorEnv

__all__ = [
    "AUTORESET_MODES",
    "AsyncVectorEnv",
    "ProcessVectorEnv",
    "SyncVectorEnv",
    "VectorEnv",
    "VectorStep",
]
