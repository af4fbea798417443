"""Context management over a `ChatHistory`: keep what the model sees within its window.

Triggered when the chat passes `trigger * max_context` tokens (default 0.8):

- `SummaryContext`: a summariser (LLM client, policy, or function) condenses the trajectory;
  the episode continues from the task plus the summary.
- `DiscardContext(fraction=0.75)`: drop the oldest 75% of tool-call turns.
- `DiscardAllContext`: drop every tool-call turn but the newest.

Always on:

- `ThinkingRetention`: reasoning of earlier assistant turns is kept while only tool results
  follow it, and dropped once a new user message arrives.

Each edit is appended to `info["context_edits"]` as `{strategy, step, removed_messages
(indices into the list before the edit), tokens_before, tokens_after, ...}`; a summary made by
a model adds the call's `usage` (so rollouts count it with the policy's tokens) and whether
its reply was cut at its own token budget (`summary_truncated`). When the chat is over budget
and a strategy cannot bring it back (nothing it may drop, or still over after its edit), a
record goes to `info["context_warnings"]` and the first one of a wrapper is logged: a limit
is never passed silently. A tool call is never split from its results. Edits apply to the `ChatHistory` underneath, so wrappers stack:
`DiscardContext(ThinkingRetention(ChatHistory(ToolEnvWrapper(env))), max_context=32768)`.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gemkit.core import (
    Wrapper,
    areset_of,
    as_step_result,
    astep_of,
    inner_runs_sync,
)
from gemkit.errors import GemkitError
from gemkit.llm.token_counters import TokenCounter, as_counter
from gemkit.wrappers.history import ChatHistory

log = logging.getLogger(__name__)

# the observation is the chat's message list (the declared `str` of a Wrapper's does not fit)
ChatReset = tuple[Any, dict[str, Any]]
ChatStep = tuple[Any, float, bool, bool, dict[str, Any]]

Messages = list[dict[str, Any]]
_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.S)

SUMMARY_PROMPT = (
    "Your context window is nearly full. Write a summary that will replace the conversation "
    "so far: restate what the task needs, what you have done, every fact you found that is "
    "still useful (names, numbers, sources), and what remains to do. Do not call tools."
)
SUMMARY_TEMPLATE = "Summary of your work on this task so far:\n{summary}\n\nContinue from here."


# -- pure edits --------------------------------------------------------------------------------


def tool_turns(
    messages: Sequence[Mapping[str, Any]], *, include_plain: bool = False
) -> list[list[int]]:
    """Indices of each turn: an assistant message with `tool_calls` plus the `tool` messages
    right after it. With `include_plain`, an assistant message without tool calls plus the
    messages up to the next assistant message counts as a turn too."""
    turns: list[list[int]] = []
    i = 0
    while i < len(messages):
        m = messages[i]
        if m.get("role") == "assistant" and (m.get("tool_calls") or include_plain):
            has_calls = bool(m.get("tool_calls"))
            turn = [i]
            j = i + 1
            while j < len(messages) and messages[j].get("role") != "assistant":
                if has_calls and messages[j].get("role") != "tool":
                    break
                turn.append(j)
                j += 1
            turns.append(turn)
            i = j
        else:
            i += 1
    return turns


def discard_turns(
    messages: Sequence[Mapping[str, Any]],
    fraction: float,
    *,
    keep_last: int = 1,
    include_plain: bool = False,
) -> tuple[Messages, list[int]]:
    """Drop the oldest `fraction` of turns (at least one, never the newest `keep_last`).

    Returns the kept messages and the removed indices. Messages outside turns (system, task,
    user follow-ups) are always kept.
    """
    turns = tool_turns(messages, include_plain=include_plain)
    droppable = max(0, len(turns) - keep_last)
    k = min(droppable, max(1, math.floor(fraction * len(turns)))) if droppable else 0
    removed = sorted(i for turn in turns[:k] for i in turn)
    gone = set(removed)
    return [dict(m) for i, m in enumerate(messages) if i not in gone], removed


def strip_think(text: str) -> str:
    """`text` without `<think>...</think>` blocks (and without anything before a stray
    `</think>`, which templates that open the block in the prompt leave behind)."""
    text = _THINK_BLOCK.sub("", text)
    if "</think>" in text:
        text = text.rsplit("</think>", 1)[1]
    return text.lstrip()


def has_reasoning(message: Mapping[str, Any]) -> bool:
    """Whether an assistant message carries reasoning (`reasoning_content` or `<think>`)."""
    content = message.get("content")
    return bool(message.get("reasoning_content")) or (
        isinstance(content, str) and ("<think>" in content or "</think>" in content)
    )


def drop_old_reasoning(messages: Sequence[Mapping[str, Any]]) -> tuple[Messages, list[int]]:
    """Drop the reasoning of assistant messages that come before the last user message.

    Returns the new list (edited messages are new dicts) and the edited indices.
    """
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    out: Messages = []
    edited: list[int] = []
    for i, m in enumerate(messages):
        if i < last_user and m.get("role") == "assistant" and has_reasoning(m):
            new = {k: v for k, v in m.items() if k != "reasoning_content"}
            if isinstance(new.get("content"), str):
                text = strip_think(new["content"])
                # A call-only message had only thinking as content: back to the canonical None.
                new["content"] = None if not text and new.get("tool_calls") else text
            out.append(new)
            edited.append(i)
        else:
            out.append(dict(m))
    return out, edited


def task_index(messages: Sequence[Mapping[str, Any]]) -> int:
    """Index of the task: the first user message."""
    for i, m in enumerate(messages):
        if m.get("role") == "user":
            return i
    raise GemkitError("the chat has no user message (the task); wrap the env in ChatHistory")


def tool_pairing_errors(messages: Sequence[Mapping[str, Any]]) -> list[str]:
    """What breaks the tool-call protocol: tool messages that answer no call of the assistant
    message before them, and calls left without a result. Empty when the chat is valid."""
    errors: list[str] = []
    open_ids: list[str | None] = []
    prev_role = None
    for i, m in enumerate(messages):
        role = m.get("role")
        if role == "tool":
            if prev_role not in ("assistant", "tool") or m.get("tool_call_id") not in open_ids:
                errors.append(
                    f"message {i}: tool result {m.get('tool_call_id')!r} answers no open call"
                )
            else:
                open_ids.remove(m.get("tool_call_id"))
        else:
            if open_ids:
                errors.append(f"message {i}: calls {open_ids} have no result")
            open_ids = (
                [c.get("id") for c in m.get("tool_calls") or []] if role == "assistant" else []
            )
        prev_role = role
    if open_ids:
        errors.append(f"end of chat: calls {open_ids} have no result")
    return errors


# -- wrappers ----------------------------------------------------------------------------------


class ContextWrapper(Wrapper):
    """Base: after each reset/step, maybe edit the `ChatHistory` messages and record the edit."""

    strategy: str = "context"  # a subclass's name; an instance may change it

    def __init__(self, env: Any, *, counter: TokenCounter | Callable[[str], int] | None = None):
        super().__init__(env)
        self.counter = as_counter(counter)
        self.steps = 0
        self.edits: list[dict[str, Any]] = []
        self.warnings: list[dict[str, Any]] = []
        self._warned = False
        self._counted: tuple[Sequence[Mapping[str, Any]], int] | None = None
        self._history = _find_history(env, type(self).__name__)

    @property
    def history(self) -> ChatHistory:
        """The `ChatHistory` whose messages this wrapper edits."""
        return self._history

    def tokens(self, messages: Sequence[Mapping[str, Any]]) -> int:
        """Token count of a chat by this wrapper's counter."""
        return self.counter.count_messages(messages)

    def _count(self, messages: Sequence[Mapping[str, Any]]) -> int:
        # A step counts the same chat for the trigger, the warning and the edit record: count
        # each list once. Only the wrapper's own lists come here, fresh copies never changed.
        last = self._counted
        if last is not None and last[0] is messages:
            return last[1]
        n = self.tokens(messages)
        self._counted = (messages, n)
        return n

    def plan(self, messages: Messages) -> tuple[Messages, dict[str, Any]] | None:
        """Return `(new_messages, record fields)` to edit, or None to leave the chat alone."""
        raise NotImplementedError

    async def aplan(self, messages: Messages) -> tuple[Messages, dict[str, Any]] | None:
        """Async twin of `plan` (summaries call a model here)."""
        return self.plan(messages)

    def shortfall(self, messages: Messages, edited: bool) -> str | None:
        """Why the chat is still over this strategy's budget (None when it is not)."""
        return None

    def _warn(self, reason: str, messages: Messages, info: dict[str, Any]) -> dict[str, Any]:
        record = {
            "strategy": self.strategy,
            "step": self.steps,
            "tokens": self._count(messages),
            "reason": reason,
        }
        self.warnings.append(record)
        if not self._warned:  # once per wrapper: a long run would repeat it every step
            self._warned = True
            log.warning("context %s at step %d: %s", self.strategy, self.steps, reason)
        info = dict(info)
        info["context_warnings"] = [*info.get("context_warnings", []), record]
        return info

    def _commit(
        self,
        planned: tuple[Messages, dict[str, Any]] | None,
        before: Messages,
        info: dict[str, Any],
        *,
        check: bool = True,
    ) -> tuple[Messages, dict[str, Any]]:
        if planned is None:
            reason = self.shortfall(before, edited=False) if check else None
            return list(before), info if reason is None else self._warn(reason, before, info)
        new, fields = planned
        record = {
            "strategy": self.strategy,
            "step": self.steps,
            "tokens_before": self._count(before),
            "tokens_after": self._count(new),
            "messages_before": len(before),
            "messages_after": len(new),
            **fields,
        }
        self.history.messages = new
        self.edits.append(record)
        info = dict(info)
        info["context_edits"] = [*info.get("context_edits", []), record]
        reason = self.shortfall(new, edited=True) if check else None
        return list(new), info if reason is None else self._warn(reason, new, info)

    def _skip(self, terminated: bool, truncated: bool) -> bool:
        # No model call follows a finished episode; editing then would only cost (a summary!).
        return terminated or truncated

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> ChatReset:
        """Reset the stack; edit the first chat if it is already over budget."""
        _, info = self.env.reset(seed=seed, options=options)
        self.steps, self.edits, self.warnings = 0, [], []
        before = list(self.history.messages)
        return self._commit(self.plan(before), before, info)

    async def areset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> ChatReset:
        """Async twin of `reset`."""
        _, info = await areset_of(self.env, seed=seed, options=options)
        self.steps, self.edits, self.warnings = 0, [], []
        before = list(self.history.messages)
        return self._commit(await self.aplan(before), before, info)

    def step(self, action: Any) -> ChatStep:
        """Step the stack, then edit the chat when this strategy says so."""
        _, reward, terminated, truncated, info = as_step_result(self.env.step(action))
        self.steps += 1
        before = list(self.history.messages)
        skip = self._skip(terminated, truncated)
        planned = None if skip else self.plan(before)
        obs, info = self._commit(planned, before, info, check=not skip)
        return obs, reward, terminated, truncated, info

    async def astep(self, action: Any) -> ChatStep:
        """Async twin of `step`."""
        _, reward, terminated, truncated, info = await astep_of(self.env, action)
        self.steps += 1
        before = list(self.history.messages)
        skip = self._skip(terminated, truncated)
        planned = None if skip else await self.aplan(before)
        obs, info = self._commit(planned, before, info, check=not skip)
        return obs, reward, terminated, truncated, info

    def runs_sync(self, method: str | None = None) -> bool:
        """As sync as the env it wraps (summaries by an async model override this)."""
        return inner_runs_sync(self.env, method)


