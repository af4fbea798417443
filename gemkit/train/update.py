"""The policy-gradient update both example trainers share (ReBN and GRPO differ only in advantages)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from gemkit.train.sequences import pack, policy_loss, token_logprobs


class UpdateArgs(Protocol):
    """The trainer settings the update reads."""

    clip: float | None
    update_epochs: int
    minibatch_size: int
    temperature: float
    max_grad_norm: float


class Turn(Protocol):
    """A sampled turn: prompt and response token ids."""

    prompt: list[int]
    response: list[int]


def update(
    model: Any,
    optimizer: torch.optim.Optimizer,
    tokenizer: Any,
    batch: Sequence[tuple[Turn, float]],
    args: UpdateArgs,
) -> dict[str, float]:
    """Policy-gradient steps on (transition, advantage) pairs; returns the mean loss stats."""
    pad = tokenizer.pad_token_id
    reuse = args.clip is not None or args.update_epochs > 1
    old: list[torch.Tensor] = []
    if reuse:  # log-probs of the policy that sampled, for the ratio in later passes
        with torch.no_grad():
            for start in range(0, len(batch), args.minibatch_size):
                part = batch[start : start + args.minibatch_size]
                ids, attn, _ = pack(
                    [t.prompt for t, _ in part], [t.response for t, _ in part], pad, model.device
                )
                old.append(token_logprobs(model, ids, attn, args.temperature))
    losses, kls = [], []
    model.train()
    for _ in range(args.update_epochs):
        for j, start in enumerate(range(0, len(batch), args.minibatch_size)):
            part = batch[start : start + args.minibatch_size]
            ids, attn, mask = pack(
                [t.prompt for t, _ in part], [t.response for t, _ in part], pad, model.device
            )
            adv = torch.tensor([a for _, a in part], dtype=torch.float32, device=model.device)
            logp = token_logprobs(model, ids, attn, args.temperature)
            old_logp = old[j] if reuse else logp.detach()
            loss, stats = policy_loss(logp, old_logp, adv, mask, args.clip)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)
            optimizer.step()
            losses.append(float(loss.detach()))
            kls.append(stats["approx_kl"])
    model.eval()
    return {"loss": float(np.mean(losses)), "approx_kl": float(np.mean(kls))}


def save(model: Any, tokenizer: Any, path: Path) -> None:
    """Write a checkpoint that `--model PATH` (or any HF loader) reads back."""
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
