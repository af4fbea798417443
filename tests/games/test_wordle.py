"""Wordle: letter marks with repeated letters, the word list, rewards, and the shipped lists."""

from __future__ import annotations

import re

import numpy as np
import pytest

from gemkit.envs.games.data import common_five, dictionary
from gemkit.envs.games.wordle import Wordle, WordleExpert, _codes, feedback, patterns


@pytest.mark.parametrize(
    ("guess", "target", "marks"),
    [
        ("crane", "crane", "GGGGG"),
        ("speed", "abide", "..Y.Y"),  # one 'e' in the target: only the first extra 'e' is Y
        ("eerie", "there", "Y.Y.G"),  # the green 'e' takes its copy before yellows are given
        ("llama", "hello", "YY..."),
        ("level", "hello", "YG..Y"),
        ("geese", "eerie", ".GY.G"),
        ("abbey", "kebab", "YYGY."),
    ],
)
def test_marks_give_yellow_only_for_unmatched_copies(guess, target, marks):
    assert feedback(guess, target) == marks


def test_vectorised_marks_agree_with_the_reference_rule():
    rng = np.random.default_rng(0)
    words = list(common_five())
    guesses = [words[i] for i in rng.integers(len(words), size=40)] + ["geese", "llama"]
    targets = [words[i] for i in rng.integers(len(words), size=40)] + ["eerie", "hello"]
    table = patterns(_codes(guesses, 5), _codes(targets, 5))
    for i, g in enumerate(guesses):
        for j, t in enumerate(targets):
            code = int(table[i, j])
            decoded = "".join(".YG"[code // 3 ** (4 - k) % 3] for k in range(5))
            assert decoded == feedback(g, t)


def game_with(target: str, **kwargs) -> Wordle:
    env = Wordle(**{"word_length": 5, "max_turns": 6, "common_only": True, **kwargs})
    env.reset(seed=0)
    env.target = target
    return env


@pytest.mark.parametrize(
    ("move", "says"),
    [("zzzzz", "not in the word list"), ("cat", "5 letters"), ("cr4ne", "5 letters"), ("", "5")],
)
def test_guesses_outside_the_word_list_are_invalid_and_say_why(move, says):
    env = game_with("crane")
    obs, reward, _, _, info = env.step(f"\\boxed{{{move}}}")
    assert info["invalid"] and reward < 0 and says in obs and env.history == []


def test_new_greens_are_paid_once_and_solving_pays_one():
    env = game_with("crane")
    first = env.step("\\boxed{crate}")[1]  # c, r, a, e green
    again = env.step("\\boxed{crate}")[1]
    _, last, terminated, _, info = env.step("\\boxed{CRANE}")
    assert first == pytest.approx(0.5 * 4 / 5) and again == 0.0
    assert last == pytest.approx(1.0 + 0.5 / 5) and terminated and info["success"]


def test_state_shows_every_guess_and_the_letters_known_absent():
    env = game_with("hello")
    obs = env.step("\\boxed{llama}")[0]
    assert "1. llama -> Y Y . . ." in obs
    assert "Letters not in the word: a, m." in obs


def test_common_games_draw_common_words_and_hard_games_any_dictionary_word():
    common, words = set(common_five()), set(dictionary())
    easy, hard = Wordle(5, 10, True), Wordle(5, 6, False)
    for seed in range(30):
        easy.reset(seed=seed)
        hard.reset(seed=seed)
        assert easy.target in common and hard.target in words and len(hard.target) == 5


def test_shipped_word_lists_are_clean():
    words, common = dictionary(), common_five()
    assert 30_000 < len(words) <= 60_000 and 1_000 < len(common) < 5_000
    assert all(re.fullmatch(r"[a-z]{4,12}", w) for w in words)
    assert set(common) <= set(words) and all(len(w) == 5 for w in common)
    assert list(words) == sorted(set(words))


@pytest.mark.parametrize("seed", range(5))
def test_expert_solves_common_words_within_six_guesses(seed):
    env, expert = Wordle(5, 6, True), WordleExpert(word_length=5, common_only=True)
    obs, _ = env.reset(seed=seed)
    while True:
        obs, _, terminated, truncated, info = env.step(expert.choose(obs))
        assert not info.get("invalid")
        if terminated or truncated:
            break
    assert info["success"]
