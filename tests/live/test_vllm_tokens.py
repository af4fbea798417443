"""Against a real vLLM: the behaviour log-prob is the learner's, and the rows are the template's.

The server is `tests/live/servers/vllm-cpu.sh` (float32 weights, `--logprobs-mode
processed_logprobs`), the learner is the same folder loaded with fp32 master weights.

Tolerance: float32 on both sides, the same weights, and the same arithmetic up to the order
of its sums (vLLM's CPU kernels against torch's eager matmuls, a KV cache against one pass
over the whole row). Rounding there is relative, about 1e-6 of a logit, and logits of this
model reach a few tens: a few 1e-5 nats per token. `TOLERANCE` allows 20x that. A learner
that ignored the recorded top-k and top-p (the bug this file guards against) misses the
log of the mass they cut: more than the tolerance on most tokens and up to 0.1 nats on this
confident model (more on a less certain one), which
`test_ignoring_the_recorded_sampling_is_caught` shows.
"""

from __future__ import annotations

import asyncio

import pytest

import gemkit
from gemkit.llm import LLMClient, LLMPolicy, TokenPolicy
from gemkit.llm.sampling import PROCESSED, SamplingParams, trainable
from gemkit.llm.token_policy import logprobs_kind
from gemkit.rollout import run_episode
from gemkit.trajectory import episode_sequence

pytestmark = pytest.mark.live
torch = pytest.importorskip("torch", reason="needs the `train` extra")

from gemkit.train.sequences import pack, token_logprobs  # noqa: E402

ENV = "game:GuessTheNumber-v0-easy"
#: see the module docstring
TOLERANCE = 1e-3
SETTINGS = [
    dict(temperature=0.7, top_p=0.9, top_k=20),
    dict(temperature=1.0, top_p=0.95, top_k=50),
]


def _client(base: str) -> LLMClient:
    return LLMClient(base_url=base, model="qwen", timeout=900, max_retries=0)


async def _episodes(base, tokenizer, params, seeds, **kwargs):
    async with _client(base) as client:
        out = []
        for seed in seeds:  # one at a time: a 2-core server, and a stable order
            policy = TokenPolicy(client, tokenizer, max_tokens=20, **params, **kwargs)
            out.append(await run_episode(gemkit.make(ENV), policy, seed=seed, max_steps=3))
    assert all(ep.error is None for ep in out), [ep.error for ep in out]
    return out


def _gaps(learner, episodes, sampling=None):
    """Per model token: |learner's recomputed log-prob - the behaviour log-prob used|."""
    gaps = []
    for ep in episodes:
        seq = episode_sequence(ep)
        params = sampling or trainable(seq.sampling)
        ids, attn, _ = pack([seq.prompt_ids], [seq.response_ids], 0)
        with torch.no_grad():
            logp = token_logprobs(learner, ids, attn, sampling=params)[0]
        start = len(seq.prompt_ids)
        gaps += [
            abs(float(logp[start + j]) - behaviour)
            for j, (behaviour, m) in enumerate(zip(seq.logprobs, seq.mask, strict=True))
            if m
        ]
    return gaps


async def test_the_server_reports_the_log_probs_of_the_sampling_distribution(vllm):
    async with _client(vllm) as client:
        assert await logprobs_kind(client, prompt=[40, 1744, 429, 279]) == PROCESSED


@pytest.mark.parametrize("params", SETTINGS, ids=["t0.7-p0.9-k20", "t1.0-p0.95-k50"])
async def test_the_learners_log_prob_of_every_sampled_token_is_the_behaviour_log_prob(
    vllm, tokenizer, learner, params
):
    episodes = await _episodes(vllm, tokenizer, params, seeds=[0, 1])
    for ep in episodes:  # every turn says how it was sampled
        for turn in ep.turns:
            assert {k: turn.tokens.sampling[k] for k in params} == params
            assert turn.tokens.sampling["logprobs"] == PROCESSED
    gaps = _gaps(learner, episodes)
    assert len(gaps) >= 10
    assert max(gaps) <= TOLERANCE, sorted(gaps)[-5:]


async def test_ignoring_the_recorded_sampling_is_caught(vllm, tokenizer, learner):
    # the old trainer: divide by the temperature, ignore top-k and top-p
    params = SETTINGS[0]
    episodes = await _episodes(vllm, tokenizer, params, seeds=[2])
    wrong = _gaps(learner, episodes, SamplingParams(temperature=params["temperature"]))
    assert max(wrong) > 50 * TOLERANCE, wrong
    assert sum(g > TOLERANCE for g in wrong) >= len(wrong) / 2, wrong


async def test_token_and_chat_policies_build_the_same_rows(vllm, tokenizer):
    # greedy, so both sample the same tokens; the chat server re-renders the conversation
    # through the template, which puts a newline after each <|im_end|>
    seeds = [0, 3]
    token_eps = await _episodes(vllm, tokenizer, dict(temperature=0.0), seeds=seeds)
    async with _client(vllm) as client:
        chat_eps = []
        for seed in seeds:
            policy = LLMPolicy(client, return_tokens=True, temperature=0.0, max_tokens=20)
            chat_eps.append(await run_episode(gemkit.make(ENV), policy, seed=seed, max_steps=3))
    for a, b in zip(token_eps, chat_eps, strict=True):
        assert b.error is None and a.num_turns == b.num_turns >= 2
        x, y = episode_sequence(a), episode_sequence(b)
        assert x.input_ids == y.input_ids
        assert x.mask == y.mask


async def test_concurrent_episodes_share_one_question_about_log_probs(vllm, tokenizer):
    async with _client(vllm) as client:
        policies = [TokenPolicy(client, tokenizer, max_tokens=4, temperature=0.7) for _ in range(3)]
        episodes = await asyncio.gather(
            *(run_episode(gemkit.make(ENV), p, seed=k, max_steps=1) for k, p in enumerate(policies))
        )
        assert client.num_requests == 3 + 1
    assert all(ep.error is None for ep in episodes)
