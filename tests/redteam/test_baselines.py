"""Attacks through the baselines: a random policy must not see the env's secret or its RNG.

`gemkit run ID --policy random` seeds the policy of episode k with the same number as the
env's reset (`SEED + k`). When the policy drew from a generator built from that seed the
same way as the env's, it drew the same numbers as the env: the same index as the secret
word, the same code, the same number, and "won" every game. These tests play the random
baseline exactly as the CLI does and hold it to the rate chance allows, and check that
handing it the env's own seed buys it nothing.
"""

from __future__ import annotations

import math
from math import comb

import numpy as np
import pytest

import gemkit
from gemkit.cli.run import run_policy
from gemkit.envs.games.hangman import _targets
from gemkit.envs.games.wordle import _answers

N = 300


def wins(env_id: str, seeds: range, policy_seed: int) -> float:
    """Success rate of the random policy over episodes `seeds`, policy seeded `s + offset`."""
    won = 0
    for s in seeds:
        env = gemkit.make(env_id)
        policy = gemkit.make_policy("random", env_id, seed=s + policy_seed)
        obs, _ = env.reset(seed=s)
        info: dict = {}
        for _ in range(1_000):
            obs, _, terminated, truncated, info = env.step(policy.choose(obs))
            if terminated or truncated:
                break
        won += bool(info.get("success"))
        env.close()
    return won / len(seeds)


def hangman_chance(min_length: int, max_length: int, misses: int) -> float:
    """Chance that random letters find every letter of the word before `misses` misses.

    The order in which new letters turn up is a uniform permutation of the 26; the game is
    won iff the word's k distinct letters all come among the first k + misses - 1 of them
    (repeated guesses only waste turns, so this bounds the rate from above).
    """
    ks = [len(set(w)) for w in _targets(min_length, max_length)]
    return sum(comb(k + misses - 1, k) / comb(26, k) for k in ks) / len(ks)


#: id -> the chance a uniformly random well-formed policy wins an episode (upper bound for
#: Hangman); random guesses are independent draws, repeats included
CHANCE = {
    "game:GuessTheNumber-v0-easy": 1 - (19 / 20) ** 8,
    "game:GuessTheNumber-v0-hard": 1 - (99 / 100) ** 10,
    "game:Mastermind-v0-easy": 1 - (1 - 1 / 4**3) ** 12,
    "game:Mastermind-v0-hard": 1 - (1 - 1 / 6**4) ** 12,
    "game:Wordle-v0-easy": 1 - (1 - 1 / len(_answers(5, True))) ** 10,
    "game:Wordle-v0-hard": 1 - (1 - 1 / len(_answers(5, False))) ** 6,
    "game:Hangman-v0-easy": hangman_chance(4, 6, 10),
    "toy:Doors-v0": 1 - (3 / 4) ** 4,
    "toy:Copy-v0": (1 / 8) ** 3,
    "toy:Copy-v0-single": 1 / 8,
}
EXACT = set(CHANCE) - {"game:Hangman-v0-easy"}


def slack(p: float, n: int) -> float:
    """Four binomial standard deviations and a little: a bound a fair policy never crosses."""
    return 4 * math.sqrt(p * (1 - p) / n) + 0.02


@pytest.mark.parametrize("env_id", sorted(CHANCE))
def test_random_baseline_wins_at_the_rate_chance_predicts(env_id):
    # the pairing `gemkit run` makes: the policy of episode s is seeded s, like the env
    rate, p = wins(env_id, range(N), 0), CHANCE[env_id]
    assert rate <= p + slack(p, N), f"{env_id}: random won {rate:.0%}, chance is {p:.1%}"
    if env_id in EXACT:  # it still plays: it wins as often as chance says, not never
        assert rate >= p - slack(p, N)


#: every game or toy with something hidden from the player (secret, mines, future draws)
HIDDEN = [
    "game:GuessTheNumber-v0-medium",
    "game:Hangman-v0-hard",
    "game:Minesweeper-v0-easy",
    "game:Sudoku-v0-easy",
    "game:Game2048-v0-easy",
    "multiagent:RockPaperScissors-v0-vs_nash",
    "multiagent:KuhnPoker-v0-vs_nash",
    *sorted(CHANCE),
]


@pytest.mark.parametrize("env_id", HIDDEN)
def test_handing_the_random_policy_the_env_seed_buys_it_nothing(env_id):
    matched = wins(env_id, range(N), 0)
    unrelated = wins(env_id, range(N), 10**6)
    p = max(matched, unrelated, 0.05)
    assert abs(matched - unrelated) <= 1.5 * slack(p, N), (matched, unrelated)


@pytest.mark.parametrize("env_id", ["game:Wordle-v0-easy", "game:GuessTheNumber-v0-easy"])
def test_gemkit_run_reports_a_chance_level_random_baseline(env_id):
    rows = run_policy([env_id], "random", 100, seed=0, concurrency=64, out=None)
    p = CHANCE[env_id]
    assert rows[env_id]["success_rate"] <= p + slack(p, 100)


def test_a_policy_stream_shares_no_draws_with_the_env_stream_of_its_seed():
    for seed in range(50):
        env = gemkit.make("game:GuessTheNumber-v0-easy")
        env.reset(seed=seed)
        policy = gemkit.make_policy("random", "game:GuessTheNumber-v0-easy", seed=seed)
        ours, theirs = policy.rng.random(8), env.unwrapped.np_random.random(8)
        assert not np.isin(ours, theirs).any()
    again = gemkit.make_policy("random", "game:GuessTheNumber-v0-easy", seed=3).rng.random()
    assert again == gemkit.make_policy("random", "game:GuessTheNumber-v0-easy", seed=3).rng.random()
