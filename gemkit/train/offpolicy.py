"""Learning from samples of older policies: staleness, filtering, and the corrected loss.

Shared by `examples/async_grpo.py` and its tests. In fully asynchronous RL an episode runs on
whatever weights the server has while it runs, so its tokens come from policy versions at or
before the learner's. Three rules decide what the learner does with a finished group:

- **filter**: a group whose rewards are all equal has zero GRPO advantage everywhere; it is
  skipped and the batch waits for an informative one (dynamic filtering, as in DAPO and
  ASearcher);
- **drop**: a group whose oldest token is more than `max_staleness` versions behind the
  learner is dropped. Past that bound the importance ratios are mostly truncated, so the
  sample adds bias and little signal, and the bound keeps learning near on-policy;
- **correct**: within the bound every model token's gradient is weighted by the truncated
  importance ratio `min(pi_theta / pi_behaviour, cap)` against the log-prob the server
  sampled it with (IMPALA's rho-bar truncation; it also absorbs the small numeric gap between
  the server's and the trainer's log-probs). Dropping instead would bias every batch
  against long episodes, the ones that span most versions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from gemkit.llm.sampling import SamplingParams
from gemkit.train.sequences import pack

FILTERED, STALE, KEPT = "filtered", "stale", "kept"


def staleness(version: int, sample_versions: Sequence[int]) -> int:
    """How many versions the oldest token of a sample is behind the learner's `version`."""
    if not sample_versions:
        return 0
    return max(0, version - min(sample_versions))


def admit(
    rewards: Sequence[float],
    sample_versions: Sequence[int],
    version: int,
    *,
    max_staleness: int,
    filter_equal: bool = True,
) -> str:
    """`"filtered"`, `"stale"` or `"kept"`: what the learner does with a finished group."""
    if filter_equal and len(set(float(r) for r in rewards)) <= 1:
        return FILTERED
    if staleness(version, sample_versions) > max_staleness:
        return STALE
    return KEPT


@dataclass
class Row:
    """One training row: a token sequence, its behaviour log-probs, its advantage, and the
    sampling distribution its tokens were drawn from (None: plain temperature sampling)."""

    prompt_ids: list[int]
    response_ids: list[int]
    mask: list[int]
    logprobs: list[float]
    advantage: float
    sampling: SamplingParams | None = None


def pack_rows(
    rows: Sequence[Row], pad_id: int, device: Any = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """`(input_ids, attention_mask, loss_mask, behaviour_logprobs)`, right-padded, `(B, L)`.

    `loss_mask` is 1 exactly on the model's sampled tokens (the sequence's mask placed after
    its prompt): prompt, env and tool tokens and padding never enter the loss. Column `j`
    of `behaviour_logprobs` is the server's log-prob of token `j`.
    """
    ids, attn, loss = pack([r.prompt_ids for r in rows], [r.response_ids for r in rows], pad_id)
    behaviour = torch.zeros(ids.shape, dtype=torch.float32)
    for i, r in enumerate(rows):
        p, n = len(r.prompt_ids), len(r.prompt_ids) + len(r.response_ids)
        loss[i, p:n] = torch.tensor(r.mask, dtype=torch.float32)
        behaviour[i, p:n] = torch.tensor(r.logprobs, dtype=torch.float32)
    if device is not None:
        return ids.to(device), attn.to(device), loss.to(device), behaviour.to(device)
    return ids, attn, loss, behaviour


def corrected_loss(
    logp: torch.Tensor,
    behaviour: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    cap: float = 2.0,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Policy-gradient loss with truncated importance weights, averaged over model tokens.

    The gradient is `-mean(min(r, cap) * A * grad log pi_theta)` with
    `r = exp(log pi_theta - log pi_behaviour)` per token: unbiased for `r <= cap`, and an
    on-policy token (`r = 1`) gets the plain REINFORCE gradient. A token the learner's
    sampling distribution cuts (`log pi_theta = -inf`: its top-k or top-p boundary moved) has
    ratio 0 and adds nothing; `cut` is their share.
    """
    kept = torch.isfinite(logp)
    logp = torch.where(kept, logp, torch.zeros_like(logp))
    live = mask * kept.to(mask.dtype)
    ratio = torch.exp((logp.detach() - behaviour).clamp(max=20.0)) * kept.to(logp.dtype)
    weight = ratio.clamp(max=cap)
    adv = advantages.to(logp.dtype).unsqueeze(1)
    tokens = mask.sum().clamp(min=1.0)
    loss = -(weight * adv * logp * live).sum() / tokens
    with torch.no_grad():
        log_ratio = (logp - behaviour) * live
        stats = {
            "is_weight": float((weight * mask).sum() / tokens),
            "is_truncated": float(((ratio > cap).float() * mask).sum() / tokens),
            "approx_kl": float(((ratio - 1) - log_ratio).mul(live).sum() / tokens),
            "cut": float((mask - live).sum() / tokens),
        }
    return loss, stats
