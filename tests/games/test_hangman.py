"""Hangman: letters reveal every position, repeats are refused, misses end the game."""

from __future__ import annotations

import string

import pytest

from gemkit.envs.games.hangman import Hangman, HangmanExpert


def game_with(word: str, max_misses: int = 3) -> Hangman:
    env = Hangman(4, 12, max_misses=max_misses, max_turns=30)
    env.reset(seed=0)
    env.word = word
    return env


def test_a_letter_shows_every_position_it_holds_and_pays_its_share():
    env = game_with("letter")
    obs, reward, terminated, _, _ = env.step("\\boxed{e}")
    assert "Word: _ e _ _ e _ (6 letters)" in obs
    assert reward == pytest.approx(0.5 * 2 / 6) and not terminated


def test_guessing_the_same_letter_again_is_invalid_and_costs_no_miss():
    env = game_with("letter")
    env.step("\\boxed{z}")
    obs, reward, _, _, info = env.step("\\boxed{Z}")
    assert info["invalid"] and reward < 0
    assert "already guessed 'z'" in obs and "Misses: 1 of 3" in obs


def test_running_out_of_misses_loses_and_names_the_word():
    env = game_with("letter", max_misses=2)
    env.step("\\boxed{q}")
    obs, reward, terminated, _, info = env.step("\\boxed{z}")
    assert terminated and info["success"] is False and reward == 0.0
    assert "'letter'" in obs


def test_completing_the_word_wins_with_total_reward_one_and_a_half():
    env = game_with("noon")
    total = 0.0
    for letter in "on":
        _, reward, terminated, _, info = env.step(f"\\boxed{{{letter}}}")
        total += reward
    assert terminated and info["success"] and total == pytest.approx(1.5)


@pytest.mark.parametrize("move", ["ab", "1", "é", "", "e e"])
def test_anything_but_one_letter_is_invalid(move):
    env = game_with("letter")
    obs, _, _, _, info = env.step(f"\\boxed{{{move}}}")
    assert info["invalid"] and "one letter" in obs and env.guessed == []


def test_state_lists_guessed_letters_and_misses_left():
    env = game_with("letter")
    env.step("\\boxed{t}")
    obs = env.step("\\boxed{a}")[0]
    assert "Guessed letters: a, t." in obs and "misses left: 2" in obs


@pytest.mark.parametrize(("lo", "hi"), [(4, 6), (7, 12)])
def test_hidden_words_are_lowercase_and_within_the_length_range(lo, hi):
    env = Hangman(lo, hi, max_misses=5, max_turns=30)
    for seed in range(30):
        env.reset(seed=seed)
        assert lo <= len(env.word) <= hi and set(env.word) <= set(string.ascii_lowercase)


def test_expert_never_repeats_a_letter_and_solves_a_long_word():
    env, expert = game_with("understands", max_misses=5), HangmanExpert()
    obs = env.state_text()
    while True:
        obs, _, terminated, truncated, info = env.step(expert.choose(obs))
        assert not info.get("invalid")
        if terminated or truncated:
            break
    assert info["success"]
