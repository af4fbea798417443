"""gemkit: a Gym for agentic LLMs, verified data synthesis, and RL trainers.

`import gemkit` is cheap: names below are imported on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    "Env": "gemkit.core",
    "Wrapper": "gemkit.core",
    "ObservationWrapper": "gemkit.core",
    "ActionWrapper": "gemkit.core",
    "RewardWrapper": "gemkit.core",
    "TextSpace": "gemkit.core",
    "register": "gemkit.registry",
    "make": "gemkit.registry",
    "make_vec": "gemkit.registry",
    "spec": "gemkit.registry",
    "list_envs": "gemkit.registry",
    "EnvSpec": "gemkit.registry",
    "VectorEnv": "gemkit.vector",
    "SyncVectorEnv": "gemkit.vector",
    "AsyncVectorEnv": "gemkit.vector",
    "Policy": "gemkit.policy",
    "RandomPolicy": "gemkit.policy",
    "ScriptedPolicy": "gemkit.policy",
    "make_policy": "gemkit.policy",
    "GemkitError": "gemkit.errors",
    "UnknownEnvError": "gemkit.errors",
    "LLMClient": "gemkit.llm.client",
    "LLMPolicy": "gemkit.llm.chat_policy",
    "ChatHistory": "gemkit.wrappers.history",
    "Tool": "gemkit.tools.base",
    "ToolResult": "gemkit.tools.base",
    "ToolEnvWrapper": "gemkit.tools.wrapper",
    "tool": "gemkit.tools.function",
}

__all__ = [
    "ActionWrapper",
    "AsyncVectorEnv",
    "ChatHistory",
    "Env",
    "EnvSpec",
    "GemkitError",
    "LLMClient",
    "LLMPolicy",
    "ObservationWrapper",
    "Policy",
    "RandomPolicy",
    "RewardWrapper",
    "ScriptedPolicy",
    "SyncVectorEnv",
    "TextSpace",
    "Tool",
    "ToolEnvWrapper",
    "ToolResult",
    "UnknownEnvError",
    "VectorEnv",
    "Wrapper",
    "__version__",
    "list_envs",
    "make",
    "make_policy",
    "make_vec",
    "register",
    "spec",
    "tool",
]

if TYPE_CHECKING:  # pragma: no cover
    from gemkit.core import (
        ActionWrapper,
        Env,
        ObservationWrapper,
        RewardWrapper,
        TextSpace,
        Wrapper,
    )
    from gemkit.errors import GemkitError, UnknownEnvError
    from gemkit.llm.chat_policy import LLMPolicy
    from gemkit.llm.client import LLMClient
    from gemkit.policy import Policy, RandomPolicy, ScriptedPolicy, make_policy
    from gemkit.registry import EnvSpec, list_envs, make, make_vec, register, spec
    from gemkit.tools.base import Tool, ToolResult
    from gemkit.tools.function import tool
    from gemkit.tools.wrapper import ToolEnvWrapper
    from gemkit.vector import AsyncVectorEnv, SyncVectorEnv, VectorEnv
    from gemkit.wrappers.history import ChatHistory


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'gemkit' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return list(__all__)
