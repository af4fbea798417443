"""The shape of an LLM episode, one for every command that plays a model.

`gemkit eval`, `gemkit filter` and the trainers' rollouts play an env the same way: the env's
observations become a chat (`ChatHistory`), tool results come back as `tool` messages that
answer the assistant's `tool_calls`, and the tools reach the model once, either as text in
the prompt (`text`, any server) or as the request's `tools=` list (`native`, then not as
text too). A command builds its env with `chat_wrappers` and its policy with `chat_policy`
rather than its own copy of them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from gemkit.errors import GemkitError

#: the context strategies an LLM episode can run with (`chat_wrappers`)
CONTEXTS = ("none", "discard-all", "discard-75", "summary", "thinking")
#: how tools reach the model: `text` (schemas and call format in the prompt, any server) or
#: `native` (the request's `tools=` list, calls as `tool_calls`)
TOOL_FORMATS = ("text", "native")


def chat_wrappers(
    tool_format: str = "text",
    *,
    system_prompt: str | None = None,
    context: str = "none",
    max_context: int = 32_000,
    summarizer: Any = None,
    max_summary_tokens: int = 1024,
    counter: Any = None,
) -> list[Callable[[Any], Any]]:
    """The wrappers (innermost first) an env is played under by a chat model; `counter`
    counts the context strategy's tokens (the model server's own, `ServerTokenCounter`)."""
    from gemkit.wrappers import (
        ChatHistory,
        DiscardAllContext,
        DiscardContext,
        SummaryContext,
        ThinkingRetention,
    )

    if tool_format not in TOOL_FORMATS:
        raise GemkitError(
            f"tool format must be one of {', '.join(TOOL_FORMATS)}, got {tool_format!r}"
        )
    if context not in CONTEXTS:
        raise GemkitError(f"context must be one of {', '.join(CONTEXTS)}, got {context!r}")
    wrappers: list[Callable[[Any], Any]] = [
        lambda env: ChatHistory(env, system_prompt=system_prompt)
    ]
    if tool_format == "native":
        wrappers.insert(0, no_tool_text)
    m = max_context
    extra = {
        "none": None,
        "discard-all": lambda env: DiscardAllContext(env, max_context=m, counter=counter),
        "discard-75": lambda env: DiscardContext(
            env, max_context=m, fraction=0.75, counter=counter
        ),
        "summary": lambda env: SummaryContext(
            env,
            summarizer=summarizer,
            max_context=m,
            max_summary_tokens=max_summary_tokens,
            counter=counter,
        ),
        "thinking": lambda env: ThinkingRetention(env),
    }[context]
    return wrappers + ([extra] if extra else [])


def no_tool_text(env: Any) -> Any:
    """Keep the tool schemas out of the prompt text (native mode sends them as `tools=`)."""
    from gemkit.tools.wrapper import ToolEnvWrapper

    layer = env
    while layer is not None:  # envs such as toolworld bring their own tool wrapper
        if isinstance(layer, ToolEnvWrapper):
            layer.instructions = False
        layer = getattr(layer, "env", None)
    return env


def chat_policy(client: Any, tool_format: str = "text", **sampling: Any) -> Any:
    """The `LLMPolicy` a chat model plays with under `chat_wrappers(tool_format)`: in native
    mode it offers the episode's tools as `tools=` and acts with assistant messages."""
    from gemkit.llm.chat_policy import LLMPolicy

    native = tool_format == "native"
    return LLMPolicy(
        client, system_prompt=None, env_tools=native, message_actions=native, **sampling
    )


def wrapped(env: Any, wrappers: Sequence[Callable[[Any], Any]]) -> Any:
    """`env` under `wrappers`, innermost first."""
    for wrap in wrappers:
        env = wrap(env)
    return env
