"""Every registered game id honours the env contract, and its expert wins easy games."""

from __future__ import annotations

import asyncio
import warnings

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import gemkit
from gemkit.rollout import run_episodes, summarize

GAME_IDS = [s.id for s in gemkit.list_envs("game")]
EASY_IDS = [i for i in GAME_IDS if i.endswith("-easy")]
JUNK = [
    "",
    "hello",
    "\\boxed{}",
    "\\boxed{",
    "\\boxed{zzz}",
    "\\boxed{-99999999999999999999}",
    "\\boxed{1,2,3,4,5,6,7,8,9,10}",
    "\\boxed{\\boxed{1}}",
    "\x00\x01\x02 \\boxed{\u2603}",
    "\\boxed{" + "9" * 5000 + "}",
]


def play(env_id: str, seed: int, actions: list[str]) -> list[tuple]:
    env = gemkit.make(env_id)
    out = [env.reset(seed=seed)]
    for a in actions:
        step = env.step(a)
        out.append(step)
        if step[2] or step[3]:
            break
    return out


def test_game_family_is_complete():
    names = {gemkit.spec(i).name for i in GAME_IDS}
    assert {
        "GuessTheNumber",
        "Mastermind",
        "Minesweeper",
        "Sudoku",
        "Hangman",
        "Wordle",
        "TowerOfHanoi",
        "Game2048",
        "FifteenPuzzle",
        "Sokoban",
        "LightsOut",
    } <= names
    for name in names:
        assert f"game:{name}-v0-easy" in GAME_IDS and f"game:{name}-v0-hard" in GAME_IDS


@pytest.mark.parametrize("env_id", GAME_IDS)
def test_passes_gymnasium_env_checker(env_id):
    env = gemkit.make(env_id)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env, skip_render_check=True)


@pytest.mark.parametrize("env_id", GAME_IDS)
def test_same_seed_same_episode(env_id):
    rng = np.random.default_rng(0)
    sampler = gemkit.make(env_id).unwrapped.random_action
    actions = [sampler(rng) for _ in range(15)]
    assert play(env_id, 7, actions) == play(env_id, 7, actions)
    # hidden-information games may open identically: compare short trajectories instead
    first = {str(play(env_id, s, actions[:3])) for s in range(8)}
    assert len(first) > 1, "different seeds should give different games"


@pytest.mark.parametrize("env_id", GAME_IDS)
def test_invalid_actions_answer_with_a_message(env_id):
    env = gemkit.make(env_id)
    env.reset(seed=1)
    for junk in JUNK:
        obs, reward, terminated, truncated, info = env.step(junk)
        assert isinstance(obs, str) and obs
        assert isinstance(reward, float)
        if terminated or truncated:
            env.reset(seed=1)
            continue
        if info.get("invalid"):
            assert "Invalid move" in obs and "\\boxed" in obs


#: the `-gem` variants play by GEM's rules: a move with no boxed answer ends the game there
GEM_RULES = {s.id for s in gemkit.list_envs("game") if "gem-rules" in s.tags}


@pytest.mark.parametrize("env_id", GAME_IDS)
def test_turn_limit_truncates(env_id):
    env = gemkit.make(env_id)
    env.reset(seed=3)
    if env_id in GEM_RULES:  # tests/byo/test_gem_rules.py checks them move for move
        terminated, info = env.step("no move here")[2::2]
        assert terminated and info["success"] is False
        return
    for _ in range(env.unwrapped.max_turns):
        obs, reward, terminated, truncated, info = env.step("no move here")
        assert not terminated
    assert truncated and info["success"] is False


@pytest.mark.parametrize("env_id", GAME_IDS)
def test_clone_is_independent(env_id):
    env = gemkit.make(env_id)
    env.reset(seed=5)
    rng = np.random.default_rng(1)
    sampler = env.unwrapped.random_action
    env.step(sampler(rng))
    twin = env.clone()
    actions = [sampler(rng) for _ in range(6)]
    a = [env.step(x) for x in actions]
    b = [twin.step(x) for x in actions]
    assert a == b, "a clone must continue exactly like the original"
    # stepping the twin further leaves the original untouched
    before = env.unwrapped.render()
    twin.step(sampler(rng))
    twin.reset(seed=99)
    assert env.unwrapped.render() == before


@pytest.mark.parametrize("env_id", EASY_IDS)
def test_expert_wins_easy_games(env_id):
    episodes = run_episodes(env_id, lambda: gemkit.make_policy("expert", env_id), 40, seed=100)
    stats = summarize(episodes)
    assert stats["errors"] == 0
    assert stats["success_rate"] >= 0.9, stats


@pytest.mark.parametrize("env_id", EASY_IDS)
def test_expert_beats_random(env_id):
    expert = summarize(
        run_episodes(env_id, lambda: gemkit.make_policy("expert", env_id), 20, seed=7)
    )
    rand = summarize(
        run_episodes(env_id, lambda: gemkit.make_policy("random", env_id, seed=0), 20, seed=7)
    )
    assert expert["mean_return"] > rand["mean_return"]


def test_async_twins_match_sync():
    env_id = "game:GuessTheNumber-v0-easy"
    a, b = gemkit.make(env_id), gemkit.make(env_id)

    async def run_async():
        out = [await b.areset(seed=4)]
        for g in ("\\boxed{10}", "\\boxed{5}", "x"):
            out.append(await b.astep(g))
        return out

    sync = [a.reset(seed=4)] + [a.step(g) for g in ("\\boxed{10}", "\\boxed{5}", "x")]
    assert sync == asyncio.run(run_async())


def test_guess_the_number_discount_favours_short_games():
    from gemkit.envs.games.guess_the_number import GuessTheNumber

    def discounted_first_return(rewards, gamma):
        g = 0.0
        for r in reversed(rewards):
            g = r + gamma * g
        return g

    env = GuessTheNumber(low=1, high=20, max_turns=20)
    env.reset(seed=0)
    target = env.target
    wrong = [x for x in range(1, 21) if x != target]
    short = [env.step(f"\\boxed{{{target}}}")[1]]
    env.reset(seed=0)
    long = [env.step(f"\\boxed{{{w}}}")[1] for w in wrong[:5]] + [
        env.step(f"\\boxed{{{target}}}")[1]
    ]
    assert discounted_first_return(short, 0.9) > discounted_first_return(long, 0.9)
    assert sum(short) == sum(long) == 1.0


@pytest.mark.parametrize("env_id", GAME_IDS)
def test_rules_depend_only_on_the_configuration(env_id):
    # GameEnv builds the intro once per instance: the rules may not change with the game
    env = gemkit.make(env_id).unwrapped
    texts = set()
    for s in range(4):
        env.reset(seed=s)
        texts.add((env.rules(), env.move_format()))
    assert len(texts) == 1
