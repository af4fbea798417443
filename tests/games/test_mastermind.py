"""Mastermind: peg scoring, move parsing, rewards and the minimax expert."""

from __future__ import annotations

import pytest

from gemkit.envs.games.mastermind import Mastermind, MastermindExpert, score


@pytest.mark.parametrize(
    ("guess", "code", "pegs"),
    [
        ((1, 2, 3, 4), (1, 2, 3, 4), (4, 0)),
        ((1, 2, 3, 4), (4, 3, 2, 1), (0, 4)),
        ((1, 1, 2, 2), (1, 2, 1, 1), (1, 2)),  # a code peg counts once, even if guessed twice
        ((1, 1, 1, 1), (1, 2, 3, 4), (1, 0)),
        ((2, 2, 1, 1), (1, 1, 2, 2), (0, 4)),
        ((5, 5, 6, 6), (1, 2, 3, 4), (0, 0)),
    ],
)
def test_pegs_count_each_code_peg_at_most_once(guess, code, pegs):
    assert score(guess, code) == pegs


def new_game(seed: int = 0, **kwargs) -> Mastermind:
    env = Mastermind(**{"code_length": 4, "num_colors": 6, "max_turns": 12, **kwargs})
    env.reset(seed=seed)
    return env


def test_cracking_the_code_at_once_earns_full_shaping_plus_one():
    env = new_game()
    code = " ".join(map(str, env.code))
    obs, reward, terminated, _, info = env.step(f"\\boxed{{{code}}}")
    assert terminated and info["success"] and reward == pytest.approx(1.5)
    assert "cracked" in obs


def test_shaping_pays_only_for_more_black_pegs_than_before():
    env = new_game()
    env.code = (1, 2, 3, 4)
    first = env.step("\\boxed{1 5 5 5}")[1]
    again = env.step("\\boxed{1 6 6 6}")[1]
    more = env.step("\\boxed{1 2 6 6}")[1]
    assert first == pytest.approx(0.125) and again == 0.0 and more == pytest.approx(0.125)


@pytest.mark.parametrize("move", ["1234", "1, 2, 3, 4", " 1 2  3 4 "])
def test_digits_may_be_joined_or_separated(move):
    env = new_game()
    env.code = (1, 2, 3, 4)
    assert env.step(f"\\boxed{{{move}}}")[4]["success"]


@pytest.mark.parametrize(
    ("move", "says"),
    [("1 2 3", "exactly 4 digits"), ("1 2 3 7", "colours are 1..6"), ("a b c d", "not a colour")],
)
def test_malformed_codes_are_invalid_and_say_why(move, says):
    env = new_game()
    obs, reward, terminated, _, info = env.step(f"\\boxed{{{move}}}")
    assert info["invalid"] and not terminated and reward < 0
    assert "Invalid move" in obs and says in obs
    assert env.history == []


def test_history_lists_every_guess_with_its_pegs():
    env = new_game()
    env.code = (1, 1, 2, 2)
    obs = env.step("\\boxed{1 2 1 1}")[0]
    assert "1. 1 2 1 1 -> 1 black, 2 white" in obs


@pytest.mark.parametrize("seed", range(5))
def test_expert_cracks_four_of_six_within_five_guesses(seed):
    env, expert = new_game(seed), MastermindExpert(code_length=4, num_colors=6)
    obs, _ = env.reset(seed=seed)
    for _ in range(5):
        obs, _, terminated, _, info = env.step(expert.choose(obs))
        if terminated:
            break
    assert info.get("success"), "not cracked within 5 guesses"
