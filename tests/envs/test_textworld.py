"""`textworld:` ids: TextWorld's own generated games, scored as TextWorld scores them.

Each game is generated and compiled by the real TextWorld (1.7.0, offline) once per machine,
into the gemkit cache; the tests below reuse a few seeds so that a fresh machine builds a
handful of games.
"""

from __future__ import annotations

import json
import subprocess
import sys
import warnings

import pytest

import gemkit

textworld = pytest.importorskip("textworld", reason="needs gemkit[textworld]")

from gemkit.envs.textworld.games import World, build  # noqa: E402

EASY = "textworld:Quest-v0-easy"


def play(env, policy, seed):
    obs, _ = env.reset(seed=seed)
    policy.reset()
    rewards, info = [], {}
    for _ in range(200):
        obs, reward, terminated, truncated, info = env.step(policy.choose(obs))
        rewards.append(reward)
        if terminated or truncated:
            break
    return rewards, info


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_walkthrough_expert_wins_and_scores_what_textworld_scores(seed):
    env = gemkit.make(EASY)
    rewards, info = play(env, gemkit.make_policy("expert", EASY), seed)
    assert info["success"] is True and info["won"] is True
    # TextWorld's own env, on the same game file, with the same walkthrough
    game = build(World(2, 4, 2), seed)
    with warnings.catch_warnings():  # Jericho's "not fully supported" for TextWorld's games
        warnings.simplefilter("ignore")
        tw = textworld.start(str(game.path), request_infos=textworld.EnvInfos(score=True, won=True))
        tw.reset()
    for command in game.walkthrough:
        state, score, done = tw.step(command)
    assert done and state["won"]
    assert sum(rewards) == score == info["score"] == info["max_score"] == game.max_score
    env.close()


def test_the_same_seed_is_the_same_game_and_another_seed_another():
    env = gemkit.make(EASY)
    a, _ = env.reset(seed=1)
    again, _ = env.reset(seed=1)
    other, _ = env.reset(seed=2)
    assert a == again and a != other
    assert "TextWorld" in a and "$$" not in a  # the objective, without the ASCII-art banner
    env.close()


def test_a_seed_builds_the_same_game_in_another_process(tmp_path):
    here = build(World(2, 4, 2), 0)
    code = (
        "import json, sys; from pathlib import Path;"
        "from gemkit.envs.textworld.games import World, build;"
        "g = build(World(2, 4, 2), 0, Path(sys.argv[1]));"
        "print(json.dumps([g.uuid, list(g.walkthrough), g.objective]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, check=True
    )
    assert json.loads(out.stdout) == [here.uuid, list(here.walkthrough), here.objective]
    assert (tmp_path / "r2-o4-q2" / "0.z8").is_file()


def test_harder_levels_are_bigger_worlds_with_longer_quests():
    sizes = []
    for level in ("easy", "medium"):
        spec = gemkit.spec(f"textworld:Quest-v0-{level}")
        game = build(
            World(spec.kwargs["nb_rooms"], spec.kwargs["nb_objects"], spec.kwargs["quest_length"]),
            0,
        )
        sizes.append((spec.kwargs["nb_rooms"], len(game.walkthrough)))
    (rooms_easy, quest_easy), (rooms_medium, quest_medium) = sizes
    assert rooms_medium > rooms_easy and quest_medium > quest_easy


def test_junk_and_session_commands_get_a_message_and_leave_the_game_as_it_was():
    env = gemkit.make(EASY)
    env.reset(seed=0)
    look = env.step("look")[0]
    for junk in ["quit", "restore", "", "\\boxed{", "\\help", "x" * 500, "\u2603\u2603", "undo"]:
        obs, reward, terminated, truncated, info = env.step(junk)
        assert reward == 0 and not terminated and not truncated
        assert obs and "Traceback" not in obs
    assert env.step("look")[0] == look  # nothing of the junk changed the world
    quit_obs = env.step("quit")[0]
    assert "not allowed" in quit_obs and "'quit'" in quit_obs
    assert "not allowed" not in env.step("\\boxed{look}")[0]  # a boxed command is unboxed
    env.close()


def test_the_episode_is_cut_at_max_steps_without_success():
    env = gemkit.make(EASY, max_steps=3)
    env.reset(seed=0)
    results = [env.step("look") for _ in range(3)]
    obs, reward, terminated, truncated, info = results[-1]
    assert truncated and not terminated and info["success"] is False
    assert "Out of moves" in obs
    env.close()


def test_a_clone_continues_like_the_original_and_apart_from_it():
    env = gemkit.make(EASY)
    env.reset(seed=0)
    game = build(World(2, 4, 2), 0)
    env.step(game.walkthrough[0])
    twin = env.clone()
    rest = list(game.walkthrough[1:])
    a = [env.step(c)[:4] for c in rest]
    b = [twin.step(c)[:4] for c in rest]
    assert a == b and a[-1][2] is True  # both won
    env.close()
    twin.close()


async def test_textworld_games_in_an_async_vector_with_chat_history():
    from gemkit.wrappers import ChatHistory

    vec = gemkit.make_vec(EASY, 2, wrappers=[ChatHistory], mode="async")
    obs, _ = await vec.areset(seed=[0, 1])
    assert obs[0] != obs[1] and obs[0][-1]["role"] == "user"
    obs, rewards, terminated, truncated, infos = await vec.astep(["look", "inventory"])
    assert not any(terminated) and len(obs[0]) == 3
    vec.close()
