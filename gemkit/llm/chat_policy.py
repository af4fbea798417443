"""`LLMPolicy`: a `gemkit.policy.Policy` backed by an OpenAI-compatible chat model."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from gemkit.llm.client import ChatResponse, LLMClient, LLMError, ToolCall, Usage
from gemkit.llm.sampled import VLLM_CHAT_TOKEN_FIELDS
from gemkit.llm.sampling import SamplingParams
from gemkit.llm.token_policy import logprobs_kind, sampling_record
from gemkit.policy import Observation
from gemkit.trajectory import TurnTokens, continued_turn


def hermes_tool_calls(calls: Sequence[ToolCall]) -> str:
    """Render tool calls as Hermes `<tool_call>{"name", "arguments"}</tool_call>` blocks."""
    blocks = []
    for call in calls:
        payload = {"name": call.name, "arguments": call.parsed_arguments()}
        blocks.append(f"<tool_call>\n{json.dumps(payload, ensure_ascii=False)}\n</tool_call>")
    return "\n".join(blocks)


def action_text(response: ChatResponse) -> str:
    """The action of a response: its content, followed by Hermes blocks for any tool calls."""
    content = response.content
    if not response.tool_calls:
        return content
    calls = hermes_tool_calls(response.tool_calls)
    return f"{content.rstrip()}\n{calls}" if content.strip() else calls


class LLMPolicy:
    """Acts by asking a chat model.

    A string observation is added to the policy's own running chat (system, user, assistant,
    user, ...); a list of chat messages (from `ChatHistory`) is sent as is, with the system
    prompt put first when the list has none. Tool calls come back as Hermes `<tool_call>`
    blocks, the format `ToolEnvWrapper` parses. `last_response` keeps the full response
    (reasoning, usage) for rollouts; `usage` sums the episode's tokens.

    With `message_actions=True` the action is the assistant message dict itself (content,
    `reasoning_content`, `tool_calls`), for `ChatHistory`, which keeps the reasoning in the
    history (so `ThinkingRetention` can manage it) and hands the env the text form (or the
    message itself to a `ToolEnvWrapper`, which keeps the server's call ids).

    With `env_tools=True` the native `tools=` list of each request is the one the env offers
    this episode (`info["tools"]` of its reset, which rollouts hand to `on_reset`).

    With `return_tokens=True` each request asks for the sampled token ids and log-probs
    (vLLM's `return_token_ids`, `logprobs`) and names every sampling parameter (the
    distribution is `SamplingParams` over `temperature`, `top_p`, `top_k` and `min_p` of
    `sampling`, so no server default applies), and `last_tokens` records them with the prompt
    ids the server rendered and the parameters; a turn whose rendered prompt does not extend
    the previous one (chat-template drift) is marked so. A server that answers without token
    ids (llama.cpp's chat endpoint cannot send them) is an `LLMError`, not a turn without
    tokens. `logprobs` says what the server's log-probs are (as for `TokenPolicy`; None asks
    the server once). For contexts that never drift, use `TokenPolicy`.
    """

    def __init__(
        self,
        client: LLMClient,
        system_prompt: str | None = None,
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        message_actions: bool = False,
        env_tools: bool = False,
        return_tokens: bool = False,
        logprobs: str | None = None,
        **sampling: Any,
    ):
        self.client = client
        self.system_prompt = system_prompt
        self.tools = list(tools) if tools else None
        self.message_actions = message_actions
        self.env_tools = env_tools
        self.sampling = sampling
        self.return_tokens = return_tokens
        self.logprobs = logprobs
        self.params: SamplingParams | None = None
        if return_tokens:
            names = SamplingParams.__dataclass_fields__
            extra_body = dict(sampling.get("extra_body") or {})
            given = {k: v for k, v in {**sampling, **extra_body}.items() if k in names}
            self.params = SamplingParams(**{k: v for k, v in given.items() if v is not None})
            rest = {k: v for k, v in sampling.items() if k not in names and k != "extra_body"}
            extra_body = {k: v for k, v in extra_body.items() if k not in names}
            fields = {**self.params.request_fields(), **VLLM_CHAT_TOKEN_FIELDS, **extra_body}
            self.sampling = {**rest, "extra_body": fields}
        self.messages: list[dict[str, Any]] = []
        self.last_response: ChatResponse | None = None
        self.last_tokens: TurnTokens | None = None
        self._context: list[int] | None = None
        self.usage = Usage()

    def reset(self) -> None:
        """Forget the previous episode's chat and usage."""
        self.messages = []
        self.last_response = None
        self.last_tokens = None
        self._context = None
        self.usage = Usage()

    def on_reset(self, info: Mapping[str, Any]) -> None:
        """Read what the episode's reset says: with `env_tools`, the tools to offer natively."""
        if self.env_tools:
            tools = info.get("tools")
            self.tools = list(tools) if tools else None

    def _prompt(self, observation: Observation) -> list[dict[str, Any]]:
        if isinstance(observation, str):
            if not self.messages and self.system_prompt is not None:
                self.messages.append({"role": "system", "content": self.system_prompt})
            self.messages.append({"role": "user", "content": observation})
            return self.messages
        messages = [dict(m) for m in observation]
        if self.system_prompt is not None and not any(m.get("role") == "system" for m in messages):
            messages.insert(0, {"role": "system", "content": self.system_prompt})
        return messages

    async def act(self, observation: Observation) -> Any:
        """Ask the model for the next action (a str; a message dict with `message_actions`)."""
        response = await self.client.chat(
            self._prompt(observation), tools=self.tools, **self.sampling
        )
        self.last_response = response
        self.usage = self.usage + response.usage
        await self._record_tokens(response)
        action = action_text(response)
        if isinstance(observation, str):
            # The running chat stays plain text: tool calls are kept as the Hermes text the env
            # received, so the next user turn (the tool output) is a valid follow-up.
            self.messages.append({"role": "assistant", "content": action})
        if self.message_actions:
            return response.message.to_dict()
        return action

    async def _record_tokens(self, response: ChatResponse) -> None:
        sampled = response.tokens
        if not self.return_tokens:
            self.last_tokens = None
            self._context = None
            return
        if sampled is None or sampled.prompt_ids is None:
            missing = "token ids" if sampled is None else "the prompt's token ids"
            raise LLMError(
                f"the server answered without {missing}, so the turn cannot be trained on "
                "(vLLM >= 0.10.2 sends them with return_token_ids; llama.cpp's chat endpoint "
                "cannot: use TokenPolicy with protocol='llama.cpp' over /v1/completions)"
            )
        assert self.params is not None
        kind = self.logprobs or await logprobs_kind(self.client, prompt=sampled.prompt_ids[-16:])
        self.last_tokens = continued_turn(
            self._context,
            sampled.prompt_ids,
            sampled.completion_ids,
            sampled.logprobs,
            sampled.version,
            sampling_record(self.params, kind),
        )
        self._context = sampled.prompt_ids + sampled.completion_ids