class BudgetContext(ContextWrapper):
    """Base of the strategies that fire when the chat passes `trigger * max_context` tokens."""

    def __init__(
        self,
        env: Any,
        *,
        max_context: int,
        trigger: float = 0.8,
        counter: TokenCounter | Callable[[str], int] | None = None,
    ):
        if not isinstance(max_context, int) or max_context <= 0:
            raise GemkitError(
                f"max_context must be a positive number of tokens, got {max_context!r}"
            )
        if not 0.0 < trigger <= 1.0:
            raise GemkitError(f"trigger must be a fraction in (0, 1], got {trigger!r}")
        super().__init__(env, counter=counter)
        self.max_context = max_context
        self.trigger = trigger

    @property
    def threshold(self) -> int:
        """Token count at which the strategy fires."""
        return math.floor(self.trigger * self.max_context)

    def over_budget(self, messages: Sequence[Mapping[str, Any]]) -> bool:
        """Whether the chat has reached the trigger."""
        return self._count(messages) >= self.threshold

    def shortfall(self, messages: Messages, edited: bool) -> str | None:
        """Why the chat is still over budget after this step (None when it is within)."""
        tokens = self._count(messages)
        if tokens < self.threshold:
            return None
        where = f"{tokens} tokens >= the trigger {self.threshold} ({self.trigger:g} x {self.max_context})"
        if edited:
            return f"still over budget after the {self.strategy} edit: {where}"
        return f"over budget and nothing to edit: {where}; {self.why_not(messages)}"

    def why_not(self, messages: Messages) -> str:
        """What this strategy lacked to act on an over-budget chat (for the warning)."""
        return "the strategy found nothing it may change"


