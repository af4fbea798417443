"""Advantage math for critic-free RL on LLM agents: ReBN, GRPO, Dr. GRPO and RLOO.

numpy only (no torch, no gymnasium), so trainers, examples and tests share one tested copy.

Shapes used below:

- an *episode* is a 1-D sequence of per-turn rewards, shape ``(T,)``; episodes in a batch may
  have different lengths;
- a *group* is the set of samples drawn for one prompt (GRPO-style); group rewards come either as
  a 2-D array of shape ``(num_groups, group_size)`` or as a flat array of shape ``(N,)`` together
  with ``group_ids`` of shape ``(N,)`` (groups may then differ in size and need not be contiguous).

All outputs are ``float64``. Bad inputs raise :class:`RLInputError` (a ``ValueError``) whose
message says what was wrong and what is expected.
"""

from __future__ import annotations

import itertools
import numbers
from collections.abc import Sequence
from typing import Literal, NoReturn

import numpy as np

from gemkit.errors import GemkitError

__all__ = [
    "RLInputError",
    "batch_returns",
    "discounted_returns",
    "dr_grpo_advantages",
    "grpo_advantages",
    "rebn_advantages",
    "rloo_advantages",
]

Rewards = Sequence[float] | np.ndarray

# The level-by-level batch algorithm costs a few numpy calls (~8 us) per turn of the longest
# episode; a plain reverse loop costs ~0.2 us per transition. Measured crossover: ~45
# transitions per level (2000 episodes x 8 turns: 0.2 ms vs 5 ms; 4 x 1000 turns: 8 ms vs 0.6).
_MIN_TRANSITIONS_PER_LEVEL = 64


class RLInputError(GemkitError, ValueError):
    """Rewards, group ids or hyperparameters that the advantage math cannot use."""


# --------------------------------------------------------------------------------------------
# validation


def _check_gamma(gamma: float) -> float:
    if isinstance(gamma, bool) or not isinstance(gamma, numbers.Real):
        raise RLInputError(f"gamma must be a number in (0, 1], got {gamma!r}")
    if not 0.0 < float(gamma) <= 1.0:
        raise RLInputError(
            f"gamma must be in (0, 1], got {gamma!r}; use 1.0 for undiscounted returns"
        )
    return float(gamma)


def _check_eps(eps: float) -> float:
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real) or not 0.0 <= float(eps) < np.inf:
        raise RLInputError(f"eps must be a finite number >= 0, got {eps!r}")
    return float(eps)


def _check_finite(values: np.ndarray, what: str) -> None:
    bad = ~np.isfinite(values)
    if bad.any():
        i = int(np.argmax(bad))
        raise RLInputError(f"{what} must be finite numbers, but item {i} is {values[i]!r}")


def _as_episode(rewards: Rewards, what: str = "rewards") -> np.ndarray:
    """One episode as a finite float64 array of shape (T,)."""
    if isinstance(rewards, (str, bytes)):
        raise RLInputError(f"{what} must be a sequence of numbers, got the string {rewards!r}")
    try:
        arr = np.asarray(rewards, dtype=np.float64)
    except (TypeError, ValueError):
        raise RLInputError(
            f"{what} must be a flat sequence of numbers (one reward per turn), got {rewards!r}"
        ) from None
    if arr.ndim != 1:
        raise RLInputError(
            f"{what} must be 1-D (one reward per turn), got an array of shape {arr.shape}"
        )
    _check_finite(arr, what)
    return arr


