"""Token counters for context budgets: a fast heuristic, or any Hugging Face tokenizer."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

logger = logging.getLogger(__name__)

MESSAGE_OVERHEAD = 4  # role markers and separators a chat template adds per message
_PIECE = re.compile(r"\w+|[^\w\s]", re.UNICODE)


@runtime_checkable
class TokenCounter(Protocol):
    """Counts tokens of a text and of a chat message list."""

    def count(self, text: str) -> int:
        """Tokens in `text`."""
        ...

    def count_messages(self, messages: Sequence[Mapping[str, Any]]) -> int:
        """Tokens of a whole chat, template overhead included."""
        ...


def message_text(message: Mapping[str, Any]) -> str:
    """Everything in a message the model reads: reasoning, content, tool calls."""
    parts = []
    for key in ("reasoning_content", "content"):
        value = message.get(key)
        if isinstance(value, str):
            parts.append(value)
        elif isinstance(value, list):  # OpenAI content parts
            parts.extend(p.get("text", "") for p in value if isinstance(p, Mapping))
    for call in message.get("tool_calls") or []:
        fn = call.get("function") or {}
        args = fn.get("arguments", "")
        parts.append(str(fn.get("name", "")))
        parts.append(args if isinstance(args, str) else json.dumps(args))
    return "\n".join(parts)


class HeuristicTokenCounter:
    """A fast, dependency-free estimate: each word costs one token per 4 characters, each
    punctuation mark one token. Close to BPE tokenizers on English prose and code."""

    def count(self, text: str) -> int:
        """Estimated tokens in `text`."""
        return sum((len(p) + 3) // 4 for p in _PIECE.findall(text))

    def count_messages(self, messages: Sequence[Mapping[str, Any]]) -> int:
        """Estimated tokens of a chat."""
        return sum(MESSAGE_OVERHEAD + self.count(message_text(m)) for m in messages)


class FunctionTokenCounter:
    """Adapts a plain `text -> int` function into a `TokenCounter`."""

    def __init__(self, fn: Callable[[str], int]):
        self.fn = fn

    def count(self, text: str) -> int:
        """Tokens in `text`."""
        return int(self.fn(text))

    def count_messages(self, messages: Sequence[Mapping[str, Any]]) -> int:
        """Tokens of a chat, with a fixed per-message overhead."""
        return sum(MESSAGE_OVERHEAD + self.count(message_text(m)) for m in messages)


class HFTokenCounter:
    """Exact counts from a Hugging Face tokenizer you pass in (nothing is downloaded here).

    With `chat_template=True` (default: when the tokenizer has one) a chat is counted by
    rendering it with `apply_chat_template`; otherwise per message plus a fixed overhead.
    """

    def __init__(self, tokenizer: Any, *, chat_template: bool | None = None):
        self.tokenizer = tokenizer
        if chat_template is None:
            chat_template = bool(getattr(tokenizer, "chat_template", None)) and hasattr(
                tokenizer, "apply_chat_template"
            )
        self.chat_template = chat_template

    def count(self, text: str) -> int:
        """Tokens in `text`, special tokens excluded."""
        return len(self.tokenizer.encode(text, add_special_tokens=False))

    def count_messages(self, messages: Sequence[Mapping[str, Any]]) -> int:
        """Tokens of a chat as the model's template renders it."""
        if self.chat_template:
            ids = self.tokenizer.apply_chat_template([dict(m) for m in messages], tokenize=True)
            if isinstance(ids, Mapping):  # some tokenizers return a BatchEncoding
                ids = ids["input_ids"]
            return len(ids)
        return sum(MESSAGE_OVERHEAD + self.count(message_text(m)) for m in messages)


def as_counter(counter: TokenCounter | Callable[[str], int] | None) -> TokenCounter:
    """A `TokenCounter` from a counter, a `text -> int` function, or None (the heuristic)."""
    if counter is None:
        return HeuristicTokenCounter()
    if isinstance(counter, TokenCounter):
        return counter
    if callable(counter):
        return FunctionTokenCounter(counter)
    raise TypeError(
        "counter must be a TokenCounter, a function text -> int, or None; "
        f"got {type(counter).__name__}"
    )
