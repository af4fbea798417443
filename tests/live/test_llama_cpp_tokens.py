"""Against a real llama.cpp: token mode over its completions endpoint, or a clear error.

llama.cpp's `/v1/completions` with a token-id prompt answers each sampled id and its
probability under `logprobs.content[i]` (after its sampling chain with
`post_sampling_probs`, which `TokenPolicy(protocol="llama.cpp")` asks for); its chat endpoint
sends no token ids at all.
"""

from __future__ import annotations

import math

import pytest

import gemkit
from gemkit.llm import LLMClient, LLMError, LLMPolicy, TokenPolicy
from gemkit.llm.sampling import PROCESSED, RAW, SamplingParams
from gemkit.llm.token_policy import logprobs_kind
from gemkit.rollout import run_episode
from gemkit.trajectory import episode_sequence

pytestmark = pytest.mark.live

ENV = "game:GuessTheNumber-v0-easy"


def _client(base: str) -> LLMClient:
    return LLMClient(base_url=base, model="qwen", timeout=900, max_retries=0)


async def test_token_mode_records_every_sampled_id_with_its_log_prob(llama, tokenizer):
    params = dict(temperature=0.7, top_p=0.9, top_k=20)
    async with _client(llama) as client:
        policy = TokenPolicy(client, tokenizer, protocol="llama.cpp", max_tokens=20, **params)
        episode = await run_episode(gemkit.make(ENV), policy, seed=0, max_steps=2)
    assert episode.error is None and episode.num_turns == 2
    for turn in episode.turns:
        tokens = turn.tokens
        assert tokens is not None and tokens.completion_ids
        assert tokens.logprobs is not None and len(tokens.logprobs) == len(tokens.completion_ids)
        assert all(lp <= 0.0 for lp in tokens.logprobs)
        assert {k: tokens.sampling[k] for k in params} == params
        assert tokens.sampling["logprobs"] == PROCESSED
        # the action the env graded is the decoding of exactly these ids
        assert turn.action == tokenizer.decode(tokens.completion_ids, skip_special_tokens=True)
    seq = episode_sequence(episode)
    # the second turn's context is the template's: a newline after the sampled <|im_end|>
    second = episode.turns[1].tokens.prompt_ids
    assert tokenizer.decode(second).startswith("\n<|im_start|>user\n")
    assert sum(seq.mask) == sum(len(t.tokens.completion_ids) for t in episode.turns)


async def test_llama_cpp_log_probs_are_raw_unless_asked_after_its_sampling_chain(llama):
    # the same one-token probe; the completions protocol does not ask for post-sampling probs
    prompt = [151644, 872, 198, 9707, 151645, 198, 151644, 77091, 198]
    async with _client(llama) as client:
        assert await logprobs_kind(client, protocol="llama.cpp", prompt=prompt) == PROCESSED
        assert await logprobs_kind(client, protocol="completions", prompt=prompt) == RAW


async def test_asking_llama_cpps_chat_endpoint_for_tokens_says_what_to_use_instead(llama):
    async with _client(llama) as client:
        policy = LLMPolicy(client, return_tokens=True, max_tokens=8)
        with pytest.raises(LLMError, match="without token ids.*protocol='llama.cpp'"):
            await policy.act("Guess a number from 1 to 10.")


async def test_sampling_fields_in_llama_cpps_spelling_turn_its_defaults_off(llama):
    # llama.cpp samples with top-k 40, top-p 0.95 and min-p 0.05 unless told. With every
    # field named off, the chain leaves the full distribution at temperature 1: its
    # post-chain probabilities are the raw ones. Left to its defaults, they are not.
    fields = SamplingParams().request_fields("llama.cpp")
    assert fields["top_k"] == 0 and fields["min_p"] == 0.0 and fields["repeat_penalty"] == 1.0
    # cache_prompt off: a prompt read from llama.cpp's cache is evaluated in another batch
    # shape, and its log-probs move (about 0.06 measured), which would hide what is compared
    body = {"model": "qwen", "prompt": [40, 1744, 429, 279], "max_tokens": 1, "logprobs": 5}
    body["cache_prompt"] = False

    async def top(extra):
        answer = await client.post_json("/completions", {**body, **extra})
        (entry,) = answer["choices"][0]["logprobs"]["content"]
        if "top_probs" in entry:
            return {t["id"]: math.log(t["prob"]) for t in entry["top_probs"] if t["prob"] > 0}
        return {t["id"]: t["logprob"] for t in entry["top_logprobs"]}

    async with _client(llama) as client:
        raw = await top(fields)
        named = await top({**fields, "post_sampling_probs": True})
        defaults = await top({"post_sampling_probs": True})
    common = sorted(set(raw) & set(named))
    assert len(common) >= 3
    # the same distribution: the same log-ratios between tokens, and the same normalisation
    # up to the float sums of its softmax (7e-4 measured)
    base = common[0]
    assert all(
        named[i] - named[base] == pytest.approx(raw[i] - raw[base], abs=1e-4) for i in common
    )
    assert all(named[i] == pytest.approx(raw[i], abs=3e-3) for i in common)
    best = max(raw, key=raw.get)
    assert defaults[best] > raw[best] + 0.01  # its defaults cut the tail and renormalise


async def test_llama_cpps_log_probs_repeat_without_its_prompt_cache_and_move_with_it(llama):
    # docs/training.md: with cache_prompt off one prompt's log-probs repeat exactly; read from
    # the prompt cache, its last token is evaluated alone (another batch shape) and they move
    # (0.057 measured on this 4-token prompt; 0 on a 15-token chat prompt), each still the
    # distribution its token was sampled from
    prompt = [40, 1744, 429, 279]
    fields = SamplingParams().request_fields("llama.cpp")
    body = {"model": "qwen", "prompt": prompt, "max_tokens": 1, "logprobs": 5, **fields}

    async def top(cache: bool) -> dict[int, float]:
        answer = await client.post_json("/completions", {**body, "cache_prompt": cache})
        (entry,) = answer["choices"][0]["logprobs"]["content"]
        return {t["id"]: t["logprob"] for t in entry["top_logprobs"]}

    async with _client(llama) as client:
        fresh = [await top(False) for _ in range(3)]
        await top(True)  # fills a slot's cache with this prompt
        cached = await top(True)
    assert fresh[0] == fresh[1] == fresh[2]
    common = sorted(set(fresh[0]) & set(cached))
    assert len(common) >= 3
    assert max(abs(cached[i] - fresh[0][i]) for i in common) < 0.1