def _flatten_episodes(episodes: Sequence[Rewards]) -> tuple[np.ndarray, np.ndarray]:
    """All rewards concatenated, shape (sum T_i,), and the episode lengths, shape (N,)."""
    if isinstance(episodes, np.ndarray) and episodes.ndim == 2 and episodes.dtype != object:
        flat = episodes.astype(np.float64).reshape(-1)
        lengths = np.full(episodes.shape[0], episodes.shape[1], dtype=np.int64)
    else:
        if isinstance(episodes, (str, bytes)) or not isinstance(episodes, (Sequence, np.ndarray)):
            raise RLInputError(
                f"episodes must be a sequence of episodes (each a sequence of per-turn rewards), "
                f"got {type(episodes).__name__}"
            )
        # Checking each distinct type, not each episode, keeps this cheap for big batches.
        types = set(map(type, episodes))
        if any(issubclass(tp, (str, bytes)) or not hasattr(tp, "__len__") for tp in types):
            _raise_for_bad_episode(episodes)
        try:
            lengths = np.fromiter(map(len, episodes), np.int64, count=len(episodes))
            if types == {np.ndarray}:
                flat = np.concatenate(episodes).astype(np.float64, copy=False)
            else:
                chain = itertools.chain.from_iterable(episodes)
                flat = np.fromiter(chain, np.float64, count=int(lengths.sum()))
        except (TypeError, ValueError):
            _raise_for_bad_episode(episodes)
        if flat.ndim != 1:
            _raise_for_bad_episode(episodes)
    bad = ~np.isfinite(flat)
    if bad.any():
        pos = int(np.argmax(bad))
        ep = int(np.searchsorted(np.cumsum(lengths), pos, side="right"))
        turn = pos - int(lengths[:ep].sum())
        raise RLInputError(
            f"rewards must be finite numbers, but episode {ep} turn {turn} is {flat[pos]!r}"
        )
    return flat, lengths


def _raise_for_bad_episode(episodes: Sequence[Rewards]) -> NoReturn:
    """Slow path, only on error: name the first episode that is not a flat list of numbers."""
    for i, episode in enumerate(episodes):
        if isinstance(episode, (str, bytes)) or not hasattr(episode, "__len__"):
            raise RLInputError(
                f"episode {i} must be a sequence of per-turn rewards, got {episode!r}; "
                f"wrap a single episode in a list: [[r0, r1, ...]]"
            )
        _as_episode(episode, f"episode {i}")
    raise RLInputError("episodes must be sequences of per-turn rewards")  # pragma: no cover


def _split(flat: np.ndarray, lengths: np.ndarray) -> list[np.ndarray]:
    # A list comprehension of slices is ~5x faster than np.split for many short episodes.
    ends = np.cumsum(lengths).tolist()
    starts = [0, *ends[:-1]] if ends else []
    return [flat[s:e] for s, e in zip(starts, ends, strict=True)]


# --------------------------------------------------------------------------------------------
# returns


def _returns_loop(rewards: list[float], gamma: float) -> list[float]:
    out = [0.0] * len(rewards)
    acc = 0.0
    for t in range(len(rewards) - 1, -1, -1):
        acc = rewards[t] + gamma * acc
        out[t] = acc
    return out


def _returns_flat(flat: np.ndarray, lengths: np.ndarray, gamma: float) -> np.ndarray:
    """Discounted returns of concatenated episodes, shape (sum T_i,)."""
    if flat.size == 0:
        return np.zeros(0)
    max_len = int(lengths.max())
    if flat.size < _MIN_TRANSITIONS_PER_LEVEL * max_len:
        values = flat.tolist()
        out: list[float] = []
        start = 0
        for n in lengths.tolist():
            out += _returns_loop(values[start : start + n], gamma)
            start += n
        return np.array(out, dtype=np.float64)
    # Level by level from the end: level k holds every episode's turn T_i - 1 - k, so the
    # whole batch moves one step back per numpy call (max_len calls in all).
    last = np.cumsum(lengths) - 1
    by_length = np.argsort(-lengths, kind="stable")
    last_sorted = last[by_length]
    # active[k] = number of episodes longer than k (episodes sorted longest first).
    active = np.searchsorted(-lengths[by_length], -np.arange(max_len), side="left")
    returns = flat.copy()
    for k in range(1, max_len):
        idx = last_sorted[: active[k]] - k
        returns[idx] += gamma * returns[idx + 1]
    return returns


def discounted_returns(rewards: Rewards, gamma: float) -> np.ndarray:
    """Return-to-go of one episode: shape (T,) -> (T,), ``G_t = r_t + gamma * G_{t+1}``.

    The episode is taken to end after its last turn (no bootstrap), also when it was truncated.
    """
    gamma = _check_gamma(gamma)
    arr = _as_episode(rewards)
    return np.array(_returns_loop(arr.tolist(), gamma), dtype=np.float64)


