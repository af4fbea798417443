"""Observation history: what an agent sees of the episode so far.

- `LastObservation`: only the newest observation (the env's own behaviour).
- `ConcatHistory`: one text with the task, then every action and observation.
- `WindowedHistory`: `ConcatHistory` cut to the task plus the newest chars or tokens.
- `ChatHistory`: a list of OpenAI chat messages; tool results (from `ToolEnvWrapper`'s
  `info["tool_results"]`) become `tool` messages paired with the assistant's `tool_calls`.

Message dicts in a history are never changed in place (edits replace them), so every
observation a rollout stored stays exactly what the policy saw.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gemkit.core import (
    ObservationWrapper,
    ResetResult,
    StepResult,
    Wrapper,
    areset_of,
    as_step_result,
    astep_of,
    inner_runs_sync,
)
from gemkit.errors import GemkitError
from gemkit.llm.token_counters import TokenCounter, as_counter

_TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.S)
OMITTED = "[... earlier history omitted ...]"


class LastObservation(ObservationWrapper):
    """The newest observation only: an identity wrapper, for symmetry in configs."""

    def observation(self, observation: str) -> str:
        """Return the observation unchanged."""
        return observation


def action_text(action: str | Mapping[str, Any]) -> str:
    """The text an env receives for an action: the string, or an assistant message rendered
    as its content followed by Hermes `<tool_call>` blocks."""
    if isinstance(action, str):
        return action
    content = action.get("content") or ""
    blocks = []
    for call in action.get("tool_calls") or []:
        fn = call.get("function") or {}
        args = fn.get("arguments", {})
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except json.JSONDecodeError:
                pass
        payload = json.dumps({"name": fn.get("name", ""), "arguments": args}, ensure_ascii=False)
        blocks.append(f"<tool_call>\n{payload}\n</tool_call>")
    return "\n".join([content.rstrip()] + blocks if content.strip() else blocks)


def parse_hermes_calls(text: str) -> list[tuple[str, str]]:
    """`(name, arguments_json)` of each `<tool_call>{json}</tool_call>` block; malformed blocks
    give `("", "{}")` so positions still line up with the tool results."""
    calls = []
    for body in _TOOL_CALL.findall(text):
        try:
            payload = json.loads(body)
        except json.JSONDecodeError:
            calls.append(("", "{}"))
            continue
        if not isinstance(payload, dict):
            calls.append(("", "{}"))
            continue
        args = payload.get("arguments", payload.get("parameters", {}))
        calls.append(
            (str(payload.get("name", "")), args if isinstance(args, str) else json.dumps(args))
        )
    return calls


def assistant_turn(
    action: str | Mapping[str, Any],
    results: Sequence[Mapping[str, Any]],
    parsed_calls: Sequence[Mapping[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """The assistant message with `tool_calls` plus one `tool` message per result.

    Call ids come from the results (the tool wrapper assigns them), so every tool message
    answers a call of the message right before it. Arguments come from the tool wrapper's
    `parsed_calls` when given (any call format), else from the action's Hermes blocks. A
    malformed call's arguments are `{"unparsed": <the text the model wrote>}`: a record of
    what it wrote, and still JSON, which servers require of arguments (llama.cpp answers 500
    to a chat holding other text there; vLLM renders it as `{}`).
    """
    if isinstance(action, str):
        text, calls, extra = action, parse_hermes_calls(action), {}
    else:
        text = action.get("content") or ""
        native = action.get("tool_calls") or []
        calls = [
            (
                str((c.get("function") or {}).get("name", "")),
                _args_json((c.get("function") or {}).get("arguments", {})),
            )
            for c in native
        ] or parse_hermes_calls(text)
        extra = {k: v for k, v in action.items() if k not in ("role", "content", "tool_calls")}
    if parsed_calls and len(parsed_calls) == len(results):
        calls = [(str(p.get("name") or ""), _parsed_args(p)) for p in parsed_calls]
    content = _without_calls(text, parsed_calls or ())
    tool_calls = []
    for i, result in enumerate(results):
        name, args = calls[i] if i < len(calls) else (str(result.get("name", "")), "{}")
        tool_calls.append(
            {
                "id": str(result["tool_call_id"]),
                "type": "function",
                "function": {"name": str(result.get("name") or name), "arguments": args},
            }
        )
    assistant = {"role": "assistant", "content": content, **extra, "tool_calls": tool_calls}
    tools = [
        {
            "role": "tool",
            "tool_call_id": str(r["tool_call_id"]),
            "name": str(r.get("name", "")),
            "content": str(r.get("content", "")),
        }
        for r in results
    ]
    return [assistant, *tools]


def _without_calls(text: str, parsed_calls: Sequence[Mapping[str, Any]]) -> str | None:
    """The message text around its calls (in any format the tool wrapper parsed), or None."""
    text = _TOOL_CALL.sub("", text)
    for p in parsed_calls:
        raw = p.get("raw")
        if isinstance(raw, str) and raw:
            text = text.replace(raw, "", 1)
    return text.strip() or None


def _args_json(args: Any) -> str:
    return args if isinstance(args, str) else json.dumps(args)


def _parsed_args(call: Mapping[str, Any]) -> str:
    """A parsed call's arguments as JSON text; a malformed call's are what the model wrote."""
    if call.get("arguments") is not None:
        return _args_json(call["arguments"])
    raw = call.get("raw")
    if not isinstance(raw, str):
        return "{}"
    if call.get("format") == "openai":  # raw is the whole native call: keep its arguments
        try:
            raw = json.loads(raw)["function"]["arguments"]
        except (json.JSONDecodeError, KeyError, TypeError):
            pass
    return json.dumps({"unparsed": raw}, ensure_ascii=False)


class _History(Wrapper):
    """What the history wrappers share: reset starts a history, each step extends it.

    A subclass says how (`_start(obs)`, `_extend(action, obs, info)`) and what text the env
    receives for an action (`_env_action`, the action itself by default).
    """

    def _start(self, obs: str) -> Any:
        raise NotImplementedError

    def _extend(self, action: Any, obs: str, info: Mapping[str, Any]) -> Any:
        raise NotImplementedError

    def _env_action(self, action: Any) -> Any:
        return action

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> ResetResult:
        """Reset the env; the observation is the history's start (the task)."""
        obs, info = self.env.reset(seed=seed, options=options)
        return self._start(obs), info

    async def areset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> ResetResult:
        """Async twin of `reset`."""
        obs, info = await areset_of(self.env, seed=seed, options=options)
        return self._start(obs), info

    def step(self, action: Any) -> StepResult:
        """Step the env; the observation is the history so far."""
        step = as_step_result(self.env.step(self._env_action(action)))
        obs, reward, terminated, truncated, info = step
        return self._extend(action, obs, info), reward, terminated, truncated, info

    async def astep(self, action: Any) -> StepResult:
        """Async twin of `step`."""
        obs, reward, terminated, truncated, info = await astep_of(
            self.env, self._env_action(action)
        )
        return self._extend(action, obs, info), reward, terminated, truncated, info

    def runs_sync(self, method: str | None = None) -> bool:
        """Pure bookkeeping: as sync as the env it wraps."""
        return inner_runs_sync(self.env, method)