class DiscardContext(BudgetContext):
    """Over budget: drop the oldest `fraction` of tool-call turns (each with all its results).

    The system prompt, the task, and the newest `keep_last` turns stay. With
    `include_plain=True`, plain assistant/user exchanges count as turns too (for envs
    without tools).
    """

    strategy = "discard"

    def __init__(
        self,
        env: Any,
        *,
        max_context: int,
        fraction: float = 0.75,
        keep_last: int = 1,
        include_plain: bool = False,
        trigger: float = 0.8,
        counter: TokenCounter | Callable[[str], int] | None = None,
    ):
        if not 0.0 < fraction <= 1.0:
            raise GemkitError(f"fraction must be in (0, 1], got {fraction!r}")
        if keep_last < 0:
            raise GemkitError(f"keep_last must be >= 0, got {keep_last!r}")
        super().__init__(env, max_context=max_context, trigger=trigger, counter=counter)
        self.fraction = fraction
        if fraction >= 1.0:
            self.strategy = "discard_all"
        self.keep_last = keep_last
        self.include_plain = include_plain

    def plan(self, messages: Messages) -> tuple[Messages, dict[str, Any]] | None:
        """Discard old turns when over budget."""
        if not self.over_budget(messages):
            return None
        new, removed = discard_turns(
            messages, self.fraction, keep_last=self.keep_last, include_plain=self.include_plain
        )
        if not removed:
            return None
        return new, {"removed_messages": removed, "fraction": self.fraction}

    def why_not(self, messages: Messages) -> str:
        """No droppable turn: say whether plain turns (which `include_plain` drops) exist."""
        turns = tool_turns(messages, include_plain=self.include_plain)
        if not self.include_plain and not turns and tool_turns(messages, include_plain=True):
            return (
                "the chat has no tool-call turn to drop, only plain turns (no tool call was "
                "made): DiscardContext(include_plain=True) drops those"
            )
        kind = "turn(s)" if self.include_plain else "tool-call turn(s)"
        return f"{len(turns)} {kind} and keep_last={self.keep_last}: none may be dropped"


