"""`TokenPolicy`: a policy that talks to the model in token ids, so nothing is re-tokenized.

It keeps the episode's context as token ids: the first observation rendered once through the
tokenizer's chat template, then, turn after turn, the ids the server sampled followed by the
env's reply tokenized once (`gemkit.integrations.tokens`). Each request sends that context as
a token-id prompt, so the model conditions on exactly the tokens it sampled before (no merges
across turn boundaries, no chat-template drift), and each turn's `last_tokens` records the
new prompt tokens, the sampled ids, their log-probs and the policy version.

Protocols:

- `"completions"`: `POST {base_url}/completions` with `prompt` a list of ids (vLLM,
  `gemkit serve model`), log-probs and ids from vLLM's fields;
- `"sglang"`: `POST {base_url}/generate` with `input_ids` and `return_logprob` (SGLang's
  native API; `base_url` without `/v1`).

The action handed to the env is the tokenizer's decoding of the sampled ids, so the reward
is earned by the very tokens a trainer then trains on, whatever text the server sent.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from gemkit.errors import GemkitError
from gemkit.integrations.tokens import observation_text, prompt_ids, reply_ids
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
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
            raise LLMError(f"the endpoint answered with no choices: {str(data)[:300]}")
        return from_completion_choice(choices[0], data)
    if protocol == "sglang":
        params = {"max_new_tokens": max_tokens, "temperature": temperature, **sampling}
        body = {"input_ids": list(context), "sampling_params": params, "return_logprob": True}
        return from_sglang(await client.post_json("/generate", body), context)
    raise GemkitError(f"protocol must be one of {PROTOCOLS}, got {protocol!r}")


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
        client: LLMClient,
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