def batch_returns(episodes: Sequence[Rewards], gamma: float) -> list[np.ndarray]:
    """Return-to-go of every episode: N episodes of shape (T_i,) -> N arrays of shape (T_i,)."""
    gamma = _check_gamma(gamma)
    flat, lengths = _flatten_episodes(episodes)
    return _split(_returns_flat(flat, lengths, gamma), lengths)


def rebn_advantages(
    episodes_rewards: Sequence[Rewards], gamma: float, eps: float = 1e-8
) -> list[np.ndarray]:
    """ReBN advantages: returns normalised over every transition in the batch.

    Each turn is one transition. Its return ``G_t`` (see :func:`discounted_returns`) is
    normalised with the mean and (population) std of *all* returns in the batch, across
    episodes: ``A_t = (G_t - mean) / (std + eps)``. No critic. N episodes of shape (T_i,) ->
    N arrays of shape (T_i,). If every return in the batch is equal the advantages are exactly
    zero (the batch carries no learning signal); an empty batch gives empty arrays.
    """
    gamma = _check_gamma(gamma)
    eps = _check_eps(eps)
    flat, lengths = _flatten_episodes(episodes_rewards)
    returns = _returns_flat(flat, lengths, gamma)
    if returns.size == 0 or np.all(returns == returns[0]):
        # An exact check: the mean of equal floats can round, which eps would then amplify.
        return _split(np.zeros_like(returns), lengths)
    centred = returns - returns.mean()
    return _split(centred / (returns.std() + eps), lengths)


# --------------------------------------------------------------------------------------------
# group baselines


def _as_groups(
    rewards: Rewards | Sequence[Sequence[float]], group_ids: Sequence[object] | np.ndarray | None
) -> tuple[np.ndarray, np.ndarray, int, tuple[int, ...]]:
    """Flat rewards (N,), group index per reward (N,), number of groups, and output shape."""
    if isinstance(rewards, (str, bytes)):
        raise RLInputError(f"rewards must be numbers, got the string {rewards!r}")
    try:
        arr = np.asarray(rewards, dtype=np.float64)
    except (TypeError, ValueError):
        lengths = _row_lengths(rewards)
        if lengths is not None and len(set(lengths)) > 1:
            raise RLInputError(
                f"rewards rows have different lengths ({sorted(set(lengths))}); a 2-D input "
                f"needs groups of one size. For groups of different sizes pass a flat array of "
                f"rewards with group_ids (one id per reward)"
            ) from None
        raise RLInputError(
            "rewards must be a 2-D array (num_groups, group_size) or a flat array of numbers "
            "with group_ids"
        ) from None
    if arr.ndim == 2:
        if group_ids is not None:
            raise RLInputError(
                "pass either a 2-D rewards array (one row per group) or a flat array with "
                "group_ids, not both"
            )
        num_groups, group_size = arr.shape
        flat = arr.reshape(-1)
        _check_finite(flat, "rewards")
        return flat, np.repeat(np.arange(num_groups), group_size), num_groups, arr.shape
    if arr.ndim != 1:
        raise RLInputError(
            f"rewards must be 2-D (num_groups, group_size) or 1-D with group_ids, "
            f"got shape {arr.shape}"
        )
    if group_ids is None:
        raise RLInputError(
            "a flat rewards array needs group_ids (one per reward, naming its prompt/group); "
            "or pass a 2-D array of shape (num_groups, group_size)"
        )
    _check_finite(arr, "rewards")
    ids = np.asarray(group_ids)
    if ids.ndim != 1 or len(ids) != len(arr):
        raise RLInputError(
            f"group_ids must be 1-D with one id per reward: got shape {ids.shape} for "
            f"{len(arr)} rewards"
        )
    try:
        _, inverse = np.unique(ids, return_inverse=True)
    except TypeError:
        raise RLInputError(
            "group_ids must be all numbers or all strings, so that equal ids can be matched"
        ) from None
    inverse = inverse.reshape(-1)
    return arr, inverse, int(inverse.max()) + 1 if inverse.size else 0, arr.shape


def _row_lengths(rewards: object) -> list[int] | None:
    if not isinstance(rewards, Sequence):
        return None
    try:
        return [len(row) for row in rewards]
    except TypeError:
        return None


