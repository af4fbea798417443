"""The tool contract: a name, a description, a pydantic argument model, and `async call`."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pydantic import BaseModel

from gemkit.errors import GemkitError


class ToolError(GemkitError):
    """A tool set up wrongly (bad name, unknown tool, missing optional dependency)."""


@dataclass
class ToolResult:
    """What a tool returns: text for the model, whether it is an error, and extra metadata.

    A result with `final=True` ends the episode: `ToolEnvWrapper` hands `answer` to the
    inner env as the episode's final answer (as if the model had given it without a tool
    call), and the env grades it. Build one with `ToolResult.final_answer(answer, text)`.
    """

    text: str
    is_error: bool = False
    metadata: dict[str, Any] = field(default_factory=dict)
    final: bool = False
    answer: Any = None

    @classmethod
    def final_answer(cls, answer: Any, text: str = "Answer received.") -> ToolResult:
        """A result that ends the episode with `answer` for the inner env to grade."""
        return cls(text, final=True, answer=answer)


class Tool:
    """A typed tool. Subclasses set `name`, `description`, `Args` and implement `call`.

    `parallel_safe` says whether several calls of this tool may run at once. Tools that hold a
    per-episode state (a Python session, an MCP session) implement `reset` and `close`.
    """

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    Args: ClassVar[type[BaseModel]]
    parallel_safe: ClassVar[bool] = True

    async def call(self, args: BaseModel) -> ToolResult:
        """Run the tool on validated arguments."""
        raise NotImplementedError

    def json_schema(self) -> dict[str, Any]:
        """JSON schema of the arguments."""
        schema = self.Args.model_json_schema()
        schema.pop("title", None)
        return schema

    def openai_schema(self) -> dict[str, Any]:
        """The OpenAI function-calling schema of this tool."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.json_schema(),
            },
        }

    async def reset(self) -> None:
        """Start a new episode (drop per-episode state)."""

    async def close(self) -> None:
        """Release resources (processes, sessions, connections)."""

    def clone(self) -> Tool:
        """A fresh copy for a cloned env; tools holding live resources return an unstarted one.

        The default deep-copies the tool, which suits tools without processes, sessions or
        connections. `ToolEnvWrapper.clone` calls this for each of its tools.
        """
        return copy.deepcopy(self)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"