class ChatHistory(_History):
    """Observation = the whole episode as OpenAI chat messages.

    `[system]` (optional), `user` (the first observation: the task), then for each step the
    assistant's action and either `tool` messages (when `info["tool_results"]` is present) or a
    `user` message with the new observation. Actions may be strings or assistant message dicts
    (their `reasoning_content` is kept in the history; the env receives `action_text`).
    Context wrappers edit `messages` through this wrapper.
    """

    def __init__(self, env: Any, system_prompt: str | None = None):
        super().__init__(env)
        self.system_prompt = system_prompt
        self.messages: list[dict[str, Any]] = []
        self.task_index = 0

    def _start(self, obs: str) -> list[dict[str, Any]]:
        self.messages = (
            []
            if self.system_prompt is None
            else [{"role": "system", "content": self.system_prompt}]
        )
        self.task_index = len(self.messages)
        self.messages.append({"role": "user", "content": obs})
        return list(self.messages)

    def _extend(
        self, action: str | Mapping[str, Any], obs: str, info: Mapping[str, Any]
    ) -> list[dict[str, Any]]:
        results = info.get("tool_results")
        if results:
            self.messages.extend(assistant_turn(action, results, info.get("parsed_calls")))
        else:
            if isinstance(action, str):
                assistant: dict[str, Any] = {"role": "assistant", "content": action}
            else:
                assistant = {k: v for k, v in action.items() if k != "tool_calls"}
                assistant["role"] = "assistant"
                assistant["content"] = action_text(action)
            self.messages.append(assistant)
            self.messages.append({"role": "user", "content": obs})
        return list(self.messages)

    def _env_action(self, action: str | Mapping[str, Any]) -> str | Mapping[str, Any]:
        # a tool wrapper reads native tool calls (with their server ids) from the message
        if not isinstance(action, str) and getattr(self.env, "accepts_message_actions", False):
            return action
        return action_text(action)