class DiscardAllContext(DiscardContext):
    """Over budget: drop every tool-call turn but the newest `keep_last` (default 1)."""

    strategy = "discard_all"

    def __init__(self, env: Any, *, max_context: int, **kwargs: Any):
        super().__init__(env, max_context=max_context, fraction=1.0, **kwargs)


class ThinkingRetention(ContextWrapper):
    """Keep the reasoning of assistant turns while only tool results follow them; drop it
    (the `reasoning_content` field and `<think>` blocks) once a new user message arrives."""

    strategy = "thinking_retention"

    def plan(self, messages: Messages) -> tuple[Messages, dict[str, Any]] | None:
        """Strip reasoning that sits before the newest user message."""
        new, edited = drop_old_reasoning(messages)
        if not edited:
            return None
        return new, {"removed_messages": [], "edited_messages": edited}


Summarizer = Any  # an LLMClient (`chat`), a Policy (`act`), or `messages -> str | Awaitable[str]`


class SummaryContext(BudgetContext):
    """Over budget: summarise the trajectory; continue from `[system], task, summary`.

    `summarizer` is an `LLMClient` (asked with `prompt` appended to the chat), a policy (its
    `act` gets the same list), or a function `messages -> str` (sync or async) that gets the
    chat itself. `<think>` blocks are removed from the summary. A client's summary has its own
    token budget, `max_summary_tokens`, whatever `max_tokens` the client sends for the
    policy's short moves, bounded by the room there is: the request (chat and prompt) and its
    reply must fit in `max_context`, and the summary after the task must stay under the
    trigger, or the next step would summarise again (the budget used is the edit's
    `summary_budget`; with no room, no summary is asked for and a warning says why). A reply
    cut at that budget is kept and flagged `summary_truncated`. Calls by a client or an LLM
    policy record their `usage` in the edit.
    """

    strategy = "summary"

    def __init__(
        self,
        env: Any,
        *,
        summarizer: Summarizer,
        max_context: int,
        trigger: float = 0.8,
        prompt: str = SUMMARY_PROMPT,
        template: str = SUMMARY_TEMPLATE,
        max_summary_tokens: int = 1024,
        counter: TokenCounter | Callable[[str], int] | None = None,
    ):
        if not (hasattr(summarizer, "chat") or hasattr(summarizer, "act") or callable(summarizer)):
            raise GemkitError(
                "summarizer must be an LLMClient, a Policy, or a function messages -> str; "
                f"got {type(summarizer).__name__}"
            )
        if "{summary}" not in template:
            raise GemkitError("the summary template must contain '{summary}'")
        if not isinstance(max_summary_tokens, int) or max_summary_tokens <= 0:
            raise GemkitError(
                f"max_summary_tokens must be a positive number of tokens, got {max_summary_tokens!r}"
            )
        super().__init__(env, max_context=max_context, trigger=trigger, counter=counter)
        self.summarizer = summarizer
        self.prompt = prompt
        self.template = template
        self.max_summary_tokens = max_summary_tokens

    def _asked(self, messages: Messages) -> Messages:
        return [*messages, {"role": "user", "content": self.prompt}]

    def summary_budget(self, messages: Messages) -> int:
        """The tokens a client's summary of `messages` may take: `max_summary_tokens`, within
        the window's room left by the request and the trigger's room left by the task."""
        t = task_index(messages)
        head = [*messages[: t + 1], {"role": "user", "content": self.template.format(summary="")}]
        in_window = self.max_context - self._count(self._asked(messages))
        under_trigger = self.threshold - self.tokens(head)
        return min(self.max_summary_tokens, in_window, under_trigger)

    def _request(self, messages: Messages) -> Any:
        """The summarizer's answer: a `Summary`, or an awaitable of one."""
        s = self.summarizer
        asked = self._asked(messages)
        if hasattr(s, "chat"):
            budget = self.summary_budget(messages)
            return _client_summary(s.chat(asked, max_tokens=budget), budget)
        if hasattr(s, "act"):
            return _policy_summary(s, s.act(asked))
        return _function_summary(s(list(messages)))

    def _build(self, messages: Messages, summary: Any) -> tuple[Messages, dict[str, Any]]:
        text, extra = summary
        if not isinstance(text, str):
            raise GemkitError(f"the summarizer must return a str, got {type(text).__name__}")
        t = task_index(messages)
        head = [dict(m) for m in messages[: t + 1]]
        note = {
            "role": "user",
            "content": self.template.format(summary=strip_think(text).strip()),
        }
        new = [*head, note]
        removed = list(range(t + 1, len(messages)))
        if extra.get("summary_truncated"):
            log.warning(
                "a summary was cut at its budget of %d tokens (max_summary_tokens=%d, within "
                "the room the window leaves)",
                extra.get("summary_budget", self.max_summary_tokens),
                self.max_summary_tokens,
            )
        return new, {
            "removed_messages": removed,
            "inserted_messages": [{"index": len(head), "message": note}],
            **extra,
        }

    def _can_summarize(self, messages: Messages) -> bool:
        if not self.over_budget(messages) or len(messages) <= task_index(messages) + 1:
            return False
        return not hasattr(self.summarizer, "chat") or self.summary_budget(messages) >= 1

    def why_not(self, messages: Messages) -> str:
        """Nothing to summarise, or no room left for a summary."""
        if len(messages) <= task_index(messages) + 1:
            return (
                "only the task is left, there is nothing to summarise (the task alone is too long)"
            )
        return (
            f"no room for a summary: the request ({self._count(self._asked(messages))} tokens) "
            f"fills the window ({self.max_context}), or the task alone nears the trigger; "
            "lower the trigger or raise --max-context"
        )

    def plan(self, messages: Messages) -> tuple[Messages, dict[str, Any]] | None:
        """Summarise when over budget (an async summarizer runs on a private event loop)."""
        if not self._can_summarize(messages):
            return None
        summary = self._request(messages)
        if inspect.isawaitable(summary):
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                summary = asyncio.run(_awaited(summary))
            else:
                if inspect.iscoroutine(summary):
                    summary.close()
                raise GemkitError(
                    "SummaryContext.step() with an async summarizer inside a running event loop; "
                    "use `await env.astep(...)` there"
                )
        return self._build(messages, summary)

    async def aplan(self, messages: Messages) -> tuple[Messages, dict[str, Any]] | None:
        """Async twin of `plan`."""
        if not self._can_summarize(messages):
            return None
        summary = self._request(messages)
        if inspect.isawaitable(summary):
            summary = await summary
        return self._build(messages, summary)

    def runs_sync(self, method: str | None = None) -> bool:
        """False: a summary may await a model."""
        return False