def _group_stats(
    flat: np.ndarray, inverse: np.ndarray, num_groups: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-reward deviation from its group mean, its group's size, and whether it is constant."""
    counts = np.bincount(inverse, minlength=num_groups)
    means = np.bincount(inverse, weights=flat, minlength=num_groups) / np.maximum(counts, 1)
    hi = np.full(num_groups, -np.inf)
    lo = np.full(num_groups, np.inf)
    np.maximum.at(hi, inverse, flat)
    np.minimum.at(lo, inverse, flat)
    deviation = flat - means[inverse]
    return deviation, counts, (hi == lo)[inverse]


def grpo_advantages(
    rewards: Rewards | Sequence[Sequence[float]],
    group_ids: Sequence[object] | np.ndarray | None = None,
    *,
    scale: Literal["std", "none"] = "std",
    eps: float = 1e-6,
) -> np.ndarray:
    """GRPO advantages: each reward minus its group's mean, divided by the group's std.

    ``rewards`` is ``(num_groups, group_size)``, or ``(N,)`` with ``group_ids`` of shape
    ``(N,)``; the result has the shape of ``rewards``. ``scale="std"`` divides by the sample
    std (``ddof=1``, as TRL and verl do) plus ``eps``; ``scale="none"`` is Dr. GRPO. A group of
    size 1, or whose rewards are all equal, gets advantage exactly 0: it has no baseline to
    compare against and carries no signal.
    """
    if scale not in ("std", "none"):
        raise RLInputError(f"scale must be 'std' or 'none', got {scale!r}")
    eps = _check_eps(eps)
    flat, inverse, num_groups, shape = _as_groups(rewards, group_ids)
    if flat.size == 0:
        return np.zeros(shape)
    deviation, counts, constant = _group_stats(flat, inverse, num_groups)
    if scale == "std":
        sq = np.bincount(inverse, weights=deviation**2, minlength=num_groups)
        std = np.sqrt(sq / np.maximum(counts - 1, 1))
        deviation = deviation / (std[inverse] + eps)
    return np.where(constant, 0.0, deviation).reshape(shape)


def dr_grpo_advantages(
    rewards: Rewards | Sequence[Sequence[float]],
    group_ids: Sequence[object] | np.ndarray | None = None,
) -> np.ndarray:
    """Dr. GRPO advantages: reward minus its group's mean, with no std division.

    Same shapes as :func:`grpo_advantages`. Dr. GRPO (Liu et al., 2025, "Understanding
    R1-Zero-Like Training") removes two biases of GRPO. The std division up-weights groups that
    are nearly all right or all wrong; this function drops it. The other bias lives in the
    *loss*, not the advantage, and is the trainer's job: GRPO averages each response's token
    losses over that response's own length ``|o_i|``, so a long wrong answer is penalised less
    per token than a short one (and a short right answer rewarded more), which drifts toward
    long wrong answers. A Dr. GRPO trainer sums the token losses of all responses and divides
    by a constant that does not depend on any response's length (e.g. ``num_responses *
    max_completion_tokens``, TRL's ``loss_type="dr_grpo"``).
    """
    return grpo_advantages(rewards, group_ids, scale="none")


def rloo_advantages(
    rewards: Rewards | Sequence[Sequence[float]],
    group_ids: Sequence[object] | np.ndarray | None = None,
) -> np.ndarray:
    """RLOO advantages: each reward minus the mean of the *other* rewards in its group.

    Same shapes as :func:`grpo_advantages`. For a group of size ``G > 1`` this is
    ``r_i - (sum_j r_j - r_i) / (G - 1) = G / (G - 1) * (r_i - mean)``, an unbiased baseline
    because it does not use ``r_i``. A group of size 1 has no other sample, so no baseline:
    its advantage is defined as 0 (the sample is not learned from), like a group whose rewards
    are all equal.
    """
    flat, inverse, num_groups, shape = _as_groups(rewards, group_ids)
    if flat.size == 0:
        return np.zeros(shape)
    deviation, counts, constant = _group_stats(flat, inverse, num_groups)
    size = counts[inverse]
    factor = size / np.maximum(size - 1, 1)
    return np.where(constant, 0.0, deviation * factor).reshape(shape)
