"""Observation-history and context-management wrappers."""

from gemkit.wrappers.context import (
    BudgetContext,
    ContextWrapper,
    DiscardAllContext,
    DiscardContext,
    SummaryContext,
    ThinkingRetention,
    tool_pairing_errors,
)
from gemkit.wrappers.history import (
    ChatHistory,
    ConcatHistory,
    LastObservation,
    WindowedHistory,
)

__all__ = [
    "BudgetContext",
    "ChatHistory",
    "ConcatHistory",
    "ContextWrapper",
    "DiscardAllContext",
    "DiscardContext",
    "LastObservation",
    "SummaryContext",
    "ThinkingRetention",
    "WindowedHistory",
    "tool_pairing_errors",
]
