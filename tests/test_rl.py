"""gemkit.rl: returns, ReBN, GRPO, Dr. GRPO and RLOO advantages match their plain definitions."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from gemkit.errors import GemkitError
from gemkit.rl import (
    RLInputError,
    batch_returns,
    discounted_returns,
    dr_grpo_advantages,
    grpo_advantages,
    rebn_advantages,
    rloo_advantages,
)

FAST = settings(max_examples=40, deadline=None)

# ---------------------------------------------------------------------------------------------
# plain reference implementations, written from the definitions


def ref_returns(rewards: list[float], gamma: float) -> list[float]:
    """G_t = sum over k >= t of gamma^(k - t) * r_k."""
    return [
        sum(gamma ** (k - t) * rewards[k] for k in range(t, len(rewards)))
        for t in range(len(rewards))
    ]


def ref_rebn(episodes: list[list[float]], gamma: float, eps: float) -> tuple[list, float]:
    """Per-episode advantages and the population std of all returns in the batch."""
    returns = [ref_returns(ep, gamma) for ep in episodes]
    flat = [g for ep in returns for g in ep]
    mean = sum(flat) / len(flat)
    std = math.sqrt(sum((g - mean) ** 2 for g in flat) / len(flat))
    return [[(g - mean) / (std + eps) for g in ep] for ep in returns], std


def ref_groups(rewards: list[float], ids: list[object]) -> dict[object, list[int]]:
    groups: dict[object, list[int]] = {}
    for i, gid in enumerate(ids):
        groups.setdefault(gid, []).append(i)
    return groups


def ref_grpo(rewards: list[float], ids: list[object], scale: str, eps: float) -> list[float]:
    out = [0.0] * len(rewards)
    for members in ref_groups(rewards, ids).values():
        values = [rewards[i] for i in members]
        if len(set(values)) == 1:
            continue  # size 1 or all equal: advantage 0
        mean = sum(values) / len(values)
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
        for i in members:
            out[i] = (rewards[i] - mean) / (std + eps if scale == "std" else 1.0)
    return out


def ref_rloo(rewards: list[float], ids: list[object]) -> list[float]:
    out = [0.0] * len(rewards)
    for members in ref_groups(rewards, ids).values():
        if len(members) == 1:
            continue
        for i in members:
            others = [rewards[j] for j in members if j != i]
            out[i] = rewards[i] - sum(others) / len(others)
    return out


# ---------------------------------------------------------------------------------------------
# strategies

rewards_st = st.floats(-100, 100, allow_nan=False)
# Quarter steps make ties likely and keep group stds away from rounding noise.
grid_st = st.integers(-8, 8).map(lambda x: x / 4)
gamma_st = st.one_of(st.just(1.0), st.floats(0.05, 1.0))
episode_st = st.lists(rewards_st, min_size=0, max_size=12)
episodes_st = st.lists(episode_st, min_size=1, max_size=20)
groups_2d_st = st.integers(1, 6).flatmap(
    lambda size: st.lists(st.lists(grid_st, min_size=size, max_size=size), min_size=1, max_size=8)
)
flat_groups_st = st.lists(
    st.tuples(st.sampled_from(["a", "b", "c", "d", "e"]), grid_st), min_size=1, max_size=30
)


def close(a, b, tol: float = 1e-9) -> None:
    np.testing.assert_allclose(
        np.asarray(a, dtype=float), np.asarray(b, dtype=float), atol=tol, rtol=tol
    )


# ---------------------------------------------------------------------------------------------
# returns


@FAST
@given(episode_st, gamma_st)
def test_discounted_returns_match_the_sum_of_discounted_future_rewards(rewards, gamma):
    out = discounted_returns(rewards, gamma)
    assert out.shape == (len(rewards),) and out.dtype == np.float64
    close(out, ref_returns(rewards, gamma), tol=1e-7)


def test_discounted_returns_of_a_reward_at_the_last_turn_decay_towards_the_start():
    close(discounted_returns([0, 0, 1], 0.9), [0.81, 0.9, 1.0])


@FAST
@given(episodes_st, gamma_st)
def test_batch_returns_match_each_episode_alone(episodes, gamma):
    out = batch_returns(episodes, gamma)
    assert len(out) == len(episodes)
    for ep, got in zip(episodes, out, strict=True):
        close(got, ref_returns(ep, gamma), tol=1e-7)


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 2**32 - 1), gamma_st)
def test_batch_returns_of_many_short_episodes_match_the_reference(seed, gamma):
    # Many episodes of mixed short lengths take the vectorised (level by level) path.
    rng = np.random.default_rng(seed)
    episodes = [rng.normal(size=rng.integers(1, 9)).tolist() for _ in range(600)]
    got = batch_returns(episodes, gamma)
    assert [len(g) for g in got] == [len(e) for e in episodes]
    close(np.concatenate(got), [g for ep in episodes for g in ref_returns(ep, gamma)], tol=1e-7)


def test_batch_returns_of_one_long_episode_among_short_ones_match_the_reference():
    rng = np.random.default_rng(0)
    episodes = [rng.normal(size=300).tolist()] + [rng.normal(size=2).tolist() for _ in range(50)]
    for ep, got in zip(episodes, batch_returns(episodes, 0.97), strict=True):
        close(got, ref_returns(ep, 0.97), tol=1e-7)


def test_batch_returns_accept_lists_arrays_and_a_2d_array_alike():
    episodes = [[0.0, 1.0, 0.5], [1.0, 0.0, -1.0]]
    as_lists = batch_returns(episodes, 0.9)
    for other in (
        batch_returns([np.array(e) for e in episodes], 0.9),
        batch_returns(np.array(episodes), 0.9),
    ):
        for a, b in zip(as_lists, other, strict=True):
            close(a, b, tol=0)


# ---------------------------------------------------------------------------------------------
# ReBN


@FAST
@given(episodes_st, gamma_st)
def test_rebn_advantages_match_returns_normalised_over_the_whole_batch(episodes, gamma):
    assume(sum(map(len, episodes)) > 0)
    expected, std = ref_rebn(episodes, gamma, 1e-8)
    assume(std > 1e-6)  # below that, rounding noise in the returns dominates the ratio
    out = rebn_advantages(episodes, gamma)
    assert [len(a) for a in out] == [len(e) for e in episodes]
    for got, want in zip(out, expected, strict=True):
        close(got, want, tol=1e-6)


@FAST
@given(episodes_st, gamma_st)
def test_rebn_batch_has_mean_zero_and_std_one_when_returns_vary(episodes, gamma):
    assume(sum(map(len, episodes)) > 1)
    _, std = ref_rebn(episodes, gamma, 1e-8)
    assume(std > 1e-3)
    flat = np.concatenate(rebn_advantages(episodes, gamma))
    assert abs(flat.mean()) < 1e-6
    assert abs(flat.std() - 1.0) < 1e-4


@FAST
@given(st.floats(-5, 5), st.lists(st.integers(1, 5), min_size=1, max_size=10))
def test_rebn_advantages_are_exactly_zero_when_all_returns_are_equal(reward, lengths):
    # gamma = 1 with a reward only at the last turn: every turn of every episode returns `reward`.
    episodes = [[0.0] * (n - 1) + [reward] for n in lengths]
    for adv in rebn_advantages(episodes, 1.0):
        assert np.all(adv == 0.0)


def test_rebn_with_gamma_below_one_favours_the_shorter_successful_episode():
    short, long, failed = [0, 0, 1], [0, 0, 0, 0, 0, 1], [0, 0, 0]
    a_short, a_long, a_failed = rebn_advantages([short, long, failed], 0.9)
    assert a_short[0] > a_long[0] > a_failed[0]


def test_rebn_with_gamma_one_does_not_reward_speed():
    short, long, failed = [0, 0, 1], [0, 0, 0, 0, 0, 1], [0, 0, 0]
    a_short, a_long, a_failed = rebn_advantages([short, long, failed], 1.0)
    assert a_short[0] == a_long[0] > a_failed[0]


def test_rebn_of_empty_episodes_gives_empty_arrays():
    assert rebn_advantages([], 0.9) == []
    out = rebn_advantages([[], [1.0, 0.0]], 0.9)
    assert out[0].shape == (0,) and out[1].shape == (2,)


# ---------------------------------------------------------------------------------------------
# GRPO, Dr. GRPO, RLOO


def row_ids(rows: list[list[float]]) -> tuple[list[float], list[int]]:
    return [r for row in rows for r in row], [i for i, row in enumerate(rows) for _ in row]


@FAST
@given(groups_2d_st, st.sampled_from(["std", "none"]))
def test_grpo_on_a_2d_array_matches_the_per_group_definition(rows, scale):
    flat, ids = row_ids(rows)
    out = grpo_advantages(rows, scale=scale)
    assert out.shape == (len(rows), len(rows[0]))
    close(out.reshape(-1), ref_grpo(flat, ids, scale, 1e-6))


@FAST
@given(flat_groups_st, st.sampled_from(["std", "none"]))
def test_grpo_with_group_ids_matches_the_per_group_definition(pairs, scale):
    ids, rewards = [p[0] for p in pairs], [p[1] for p in pairs]
    out = grpo_advantages(rewards, ids, scale=scale)
    assert out.shape == (len(rewards),)
    close(out, ref_grpo(rewards, ids, scale, 1e-6))


@FAST
@given(groups_2d_st)
def test_grpo_group_advantages_sum_to_zero(rows):
    for scale in ("std", "none"):
        assert np.all(np.abs(grpo_advantages(rows, scale=scale).sum(axis=1)) < 1e-9)


@FAST
@given(st.lists(st.lists(rewards_st, min_size=3, max_size=3), min_size=1, max_size=8))
def test_dr_grpo_is_reward_minus_group_mean_without_std_division(rows):
    expected = [
        [r - sum(row) / len(row) if len(set(row)) > 1 else 0.0 for r in row] for row in rows
    ]
    close(dr_grpo_advantages(rows), expected, tol=1e-9)
    close(dr_grpo_advantages(rows), grpo_advantages(rows, scale="none"), tol=0)


def test_grpo_divides_by_the_sample_std_like_trl_and_verl():
    # [0, 1]: mean 0.5, sample std (ddof=1) = sqrt(0.5), so advantages are -+0.5 / sqrt(0.5).
    close(grpo_advantages([[0.0, 1.0]], eps=0.0), [[-math.sqrt(0.5), math.sqrt(0.5)]])


@FAST
@given(groups_2d_st)
def test_rloo_on_a_2d_array_matches_leave_one_out(rows):
    flat, ids = row_ids(rows)
    close(rloo_advantages(rows).reshape(-1), ref_rloo(flat, ids))


@FAST
@given(flat_groups_st)
def test_rloo_with_group_ids_matches_leave_one_out(pairs):
    ids, rewards = [p[0] for p in pairs], [p[1] for p in pairs]
    close(rloo_advantages(rewards, ids), ref_rloo(rewards, ids))


@FAST
@given(groups_2d_st)
def test_rloo_is_the_dr_grpo_advantage_scaled_by_g_over_g_minus_one(rows):
    size = len(rows[0])
    assume(size > 1)
    close(rloo_advantages(rows), dr_grpo_advantages(rows) * size / (size - 1))


@FAST
@given(flat_groups_st, st.randoms(use_true_random=False))
def test_group_advantages_do_not_depend_on_where_group_members_sit(pairs, rnd):
    shuffled = list(pairs)
    rnd.shuffle(shuffled)
    for fn in (grpo_advantages, dr_grpo_advantages, rloo_advantages):
        before = dict(
            zip(map(tuple, pairs), fn([p[1] for p in pairs], [p[0] for p in pairs]), strict=True)
        )
        after = fn([p[1] for p in shuffled], [p[0] for p in shuffled])
        close([before[tuple(p)] for p in shuffled], after)


@pytest.mark.parametrize("fn", [grpo_advantages, dr_grpo_advantages, rloo_advantages])
def test_groups_of_one_sample_get_advantage_zero(fn):
    assert np.all(fn([[3.0], [-1.0]]) == 0.0)
    assert np.all(fn([3.0, -1.0, 2.0], ["a", "b", "c"]) == 0.0)


@pytest.mark.parametrize("fn", [grpo_advantages, dr_grpo_advantages, rloo_advantages])
def test_groups_with_equal_rewards_get_advantage_exactly_zero(fn):
    assert np.all(fn([[0.1, 0.1, 0.1], [0.7, 0.7, 0.7]]) == 0.0)


# ---------------------------------------------------------------------------------------------
# validation


@pytest.mark.parametrize("gamma", [0.0, -0.5, 1.5, float("nan"), float("inf"), "0.9", None, True])
def test_gamma_outside_zero_one_is_refused_with_the_allowed_range(gamma):
    for call in (
        lambda: discounted_returns([1.0], gamma),
        lambda: batch_returns([[1.0]], gamma),
        lambda: rebn_advantages([[1.0]], gamma),
    ):
        with pytest.raises(RLInputError, match=r"gamma must be .*\(0, 1\]"):
            call()


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_rewards_are_refused_naming_where_they_are(bad):
    with pytest.raises(RLInputError, match="item 1"):
        discounted_returns([0.0, bad], 0.9)
    with pytest.raises(RLInputError, match="episode 1 turn 2"):
        rebn_advantages([[0.0], [0.0, 0.0, bad]], 0.9)
    with pytest.raises(RLInputError, match="finite"):
        grpo_advantages([[0.0, bad]])
    with pytest.raises(RLInputError, match="finite"):
        rloo_advantages([0.0, bad], [0, 0])


def test_a_single_flat_episode_passed_as_a_batch_is_refused_with_a_hint():
    with pytest.raises(RLInputError, match=r"wrap a single episode in a list"):
        rebn_advantages([0.0, 1.0], 0.9)


@pytest.mark.parametrize("episodes", [[[1.0, "x"]], [[1.0, [2.0]]], ["abc"], [np.zeros((2, 2))]])
def test_episodes_that_are_not_flat_lists_of_numbers_are_refused(episodes):
    with pytest.raises(RLInputError, match="episode 0"):
        batch_returns(episodes, 0.9)


def test_ragged_2d_group_rewards_are_refused_pointing_to_group_ids():
    with pytest.raises(RLInputError, match="different lengths.*group_ids"):
        grpo_advantages([[1.0, 0.0], [1.0]])


def test_flat_rewards_without_group_ids_are_refused():
    with pytest.raises(RLInputError, match="needs group_ids"):
        rloo_advantages([1.0, 0.0])


def test_group_ids_of_the_wrong_length_are_refused():
    with pytest.raises(RLInputError, match="one id per reward"):
        grpo_advantages([1.0, 0.0, 1.0], [0, 0])


def test_a_2d_array_with_group_ids_is_refused():
    with pytest.raises(RLInputError, match="not both"):
        grpo_advantages([[1.0, 0.0]], [0, 0])


def test_rewards_of_three_dimensions_are_refused():
    with pytest.raises(RLInputError, match="got shape"):
        grpo_advantages(np.zeros((2, 2, 2)))


def test_an_unknown_scale_or_a_negative_eps_is_refused():
    with pytest.raises(RLInputError, match="scale must be 'std' or 'none'"):
        grpo_advantages([[1.0, 0.0]], scale="mean")  # type: ignore[arg-type]
    with pytest.raises(RLInputError, match="eps must be"):
        rebn_advantages([[1.0]], 0.9, eps=-1.0)


def test_input_errors_are_value_errors_and_gemkit_errors():
    assert issubclass(RLInputError, ValueError) and issubclass(RLInputError, GemkitError)


def test_rl_imports_without_gymnasium_or_torch():
    code = (
        "import sys; sys.modules['gymnasium'] = None; sys.modules['torch'] = None\n"
        "import gemkit.rl\n"
        "print(gemkit.rl.rebn_advantages([[0, 1]], 0.9)[0].shape)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "(2,)"
