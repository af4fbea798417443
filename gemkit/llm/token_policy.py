"""`TokenPolicy`: a policy that talks to the model in token ids, so nothing is re-tokenized.

It keeps the episode's context as token ids: the first observation rendered once through the
tokenizer's chat template, then, turn after turn, the ids the server sampled followed by the
env's reply tokenized once (`gemkit.llm.episode_tokens`). Each request sends that context as
a token-id prompt, so the model conditions on exactly the tokens it sampled before (no merges
across turn boundaries, no chat-template drift), and each turn's `last_tokens` records the
new prompt tokens, the sampled ids, their log-probs and the policy version.

Protocols:

- `"completions"`: `POST {base_url}/completions` with `prompt` a list of ids (vLLM,
  `gemkit serve model`), log-probs and ids from vLLM's fields;
- `"sglang"`: `POST {base_url}/generate` with `input_ids` and `return_logprob` (SGLang's
  native API; `base_url` without `/v1`);
- `"llama.cpp"`: `POST {base_url}/completions` with `prompt` a list of ids; llama.cpp answers
  each sampled id and log-prob under `logprobs.content[i]`.

Every request names every sampling parameter (`gemkit.llm.SamplingParams`): a server fills
what a request leaves open with its own defaults (vLLM's come from the checkpoint's
`generation_config.json`), and the behaviour log-prob must be of the distribution the token
was drawn from. Each turn records the parameters and whether the server's log-probs are of
that distribution (`"processed"`) or of the raw model (`"raw"`, vLLM's default), asked of the
server once (`gemkit.llm.token_policy.logprobs_kind`).

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
from gemkit.llm.client import LLMClient, LLMError
from gemkit.llm.episode_tokens import observation_text, prompt_ids, reply_ids
from gemkit.llm.sampled import (
    VLLM_COMPLETION_TOKEN_FIELDS,
    SampledTokens,
    from_completion_choice,
    from_sglang,
)
from gemkit.llm.sampling import PROCESSED, RAW, SamplingError, SamplingParams
from gemkit.policy import Observation
from gemkit.trajectory import TurnTokens

PROTOCOLS = ("completions", "sglang", "llama.cpp")
#: the sampling-field spelling each protocol's server reads
_SERVER = {"completions": "vllm", "sglang": "vllm", "llama.cpp": "llama.cpp"}
#: what requests batch together on: (max_tokens, temperature, the sorted sampling fields)
BatchKey = tuple[Any, ...]


async def generate_tokens(
    client: LLMClient,
    context: list[int],
    *,
    protocol: str = "completions",
    max_tokens: int = 256,
    temperature: float = 1.0,
    **sampling: Any,
) -> SampledTokens:
    """Sample one completion of the token-id `context`; its ids, log-probs and version.

    `sampling` are more request fields, sent as given (`SamplingParams.request_fields` names
    them all).
    """
    if protocol in ("completions", "llama.cpp"):
        body = {
            "model": client.model,
            "prompt": list(context),
            "max_tokens": max_tokens,
            "temperature": temperature,
            **VLLM_COMPLETION_TOKEN_FIELDS,
            **sampling,
        }
        if protocol == "llama.cpp":  # the probabilities of the distribution it sampled from
            body["post_sampling_probs"] = True
        data = await client.post_json("/completions", body)
        return from_completion_choice(_choices(data)[0], data)
    if protocol == "sglang":
        params = {"max_new_tokens": max_tokens, "temperature": temperature, **sampling}
        body = {"input_ids": list(context), "sampling_params": params, "return_logprob": True}
        return from_sglang(await client.post_json("/generate", body), context)
    raise GemkitError(f"protocol must be one of {PROTOCOLS}, got {protocol!r}")


async def logprobs_kind(client: Any, *, protocol: str = "completions", prompt: list[int]) -> str:
    """`"processed"` or `"raw"`: what the server's log-probs are, asked once per client.

    One request of one token after `prompt` with `top_k=1`: its processed log-prob is exactly
    0 (one token is left in the sampling distribution), its raw one the model's own, below 0
    unless the model is certain. A server that ignores `top_k` reads as raw, which is what
    its log-probs then are. Concurrent first calls share the one request.
    """
    cache: dict[str, asyncio.Future[str]] = client.__dict__.setdefault("_gemkit_logprobs_kind", {})
    future = cache.get(protocol)
    if future is None or (future.done() and future.exception() is not None):
        future = asyncio.get_running_loop().create_future()
        cache[protocol] = future
        try:
            fields = SamplingParams(top_k=1).request_fields(_SERVER[protocol])
            sampled = await generate_tokens(
                client, prompt, protocol=protocol, max_tokens=1, **fields
            )
            if not sampled.logprobs:
                raise SamplingError(
                    "the server sent no log-probs with its completion; ask for them "
                    "(vLLM: logprobs=1) or use a server that reports them"
                )
            future.set_result(PROCESSED if sampled.logprobs[0] == 0.0 else RAW)
        except BaseException as e:
            future.set_exception(e)
            future.exception()  # retrieved: a later call asks again
            raise
    return await asyncio.shield(future)


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
        self._pending: dict[BatchKey, list[tuple[list[int], asyncio.Future[SampledTokens]]]] = {}
        self._flush: asyncio.TimerHandle | None = None
        self._sending: set[asyncio.Task[None]] = set()  # held so that no send is garbage-collected

    async def generate(
        self, context: list[int], *, max_tokens: int, temperature: float = 1.0, **sampling: Any
    ) -> SampledTokens:
        """Sample one completion of `context`, sent together with other episodes' turns."""
        loop = asyncio.get_running_loop()
        key = (max_tokens, temperature, tuple(sorted(sampling.items(), key=repr)))
        future: asyncio.Future[SampledTokens] = loop.create_future()
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

    async def _send(
        self, key: BatchKey, items: list[tuple[list[int], asyncio.Future[SampledTokens]]]
    ) -> None:
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

    `tokenizer` is the model's Hugging Face tokenizer (local; nothing is downloaded). The
    sampling distribution is `temperature`, `top_p`, `top_k` and `min_p` (or a whole
    `SamplingParams` as `sampling`), named in full on every request; `extra` fields (such as
    `stop`) are sent as given. `version` is called, when a request is sent, for the policy
    version of a sample the server does not label (vLLM does not; `gemkit serve model` and
    SGLang do): a sample can only be as old as the weights the server held when it started.
    `logprobs` says what the server's log-probs are (`"processed"`: of the sampling
    distribution; `"raw"`: of the raw model); None asks the server once
    (`gemkit.llm.token_policy.logprobs_kind`).
    Observations are text, or chat messages of which the newest one is the env's reply; the
    policy keeps its own token context, so use it on an env (or a `ToolEnvWrapper`) rather
    than under a wrapper that edits the history.
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
        top_p: float = 1.0,
        top_k: int = -1,
        min_p: float = 0.0,
        sampling: SamplingParams | None = None,
        version: Callable[[], int | None] | None = None,
        logprobs: str | None = None,
        **extra: Any,
    ):
        if protocol not in PROTOCOLS:
            raise GemkitError(f"protocol must be one of {PROTOCOLS}, got {protocol!r}")
        if isinstance(client, TokenBatcher) and protocol != "completions":
            raise GemkitError(
                "a TokenBatcher sends /v1/completions requests; use protocol='completions'"
            )
        clash = sorted(set(extra) & set(SamplingParams.__dataclass_fields__))
        if clash:
            raise GemkitError(
                f"pass {', '.join(clash)} in sampling=SamplingParams(...), not as a request field"
            )
        self.client = client
        self.tokenizer = tokenizer
        self.system_prompt = system_prompt
        self.protocol = protocol
        self.max_tokens = max_tokens
        self.params = sampling or SamplingParams(
            temperature=temperature, top_p=top_p, top_k=top_k, min_p=min_p
        )
        if logprobs not in (None, PROCESSED, RAW):
            raise GemkitError(
                f"logprobs must be None (ask the server), 'processed' or 'raw', got {logprobs!r}"
            )
        self.version = version
        self.logprobs = logprobs
        self.extra = extra
        self.context: list[int] = []
        self.last_tokens: TurnTokens | None = None
        self.last_finish_reason: str | None = None
        self._last_completion: list[int] = []

    @property
    def temperature(self) -> float:
        """The sampling temperature."""
        return self.params.temperature

    def reset(self) -> None:
        """Start a new episode: an empty context."""
        self.context = []
        self.last_tokens = None
        self.last_finish_reason = None
        self._last_completion = []

    async def act(self, observation: Observation) -> str:
        """Append the observation's tokens, sample a completion, return its decoded text."""
        if not self.context:
            new = prompt_ids(self.tokenizer, observation, self.system_prompt)
        else:
            new = reply_ids(self.tokenizer, observation_text(observation), self._last_completion)
        context = self.context + new
        server = _SERVER[self.protocol]
        fields = {**self.params.request_fields(server), **self.extra}
        kind = self.logprobs or await logprobs_kind(
            _client_of(self.client), protocol=self.protocol, prompt=context
        )
        version = self.version() if self.version is not None else None
        if isinstance(self.client, TokenBatcher):
            sampled = await self.client.generate(context, max_tokens=self.max_tokens, **fields)
        else:
            sampled = await generate_tokens(
                self.client, context, protocol=self.protocol, max_tokens=self.max_tokens, **fields
            )
        if sampled.prompt_ids is not None and sampled.prompt_ids != context:
            raise LLMError(
                f"the server sampled after {len(sampled.prompt_ids)} prompt tokens that differ "
                f"from the {len(context)} sent; it re-tokenized the prompt, so the sample cannot "
                "be trained on"
            )
        if sampled.version is not None:
            version = sampled.version
        self.last_tokens = TurnTokens(
            prompt_ids=new,
            completion_ids=list(sampled.completion_ids),
            logprobs=sampled.logprobs,
            version=version,
            continues=bool(self.context),
            sampling=sampling_record(self.params, kind, self.extra),
        )
        self.last_finish_reason = sampled.finish_reason
        self._last_completion = list(sampled.completion_ids)
        self.context = context + self._last_completion
        text: str = self.tokenizer.decode(sampled.completion_ids, skip_special_tokens=True)
        return text


def sampling_record(
    params: SamplingParams, kind: str, extra: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """What a turn records of how it was sampled: every parameter, the log-probs' kind, and
    any other request field that was sent."""
    record: dict[str, Any] = {**params.to_dict(), "logprobs": kind}
    if extra:
        record["extra"] = dict(extra)
    return record


def _client_of(sampler: LLMClient | TokenBatcher) -> LLMClient:
    return sampler.client if isinstance(sampler, TokenBatcher) else sampler