class ConcatHistory(_History):
    """Observation = one text: the task, then each action and observation in order.

    `action_template` and `observation_template` format each entry (`{action}`,
    `{observation}`); entries are joined as they are, so templates carry their separators.
    """

    def __init__(
        self,
        env: Any,
        *,
        action_template: str = "\n\nAction: {action}",
        observation_template: str = "\n\nObservation: {observation}",
    ):
        super().__init__(env)
        self.action_template = action_template
        self.observation_template = observation_template
        self.parts: list[str] = []

    def history_text(self) -> str:
        """The observation text for the parts so far."""
        return "".join(self.parts)

    def _start(self, obs: str) -> str:
        self.parts = [obs]
        return self.history_text()

    def _extend(self, action: str, obs: str, info: Mapping[str, Any]) -> str:
        self.parts.append(self.action_template.format(action=action))
        self.parts.append(self.observation_template.format(observation=obs))
        return self.history_text()


class WindowedHistory(ConcatHistory):
    """`ConcatHistory` cut to the task plus the newest entries within `max_chars` characters
    or `max_tokens` tokens (counted by `counter`, default the heuristic counter).

    The task is always kept whole; dropped entries are marked by `omitted_marker`. Entries are
    kept whole where they fit; the newest one is cut from its start when it alone is too long.
    """

    def __init__(
        self,
        env: Any,
        *,
        max_chars: int | None = None,
        max_tokens: int | None = None,
        counter: TokenCounter | Callable[[str], int] | None = None,
        omitted_marker: str = "\n\n" + OMITTED,
        **templates: str,
    ):
        super().__init__(env, **templates)
        if (max_chars is None) == (max_tokens is None):
            raise GemkitError("WindowedHistory needs exactly one of max_chars= or max_tokens=")
        limit = max_chars if max_chars is not None else max_tokens
        if not isinstance(limit, int) or limit <= 0:
            raise GemkitError(f"the window must be a positive int, got {limit!r}")
        self.max_chars = max_chars
        self.max_tokens = max_tokens
        self.counter = as_counter(counter)
        self.omitted_marker = omitted_marker

    def _size(self, text: str) -> int:
        return len(text) if self.max_chars is not None else self.counter.count(text)

    def history_text(self) -> str:
        """The task, then the newest entries that fit the window."""
        limit = self.max_chars if self.max_chars is not None else self.max_tokens
        assert limit is not None
        task, entries = self.parts[0], self.parts[1:]
        if self._size("".join(entries)) <= limit:
            return task + "".join(entries)
        budget = limit - self._size(self.omitted_marker)
        kept: list[str] = []
        for entry in reversed(entries):
            if self._size("".join([entry, *kept])) > budget:
                break
            kept.insert(0, entry)
        if not kept and entries and budget > 0:
            kept = [self._tail(entries[-1], budget)]
        return task + self.omitted_marker + "".join(kept)

    def _tail(self, text: str, budget: int) -> str:
        """The longest suffix of `text` within `budget` (binary search: counters are monotone)."""
        lo, hi = 0, len(text)
        while lo < hi:
            mid = (lo + hi) // 2
            if self._size(text[mid:]) <= budget:
                hi = mid
            else:
                lo = mid + 1
        return text[lo:]
