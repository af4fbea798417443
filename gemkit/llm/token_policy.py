"""`TokenPolicy`: a policy that talks to the model in token ids, so nothing is re-tokenized.

It keeps the episode's context as token ids: the first observation rendered once through the
tokenizer's chat template, then, turn after turn, the ids the server sampled followed by the
env's reply tokenized once (`gemkit.integrations.episode_tokens`). Each request sends that context as
a token-id prompt, so the model conditions on exactly the tokens it sampled before (no merges
across turn boundaries, no chat-template drift), and each turn's `last_tokens` records the
new prompt tokens, the sampled ids, their log-probs and the policy version.

Protocols:

- `"completions"`: `POST {base_url}/completions` with `prompt` a list of ids (vLLM,
  `gemkit serve model`), log-probs and ids from vLLM's fields;
- `"sglang"`: `POST {base_url}/generate` with `input_ids` and `return_logprob` (SGLang's
  native API; `base_url` without `/v1`).

A `TokenBatcher` in place of the client sends the turns of many concurrent episodes that are
ready together as one batched `/v1/completions` request.

The action handed to the env is the tokenizer's decoding of the sampled ids, so the reward
is earned by the very tokens a trainer then trains on, whatever text the server sent.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

from gemkit.errors import GemkitError
from gemkit.integrations.episode_tokens import observation_text, prompt_ids, reply_ids
from gemkit.llm.client import LLMClient, LLMError
from gemkit.llm.sampled import (
    VLLM_COMPLETION_TOKEN_FIELDS,
    SampledTokens,
    from_completion_choice,
    from_sglang,
)
from gemkit.policy import Observation
from gemkit.trajectory import TurnTokens

PROTOCOLS = ("completions", "sglang")


async def generate_tokens(
    client: LLMClient,
    context: list[int],
    *,
    protocol: str = "completions",
    max_tokens: int = 256,
    temperature: float = 1.0,
    **sampling: Any,
) -> SampledTokens:
    """Sample one completion of the token-id `context`; its ids, log-probs and version."""
    if protocol == "completions":
        body = {
            "model": client.model,
            "prompt": list(context),
            "max_tokens": max_tokens,
            "temperature": temperature,
            **VLLM_COMPLETION_TOKEN_FIELDS,
            **sampling,
        }
        data = await client.post_json("/completions", body)
        return from_completion_choice(_choices(data)[0], data)
    if protocol == "sglang":
        params = {"max_new_tokens": max_tokens, "temperature": temperature, **sampling}
        body = {"input_ids": list(context), "sampling_params": params, "return_logprob": True}
        return from_sglang(await client.post_json("/generate", body), context)
    raise GemkitError(f"protocol must be one of {PROTOCOLS}, got {protocol!r}")


class TokenBatcher:
    """Sends the token requests of many concurrent episodes as batched `/v1/completions` calls.

    vLLM and `gemkit serve model` take a list of token-id prompts in one request. Episodes
    still run on their own (each awaits only its own completion); the turns that are ready
    within `wait_s` of each other, with the same sampling parameters, share one HTTP round
    trip, which is most of a turn's cost on a small model. Pass it to `TokenPolicy` instead of
    the client.
    """

    def __init__(self, client: LLMClient, *, max_batch: int = 64, wait_s: float = 0.001):
        if max_batch < 1:
            raise GemkitError(f"max_batch must be >= 1, got {max_batch}")
        self.client = client
        self.max_batch = max_batch
        self.wait_s = wait_s
        self.requests = 0
        self._pending: dict[tuple, list[tuple[list[int], asyncio.Future]]] = {}
        self._flush: asyncio.TimerHandle | None = None
        self._sending: set[asyncio.Task] = set()  # held so that no send is garbage-collected

    async def generate(
        self, context: list[int], *, max_tokens: int, temperature: float, **sampling: Any
    ) -> SampledTokens:
        """Sample one completion of `context`, sent together with other episodes' turns."""
        loop = asyncio.get_running_loop()
        key = (max_tokens, temperature, tuple(sorted(sampling.items())))
        future: asyncio.Future = loop.create_future()
        self._pending.setdefault(key, []).append((list(context), future))
        if len(self._pending[key]) >= self.max_batch:
            self._send_all()
        elif self._flush is None:
            self._flush = loop.call_later(self.wait_s, self._send_all)
        return await future

    async def aclose(self) -> None:
        """Cancel the requests still on their way (their episodes get `CancelledError`)."""
        if self._flush is not None:
            self._flush.cancel()
            self._flush = None
        for items in self._pending.values():
            for _, future in items:
                future.cancel()
        self._pending = {}
        sending = list(self._sending)
        for task in sending:
            task.cancel()
        await asyncio.gather(*sending, return_exceptions=True)

    def _send_all(self) -> None:
        if self._flush is not None:
            self._flush.cancel()
            self._flush = None
        pending, self._pending = self._pending, {}
        for key, items in pending.items():
            for start in range(0, len(items), self.max_batch):
                task = asyncio.ensure_future(self._send(key, items[start : start + self.max_batch]))
                self._sending.add(task)
                task.add_done_callback(self._sending.discard)

    async def _send(self, key: tuple, items: list[tuple[list[int], asyncio.Future]]) -> None:
        max_tokens, temperature, sampling = key
        body = {
            "model": self.client.model,
            "prompt": [context for context, _ in items],
            "max_tokens": max_tokens,
            "temperature": temperature,
            **VLLM_COMPLETION_TOKEN_FIELDS,
            **dict(sampling),
        }
        self.requests += 1
        try:
            data = await self.client.post_json("/completions", body)
            choices = sorted(_choices(data), key=lambda c: c.get("index", 0))
            if len(choices) != len(items):
                raise LLMError(
                    f"the server answered {len(choices)} choices for {len(items)} prompts"
                )
            results = [from_completion_choice(c, data) for c in choices]
        except Exception as e:  # noqa: BLE001 - every waiting episode gets the error
            for _, future in items:
                if not future.done():
                    future.set_exception(e)
            return
        for (_, future), result in zip(items, results, strict=True):
            if not future.done():
                future.set_result(result)


