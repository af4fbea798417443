"""The toy family: CopyWord rewards each correct copy; Doors rules out wrong doors."""

from __future__ import annotations

import gemkit
from gemkit.envs.toy.copy_word import first_word
from gemkit.rollout import run_episodes, summarize


def test_copy_rewards_each_correct_copy_and_succeeds_only_when_all_are_right():
    env = gemkit.make("toy:Copy-v0")
    obs, _ = env.reset(seed=3)
    word = obs.rsplit("Word:", 1)[1].strip()
    obs, reward, terminated, _, _ = env.step(word)
    assert (reward, terminated) == (1.0, False)
    obs, reward, _, _, _ = env.step("nothing")
    assert reward == 0.0 and "Wrong, the word was" in obs
    word = obs.rsplit("Word:", 1)[1].strip()
    _, reward, terminated, _, info = env.step(f"\\boxed{{{word}}}")
    assert (reward, terminated, info["success"]) == (1.0, True, False)


def test_copy_is_deterministic_given_the_seed():
    a, b = gemkit.make("toy:Copy-v0"), gemkit.make("toy:Copy-v0")
    assert a.reset(seed=7) == b.reset(seed=7)
    assert a.step("x") == b.step("x")


def test_first_word_ignores_case_punctuation_and_box():
    assert first_word("  Apple. and more") == "apple"
    assert first_word("\\boxed{river}") == "river"
    assert first_word("") == ""


def test_experts_solve_every_toy_task():
    for env_id in ("toy:Copy-v0", "toy:Copy-v0-single", "toy:Doors-v0"):
        expert = gemkit.spec(env_id).make_expert
        assert summarize(run_episodes(env_id, expert, 10))["success_rate"] == 1.0


def test_doors_rules_out_a_wrong_door_and_wastes_a_repeat():
    env = gemkit.make("toy:Doors-v0")
    env.reset(seed=0)
    wrong = next(d for d in env.doors if d != env.prize)
    obs, reward, terminated, _, _ = env.step(wrong)
    assert (reward, terminated) == (0.0, False) and f"not {wrong}" in obs
    obs, _, _, _, _ = env.step(wrong)
    assert "already ruled out" in obs
    _, reward, terminated, _, info = env.step(env.prize)
    assert (reward, terminated, info["success"]) == (1.0, True, True)
