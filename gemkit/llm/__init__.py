"""LLM access: an OpenAI-compatible async client, chat and token-id policies, token counters.

Names are imported on first use, so `gemkit.llm.tokens` stays light.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS: dict[str, str] = {
    "LLMClient": "gemkit.llm.client",
    "ChatResponse": "gemkit.llm.client",
    "Choice": "gemkit.llm.client",
    "Message": "gemkit.llm.client",
    "ToolCall": "gemkit.llm.client",
    "Usage": "gemkit.llm.client",
    "LLMError": "gemkit.llm.client",
    "LLMConfigError": "gemkit.llm.client",
    "LLMPolicy": "gemkit.llm.policy",
    "TokenPolicy": "gemkit.llm.token_policy",
    "TokenBatcher": "gemkit.llm.token_policy",
    "generate_tokens": "gemkit.llm.token_policy",
    "SampledTokens": "gemkit.llm.sampled",
    "SampledTokensError": "gemkit.llm.sampled",
    "hermes_tool_calls": "gemkit.llm.policy",
    "TokenCounter": "gemkit.llm.tokens",
    "HeuristicTokenCounter": "gemkit.llm.tokens",
    "HFTokenCounter": "gemkit.llm.tokens",
    "as_counter": "gemkit.llm.tokens",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'gemkit.llm' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
