"""TextArena's single-player games (`textarena:` family) run through gemkit unchanged."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

ta = pytest.importorskip("textarena", reason="needs TextArena: pip install 'gemkit[textarena]'")

from textarena.envs.registration import ENV_REGISTRY  # noqa: E402
from textarena.wrappers import ActionFormattingWrapper  # noqa: E402

import gemkit  # noqa: E402
from gemkit.envs.textarena.names import GAME_IDS, LEFT_OUT  # noqa: E402
from gemkit.rollout import run_episodes  # noqa: E402
from gemkit.wrappers import ChatHistory  # noqa: E402

MOVES = ["[up]", "[left]", "[down]", "[right]"] * 4


def _single_player_ids() -> set[str]:
    ids = list(ENV_REGISTRY)
    first_multi = ids.index("Alquerque-v0")  # TextArena lists its 1-player games first
    return {i for i in ids[:first_multi] if not i.endswith(("-raw", "-train"))}


def _ta_play(ta_id: str, seed: int, actions: list[str]) -> list:
    """TextArena's own loop, played alone: rewards and done after each move."""
    env = ActionFormattingWrapper(ta.make(f"{ta_id}-raw"))
    env.reset(num_players=1, seed=seed)
    out = []
    for a in actions:
        done, _ = env.step(a)
        if done:
            rewards, _ = env.close()
            out.append((float(rewards[0]), True))
            break
        out.append((0.0, False))
    return out


def _gemkit_play(env, seed: int, actions: list[str]) -> list:
    env.reset(seed=seed)
    out = []
    for a in actions:
        _, reward, terminated, _, _ = env.step(a)
        out.append((reward, terminated))
        if terminated:
            break
    return out


def test_the_table_is_the_installed_single_player_games_that_run_offline():
    assert set(GAME_IDS) | set(LEFT_OUT) == _single_player_ids()
    assert {f"textarena:{i}" for i in GAME_IDS} == {s.id for s in gemkit.list_envs("textarena")}


@pytest.mark.parametrize("ta_id", ["GuessTheNumber-v0", "2048-v0-ultra-easy", "TowerOfHanoi-v0"])
def test_a_game_scores_exactly_as_textarena_scores_it(ta_id):
    actions = ["[3]", "7", "[A C]", *MOVES, "nonsense", "[12]"]
    for seed in range(3):
        mine = _gemkit_play(gemkit.make(f"textarena:{ta_id}"), seed, actions)
        assert mine == _ta_play(ta_id, seed, actions)


def test_guessing_right_ends_with_success_and_textarenas_reason():
    env = gemkit.make("textarena:GuessTheNumber-v0")
    obs, _ = env.reset(seed=2)
    assert obs.startswith("[GAME] You are Player 0. You are playing Guess The Number.")
    target = env.ta_env.state.game_state["game_number"]
    wrong = 1 if target != 1 else 2
    obs, reward, terminated, _, _ = env.step(f"[{wrong}]")
    assert not terminated and "[GAME] The target number is" in obs and "[Player 0]" not in obs
    obs, reward, terminated, _, info = env.step(str(target))  # brackets added, as TextArena does
    assert (reward, terminated, info["success"]) == (1.0, True, True) and "Congratulations" in obs
    assert "game is over" in env.step("[3]")[0]


def test_interleaved_games_keep_their_own_episodes_and_print_nothing(capsys):
    alone = _gemkit_play(gemkit.make("textarena:2048-v0-ultra-easy"), 0, MOVES)
    vec = gemkit.make_vec("textarena:2048-v0-ultra-easy", 2, mode="sync")
    obs, _ = vec.reset(seed=[0, 1])
    played = []
    for move in MOVES:
        out = vec.step([move, move])
        played.append((out[1][0], bool(out[2][0])))
        if out[2][0]:
            break
    assert played == alone
    gemkit.make("textarena:RushHour-v0").reset(seed=1)  # its level generator prints
    assert capsys.readouterr().out == ""


def test_a_reward_that_is_not_a_number_is_zero_with_the_reason():
    env = gemkit.make("textarena:Countdown-v0")
    env.reset(seed=0)
    for _ in range(5):
        obs, reward, terminated, truncated, info = env.step("hello")
        if terminated or truncated:
            break
    assert terminated and reward == 0.0 and "Invalid action format" in info["reward_error"]


async def test_textarena_games_in_an_async_vector_with_chat_history():
    vec = gemkit.make_vec("textarena:GuessTheNumber-v0", 3, mode="async", wrappers=[ChatHistory])
    obs, _ = await vec.areset(seed=0)
    assert all(o[0]["role"] == "user" and "Guess The Number" in o[0]["content"] for o in obs)
    targets = [e.env.ta_env.state.game_state["game_number"] for e in vec.envs]
    out = await vec.astep([f"[{t}]" for t in targets])
    assert out.rewards.tolist() == [1.0, 1.0, 1.0] and all(i["success"] for i in out.infos)
    vec.close()


def test_rollouts_with_the_random_policy_finish_without_errors():
    env_id = "textarena:GuessTheNumber-v0"
    episodes = run_episodes(env_id, lambda: gemkit.make_policy("random", env_id, seed=1), 4)
    assert all(e.error is None and e.turns[-1].terminated for e in episodes)


def test_without_textarena_the_message_names_the_extra():
    code = (
        "import json, sys; sys.modules['textarena'] = None\n"
        "import gemkit\n"
        "try:\n    gemkit.make('textarena:GuessTheNumber-v0')\n"
        "except gemkit.GemkitError as e:\n    print(json.dumps(str(e)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "pip install 'gemkit[textarena]'" in json.loads(out.stdout.strip()), out.stderr[-2000:]
