"""`twx:` and `scienceworld:` ids: TextWorldExpress's and ScienceWorld's own Java engines.

Both engines ship in their PyPI packages and run offline on a Java 17 runtime (`.ci/run`
installs one where it is missing).
"""

from __future__ import annotations

import shutil

import pytest

import gemkit
from gemkit.envs.scienceworld import TASKS
from gemkit.envs.textworld import engines
from gemkit.envs.twx import GAMES
from gemkit.errors import GemkitError

pytest.importorskip("textworld_express", reason="needs gemkit[twx]")
pytest.importorskip("scienceworld", reason="needs gemkit[scienceworld]")
if shutil.which("java") is None:
    pytest.skip(
        "no Java runtime on the PATH (apt-get install default-jre-headless)",
        allow_module_level=True,
    )

TWX_IDS = [
    f"twx:{g}-v0" + (f"-{lv}" if lv else "") for g, (_, levels) in GAMES.items() for lv in levels
]


def play_expert(env_id, seed):
    env = gemkit.make(env_id)
    policy = gemkit.make_policy("expert", env_id)
    obs, _ = env.reset(seed=seed)
    total, info = 0.0, {}
    for _ in range(300):
        obs, reward, terminated, truncated, info = env.step(policy.choose(obs))
        total += reward
        if terminated or truncated:
            break
    env.close()
    return total, info, terminated


def test_the_tables_are_the_installed_engines_games_and_tasks():
    from scienceworld import ScienceWorldEnv
    from textworld_express import TextWorldExpressEnv

    twx = engines.take("twx/check", lambda: TextWorldExpressEnv(envStepLimit=10))
    sw = engines.take("sw/check", lambda: ScienceWorldEnv("", envStepLimit=10))
    try:
        assert set(GAMES) == set(twx.getGameNames())
        assert tuple(sw.get_task_names()) == TASKS
    finally:
        engines.shut_down(twx)
        engines.shut_down(sw)


@pytest.mark.parametrize("env_id", [i for i in TWX_IDS if not i.endswith("-hard")])
def test_the_gold_path_expert_wins_every_textworld_express_game(env_id):
    total, info, terminated = play_expert(env_id, seed=4)
    assert terminated and info["success"] is True
    assert total == pytest.approx(info["score"]) == pytest.approx(1.0)  # the engine's score


@pytest.mark.parametrize("env_id", ["scienceworld:boil-v0-easy", "scienceworld:find_plant-v0"])
def test_the_gold_path_expert_scores_100_on_science_world(env_id):
    total, info, terminated = play_expert(env_id, seed=1)
    assert terminated and info["success"] is True
    assert total == info["score"] == 100.0


def test_seeds_pick_games_and_levels_set_the_engines_parameters():
    env = gemkit.make("twx:coin-v0-easy")
    a = [env.reset(seed=s)[0] for s in (1, 1, 2)]
    assert a[0] == a[1] and a[0] != a[2]
    hard = gemkit.make("twx:coin-v0-hard")
    hard_obs, _ = hard.reset(seed=1)
    assert hard_obs != a[0]
    env.close()
    hard.close()


def test_junk_gets_a_message_and_session_words_never_reach_the_engine():
    env = gemkit.make("twx:twc-v0-easy")
    env.reset(seed=0)
    before = env.step("look around")[0]
    for junk in ["", "quit", "9" * 20_000, "\u2603"]:  # refused before the engine
        obs, reward, terminated, truncated, info = env.step(junk)
        assert reward == 0 and not terminated and isinstance(obs, str) and obs
        assert "invalid" in info
    obs, reward, *_ = env.step("\\boxed{")  # reaches the engine as the word "boxed"
    assert reward == 0 and "Unknown action" in obs
    assert env.step("\\boxed{look around}")[0] == before
    env.close()


def test_a_clone_continues_like_the_original():
    env = gemkit.make("twx:cookingworld-v0-easy")
    obs, _ = env.reset(seed=2)
    policy = gemkit.make_policy("expert", "twx:cookingworld-v0-easy")
    first = policy.choose(obs)
    env.step(first)
    twin = env.clone()
    moves = [policy.choose("") for _ in range(4)]
    assert [env.step(m)[:4] for m in moves] == [twin.step(m)[:4] for m in moves]
    env.close()
    twin.close()


def test_a_closed_envs_engine_serves_the_next_env():
    env = gemkit.make("twx:coin-v0-easy")
    env.reset(seed=0)
    engine = env._engine
    env.close()
    again = gemkit.make("twx:sorting-v0")
    again.reset(seed=0)
    assert again._engine is engine  # no second Java start
    again.close()


def test_without_java_the_message_says_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(GemkitError, match="default-jre-headless"):
        engines.need_java("twx")