def _choices(data: dict[str, Any]) -> list[Mapping[str, Any]]:
    choices = data.get("choices")
    if (
        not isinstance(choices, list)
        or not choices
        or not all(isinstance(c, Mapping) for c in choices)
    ):
        raise LLMError(f"the endpoint answered with no choices: {str(data)[:300]}")
    return choices


class TokenPolicy:
    """Acts by sampling from a model server in token ids; records every turn's tokens.

    `tokenizer` is the model's Hugging Face tokenizer (local; nothing is downloaded). `version`
    is called for the policy version of a sample when the server does not report one (vLLM
    does not; `gemkit serve model` and SGLang do). Observations are text, or chat messages of
    which the newest one is the env's reply; the policy keeps its own token context, so use it
    on an env (or a `ToolEnvWrapper`) rather than under a wrapper that edits the history.
    """

    def __init__(
        self,
        client: LLMClient | TokenBatcher,
        tokenizer: Any,
        *,
        system_prompt: str | None = None,
        protocol: str = "completions",
        max_tokens: int = 256,
        temperature: float = 1.0,
        version: Callable[[], int | None] | None = None,
        **sampling: Any,
    ):
        if protocol not in PROTOCOLS:
            raise GemkitError(f"protocol must be one of {PROTOCOLS}, got {protocol!r}")
        if isinstance(client, TokenBatcher) and protocol != "completions":
            raise GemkitError(
                "a TokenBatcher sends /v1/completions requests; use protocol='completions'"
            )
        self.client = client
        self.tokenizer = tokenizer
        self.system_prompt = system_prompt
        self.protocol = protocol
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.version = version
        self.sampling = sampling
        self.context: list[int] = []
        self.last_tokens: TurnTokens | None = None

    def reset(self) -> None:
        """Start a new episode: an empty context."""
        self.context = []
        self.last_tokens = None

    async def act(self, observation: Observation) -> str:
        """Append the observation's tokens, sample a completion, return its decoded text."""
        if not self.context:
            new = prompt_ids(self.tokenizer, observation, self.system_prompt)
        else:
            new = reply_ids(self.tokenizer, observation_text(observation))
        context = self.context + new
        if isinstance(self.client, TokenBatcher):
            sampled = await self.client.generate(
                context, max_tokens=self.max_tokens, temperature=self.temperature, **self.sampling
            )
        else:
            sampled = await generate_tokens(
                self.client,
                context,
                protocol=self.protocol,
                max_tokens=self.max_tokens,
                temperature=self.temperature,
                **self.sampling,
            )
        if sampled.prompt_ids is not None and sampled.prompt_ids != context:
            raise LLMError(
                f"the server sampled after {len(sampled.prompt_ids)} prompt tokens that differ "
                f"from the {len(context)} sent; it re-tokenized the prompt, so the sample cannot "
                "be trained on"
            )
        version = sampled.version
        if version is None and self.version is not None:
            version = self.version()
        self.last_tokens = TurnTokens(
            prompt_ids=new,
            completion_ids=list(sampled.completion_ids),
            logprobs=sampled.logprobs,
            version=version,
            continues=bool(self.context),
        )
        self.context = context + list(sampled.completion_ids)
        return self.tokenizer.decode(sampled.completion_ids, skip_special_tokens=True)
