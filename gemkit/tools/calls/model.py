"""What parsing an action finds: the calls, the malformed call attempts, the parsed action."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

FORMATS = ("tag", "hermes", "openai", "json", "llama", "mistral", "pythonic", "fence")
DEFAULT_FORMATS = ("tag", "hermes", "openai", "json", "llama", "mistral", "pythonic")
_CLIP = 160


@dataclass
class ToolCall:
    """One well-formed call: tool name, arguments, the text it came from, and its call id.

    `args` holds the arguments validated by the tool's `Args` model. `id` is set for OpenAI
    calls; `ToolEnvWrapper` numbers the others.
    """

    name: str
    arguments: dict[str, Any]
    raw: str
    id: str | None = None
    format: str = ""
    args: BaseModel | None = field(default=None, repr=False, compare=False)


@dataclass
class MalformedCall:
    """A malformed call attempt; `message` says what was wrong and the expected format.

    `kind` is one of `json`, `unknown_tool`, `arguments`, `unclosed`, `unopened`, `format`,
    `ambiguous` (JSON that names a tool in no call format).
    """

    message: str
    raw: str
    kind: str
    name: str | None = None
    id: str | None = None
    format: str = ""


@dataclass
class ParsedAction:
    """The calls and errors of one action in order, or its final answer when it has neither."""

    items: list[ToolCall | MalformedCall]
    answer: str | None

    @property
    def calls(self) -> list[ToolCall]:
        """The well-formed calls."""
        return [i for i in self.items if isinstance(i, ToolCall)]

    @property
    def errors(self) -> list[MalformedCall]:
        """The malformed call attempts."""
        return [i for i in self.items if isinstance(i, MalformedCall)]

    @property
    def has_calls(self) -> bool:
        """True when the action attempted at least one tool call (well-formed or not)."""
        return bool(self.items)


def _clip(text: str, limit: int = _CLIP) -> str:
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} chars)"
