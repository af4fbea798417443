"""Token plumbing for policy-gradient trainers: prompts, sampling, packing, log-probs, loss.

A *transition* is one turn: the prompt the model saw (environment and tool text, masked out
of the loss) and the response it sampled (its own tokens, the only ones trained on).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from gemkit.llm.sampling import SamplingParams


def render_prompt(tokenizer: Any, observation: str | list[dict[str, Any]]) -> str:
    """The prompt text for an observation: the chat template when the tokenizer has one."""
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(observation, list):
        if not template:
            raise ValueError(
                "chat-message observations need a tokenizer with a chat template; "
                "use a text observation or a model whose tokenizer has `chat_template`"
            )
        messages = observation
    elif template:
        messages = [{"role": "user", "content": observation}]
    else:
        return observation
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def encode_prompts(
    tokenizer: Any, observations: Sequence[Any], max_prompt_tokens: int
) -> list[list[int]]:
    """Token ids of each observation's prompt, keeping the newest `max_prompt_tokens` tokens."""
    texts = [render_prompt(tokenizer, obs) for obs in observations]
    ids = tokenizer(texts, add_special_tokens=False)["input_ids"]
    return [list(x[-max_prompt_tokens:]) for x in ids]


def left_pad(rows: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`(input_ids, attention_mask)` with rows aligned on the right (for generation)."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        if r:
            ids[i, width - len(r) :] = torch.tensor(r, dtype=torch.long)
            mask[i, width - len(r) :] = 1
    return ids, mask


@torch.no_grad()
def sample(
    model: Any,
    prompts: Sequence[Sequence[int]],
    *,
    pad_id: int,
    eos_id: int,
    max_new_tokens: int,
    temperature: float = 1.0,
) -> list[list[int]]:
    """Sample one response per prompt; each response ends at (and keeps) its first EOS.

    Sampling is from the model's full distribution (no top-k/top-p), so the log-probs the
    loss computes are those of the policy that acted; `temperature=0` decodes greedily.
    """
    ids, mask = left_pad(prompts, pad_id)
    ids, mask = ids.to(model.device), mask.to(model.device)
    greedy = temperature <= 0
    out = model.generate(
        input_ids=ids,
        attention_mask=mask,
        max_new_tokens=max_new_tokens,
        do_sample=not greedy,
        temperature=None if greedy else temperature,
        top_k=None if greedy else 0,
        top_p=None if greedy else 1.0,
        pad_token_id=pad_id,
        eos_token_id=eos_id,
    )
    responses = []
    for row in out[:, ids.shape[1] :].tolist():
        cut = row.index(eos_id) + 1 if eos_id in row else len(row)
        responses.append(row[:cut])
    return responses


def pack(
    prompts: Sequence[Sequence[int]],
    responses: Sequence[Sequence[int]],
    pad_id: int,
    device: torch.device | str | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`(input_ids, attention_mask, loss_mask)` of prompt+response rows, right-padded, on `device`.

    `loss_mask` is 1 on response tokens only: prompt (environment, tool) tokens and padding
    never enter the loss.
    """
    rows = [list(p) + list(r) for p, r in zip(prompts, responses, strict=True)]
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(rows), width), dtype=torch.long)
    loss = torch.zeros((len(rows), width), dtype=torch.float32)
    for i, (p, r) in enumerate(zip(prompts, responses, strict=True)):
        n = len(p) + len(r)
        ids[i, :n] = torch.tensor(rows[i], dtype=torch.long)
        attn[i, :n] = 1
        loss[i, len(p) : n] = 1.0
    if device is not None:
        return ids.to(device), attn.to(device), loss.to(device)
    return ids, attn, loss


def processed_logits(logits: torch.Tensor, sampling: SamplingParams) -> torch.Tensor:
    """The logits of the distribution `sampling` draws from, in vLLM's order.

    Temperature, then min-p, then top-k, then top-p (over what top-k kept); a cut token's
    logit is `-inf`, so `log_softmax` of the result is the processed log-prob vLLM reports
    with `--logprobs-mode processed_logprobs`. Top-k keeps ties with the k-th largest logit;
    top-p keeps the most likely tokens until their mass reaches `top_p`, the one that
    crosses included. Penalties are not applied (`gemkit.llm.sampling.trainable` refuses them).
    """
    if sampling.temperature > 0 and sampling.temperature != 1.0:
        logits = logits / sampling.temperature
    if not sampling.truncates:
        return logits
    neg = -float("inf")
    if sampling.min_p > 0:
        probs = logits.softmax(dim=-1)
        floor = probs.amax(dim=-1, keepdim=True) * sampling.min_p
        logits = logits.masked_fill(probs < floor, neg)
    if sampling.top_k != -1 and sampling.top_k < logits.shape[-1]:
        kth = logits.topk(sampling.top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, neg)
    if sampling.top_p < 1.0:
        ordered, index = logits.sort(dim=-1, descending=False)
        mass = ordered.softmax(dim=-1).cumsum(dim=-1)
        cut = mass <= 1 - sampling.top_p
        cut[..., -1] = False  # the most likely token always stays
        ordered = ordered.masked_fill(cut, neg)
        logits = torch.empty_like(logits).scatter_(-1, index, ordered)
    return logits


def token_logprobs(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    temperature: float = 1.0,
    *,
    sampling: SamplingParams | None = None,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Log-probability of each token given the ones before it, shape `(B, L)` (column 0 is 0).

    Under `sampling` (temperature, top-k, top-p, min-p) when given, else at `temperature`
    over the full distribution. The forward pass runs in the model's dtype and the
    log-softmax in float32. A token the sampling distribution cuts gets `-inf`.

    With `mask` (1 where a token's log-prob is needed: the model's own tokens) only those
    positions go through the output layer and the vocabulary-wide work (the sort that top-p
    needs is `B x L x V`: gigabytes for a real vocabulary); the others are 0.
    """
    if sampling is None:
        sampling = SamplingParams(temperature=temperature if temperature > 0 else 1.0)
    head = _output_layer(model) if mask is not None else None
    if head is None:
        logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, :-1].float()
        logits = processed_logits(logits, sampling)
        target = input_ids[:, 1:].unsqueeze(-1)
        picked = logits.gather(-1, target).squeeze(-1) - torch.logsumexp(logits, dim=-1)
        out = torch.cat([torch.zeros_like(picked[:, :1]), picked], dim=1)
        return out if mask is None else torch.where(mask > 0, out, torch.zeros_like(out))
    base, lm_head = head
    assert mask is not None  # the output layer is only looked up with a mask
    hidden = base(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    rows, cols = torch.nonzero(mask[:, 1:] > 0, as_tuple=True)  # token cols+1, from position cols
    logits = processed_logits(lm_head(hidden[rows, cols]).float(), sampling)
    target = input_ids[rows, cols + 1].unsqueeze(-1)
    picked = logits.gather(-1, target).squeeze(-1) - torch.logsumexp(logits, dim=-1)
    out = torch.zeros(input_ids.shape, dtype=picked.dtype, device=picked.device)
    return out.index_put((rows, cols + 1), picked)


def _output_layer(model: Any) -> tuple[Any, Any] | None:
    """`(base model, output layer)` of a causal LM whose logits are exactly the output layer of
    its last hidden state, or None (a model that scales or caps its logits, or another shape)."""
    config = getattr(model, "config", None)
    if any(getattr(config, k, None) for k in ("final_logit_softcapping", "logit_scale")):
        return None
    base = getattr(model, "base_model", None)
    get_head = getattr(model, "get_output_embeddings", None)
    head = get_head() if callable(get_head) else None
    if base is None or head is None or base is model:
        return None
    return base, head


def policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Token-level policy-gradient loss, averaged over every response token in the batch.

    `advantages` has one value per row `(B,)`, applied to each of the row's tokens. With
    `clip` this is PPO's clipped surrogate against `old_logp` (the sampling policy); without
    it, the plain REINFORCE gradient `-A * grad log p` (the ratio is 1 at the sampled policy).
    """
    adv = advantages.to(logp.dtype).unsqueeze(1)
    ratio = torch.exp(logp - old_logp)
    surrogate = ratio * adv
    if clip is not None:
        surrogate = torch.minimum(surrogate, torch.clamp(ratio, 1 - clip, 1 + clip) * adv)
    tokens = mask.sum().clamp(min=1.0)
    loss = -(surrogate * mask).sum() / tokens
    with torch.no_grad():
        log_ratio = (logp - old_logp) * mask
        stats = {
            "approx_kl": float(((ratio - 1) - log_ratio).mul(mask).sum() / tokens),
            "clip_frac": float(
                ((ratio - 1).abs() > (clip or float("inf"))).float().mul(mask).sum() / tokens
            ),
        }
    return loss, stats