def usage_dict(usage: Any) -> dict[str, int]:
    """The token counts of a `Usage` as a plain dict (cached tokens only when reported)."""
    out = {
        "prompt_tokens": int(getattr(usage, "prompt_tokens", 0) or 0),
        "completion_tokens": int(getattr(usage, "completion_tokens", 0) or 0),
    }
    cached = getattr(usage, "cached_tokens", None)
    if cached:
        out["cached_tokens"] = int(cached)
    return out


async def _client_summary(response: Any, budget: int) -> tuple[str, dict[str, Any]]:
    r = await response
    extra = {
        "usage": usage_dict(r.usage),
        "summary_truncated": r.finish_reason == "length",
        "summary_budget": budget,
    }
    return r.content, extra


def _policy_summary(policy: Any, action: Any) -> Any:
    def read(text: Any) -> tuple[Any, dict[str, Any]]:
        response = getattr(policy, "last_response", None)
        if response is None:
            return text, {}
        truncated = getattr(response, "finish_reason", None) == "length"
        return text, {"usage": usage_dict(response.usage), "summary_truncated": truncated}

    if inspect.isawaitable(action):

        async def later() -> tuple[Any, dict[str, Any]]:
            return read(await action)

        return later()
    return read(action)


def _function_summary(value: Any) -> Any:
    if inspect.isawaitable(value):

        async def later() -> tuple[Any, dict[str, Any]]:
            return await value, {}

        return later()
    return value, {}


async def _awaited(value: Any) -> Any:
    return await value


def _find_history(env: Any, who: str) -> ChatHistory:
    e = env
    while e is not None:
        if isinstance(e, ChatHistory):
            return e
        e = getattr(e, "env", None) if isinstance(e, Wrapper) else None
    raise GemkitError(f"{who} edits chat messages: wrap the env as {who}(ChatHistory(env), ...)")
