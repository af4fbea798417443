"""LLM access: an OpenAI-compatible async client, an LLM policy, and token counters.

Names are imported on first use, so `gemkit.llm.token_counters` stays light.
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
    "LLMPolicy": "gemkit.llm.chat_policy",
    "hermes_tool_calls": "gemkit.llm.chat_policy",
    "TokenCounter": "gemkit.llm.token_counters",
    "HeuristicTokenCounter": "gemkit.llm.token_counters",
    "HFTokenCounter": "gemkit.llm.token_counters",
    "as_counter": "gemkit.llm.token_counters",
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
