"""GEM envs (`gem:` family) run through gemkit unchanged, each with its own random state."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("gem", reason="needs GEM: pip install 'gemkit[gem]'")

import gem  # noqa: E402
from gem.envs.registration import ENV_REGISTRY  # noqa: E402

import gemkit  # noqa: E402
from gemkit.envs.gem import register_installed  # noqa: E402
from gemkit.envs.gem.env import GemEnv  # noqa: E402
from gemkit.envs.gem.names import GAME_IDS, LEFT_OUT  # noqa: E402
from gemkit.rollout import run_episodes  # noqa: E402
from gemkit.tools import tool  # noqa: E402
from gemkit.vector import AsyncVectorEnv  # noqa: E402
from gemkit.wrappers import ChatHistory  # noqa: E402

GUESS = "game:GuessTheNumber-v0-easy"
MOVES_2048 = ["\\boxed{up}", "\\boxed{left}", "\\boxed{down}", "\\boxed{right}"] * 3


def _gem_play(gem_id: str, seed: int, actions: list[str]) -> list:
    """GEM's own env, played alone (nothing else draws from the global state meanwhile)."""
    env = gem.make(gem_id)
    out = [env.reset(seed=seed)[0]]
    for a in actions:
        obs, reward, terminated, truncated, _ = env.step(a)
        out.append((obs, float(reward), terminated, truncated))
        if terminated or truncated:
            break
    return out


def _gemkit_play(env, seed: int, actions: list[str]) -> list:
    out = [env.reset(seed=seed)[0]]
    for a in actions:
        obs, reward, terminated, truncated, _ = env.step(a)
        out.append((obs, reward, terminated, truncated))
        if terminated or truncated:
            break
    return out


def test_the_static_table_lists_gems_offline_games():
    installed = {i for i in ENV_REGISTRY if i.startswith("game:")}
    assert set(GAME_IDS) | set(LEFT_OUT) == installed and not set(GAME_IDS) & set(LEFT_OUT)
    listed = {s.id for s in gemkit.list_envs("gem")}
    assert {f"gem:{i}" for i in GAME_IDS} <= listed


@pytest.mark.parametrize("gem_id", [GUESS, "game:Sudoku-v0-easy", "game:Game2048-v0-easy"])
def test_a_gem_id_plays_exactly_as_gem_plays_it(gem_id):
    actions = ["\\boxed{3}", "\\boxed{7}", *MOVES_2048, "\\boxed{1 1 1}", "no move"]
    assert _gemkit_play(gemkit.make(f"gem:{gem_id}"), 4, actions) == _gem_play(gem_id, 4, actions)


def test_interleaved_gem_envs_keep_their_own_episodes():
    # GEM's 2048 draws a new tile from the global `random` on every move: two GEM envs stepped
    # in turn draw from each other's stream, and the seeded game changes
    alone = _gem_play("game:Game2048-v0-easy", 0, MOVES_2048)
    a, b = gem.make("game:Game2048-v0-easy"), gem.make("game:Game2048-v0-easy")
    raw = [a.reset(seed=0)[0]]
    b.reset(seed=1)
    for move in MOVES_2048:
        b.step(move)
        obs, reward, terminated, truncated, _ = a.step(move)
        raw.append((obs, float(reward), terminated, truncated))
    assert raw != alone  # GEM itself: the neighbour changed the episode
    # through gemkit: the same interleaving, the same episode as alone
    vec = gemkit.make_vec("gem:game:Game2048-v0-easy", 2, mode="sync")
    first, _ = vec.reset(seed=[0, 1])
    played = [first[0]]
    for move in MOVES_2048:
        out = vec.step([move, move])
        played.append((out[0][0], out[1][0], bool(out[2][0]), bool(out[3][0])))
    assert played == alone[: len(played)]


def test_a_gem_env_leaves_the_callers_global_random_state_alone():
    random.seed(11)
    np.random.seed(11)
    expected = (random.random(), float(np.random.random()))
    random.seed(11)
    np.random.seed(11)
    env = gemkit.make("gem:game:Game2048-v0-easy")
    env.reset(seed=3)
    env.step("\\boxed{up}")
    assert (random.random(), float(np.random.random())) == expected


def test_a_clone_continues_like_the_original_and_apart_from_it():
    env = gemkit.make("gem:game:Game2048-v0-easy")
    env.reset(seed=2)
    env.step("\\boxed{up}")
    twin = env.clone()
    a = [env.step(m) for m in MOVES_2048[1:6]]
    b = [twin.step(m) for m in MOVES_2048[1:6]]
    assert a == b and twin.gem_env is not env.gem_env


def test_success_is_reported_when_gems_success_reward_is_reached():
    env = gemkit.make(f"gem:{GUESS}")
    env.reset(seed=0)
    target = env.gem_env.game_number
    _, reward, terminated, _, info = env.step(f"\\boxed{{{target}}}")
    assert (reward, terminated, info["success"]) == (1.0, True, True)
    env.reset(seed=0)
    _, reward, terminated, _, info = env.step("no boxed guess")  # GEM: format error ends it
    assert (reward, terminated, info["success"]) == (-0.1, True, False)


def test_a_mastermind_win_is_a_success_though_its_last_reward_is_below_one():
    env = gemkit.make("gem:game:Mastermind-v0-easy")
    env.reset(seed=1)
    code = env.gem_env.game_code
    wrong = [d for d in range(1, 7) if d not in code]
    env.step("\\boxed{" + f"{code[0]} {wrong[0]}" + "}")  # one black peg: reward 1/2
    _, reward, terminated, _, info = env.step("\\boxed{" + " ".join(map(str, code)) + "}")
    assert (reward, terminated, info["success"]) == (0.5, True, True)


def test_random_policy_and_rollouts_work_on_gem_ids():
    policy = gemkit.make_policy("random", f"gem:{GUESS}", seed=0)
    episodes = run_episodes(f"gem:{GUESS}", lambda: policy, 4, seed=0)
    assert all(e.error is None and e.num_turns >= 1 for e in episodes)


@tool
def double(n: int) -> int:
    """Return twice n."""
    return 2 * n


async def test_gem_envs_through_a_tool_wrapped_async_vector():
    vec = gemkit.make_vec(
        f"gem:{GUESS}", 3, mode="async", wrappers=[ChatHistory], tools=[double, "python"]
    )
    assert isinstance(vec, AsyncVectorEnv)
    obs, infos = await vec.areset(seed=5)
    assert all("Guess The Number" in o[0]["content"] and "double" in o[0]["content"] for o in obs)
    assert {t["function"]["name"] for t in infos[0]["tools"]} == {"double", "python"}
    calls = ['<tool_call>{"name": "double", "arguments": {"n": 4}}</tool_call>'] * 2
    out = await vec.astep([*calls, "<python>print(6 * 7)</python>"])
    assert [o[-1]["role"] for o in out.observations] == ["tool"] * 3
    assert out.observations[0][-1]["content"] == "8" and "42" in out.observations[2][-1]["content"]
    targets = [e.env.env.gem_env.game_number for e in vec.envs]
    out = await vec.astep([f"\\boxed{{{t}}}" for t in targets])
    assert out.rewards.tolist() == [1.0, 1.0, 1.0] and out.terminated.all()
    assert all(info["success"] for info in out.infos)
    for env in vec.envs:
        await env.env.aclose()


class _Fragile(gem.Env):
    """A user's own GEM env that raises on one action, as third-party code may."""

    def reset(self, seed=None):
        super().reset(seed)
        return "Say anything but 'boom'.", {}

    def step(self, action):
        if action == "boom":
            raise ZeroDivisionError("division by zero")
        return "Fine.", 1.0, True, False, {}


def test_users_own_gem_ids_join_and_a_gem_exception_ends_the_episode():
    if "custom:Fragile-v0" not in ENV_REGISTRY:
        gem.register("custom:Fragile-v0", _Fragile)
    added = register_installed()
    assert "gem:custom:Fragile-v0" in added or gemkit.spec("gem:custom:Fragile-v0")
    env = gemkit.make("gem:custom:Fragile-v0")
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step("boom")
    assert truncated and not terminated and reward == 0.0
    assert "ZeroDivisionError: division by zero" in obs and info["success"] is False
    assert "episode is over" in env.step("again")[0]


def test_an_unknown_gem_id_names_the_closest():
    with pytest.raises(gemkit.GemkitError, match="closest: game:GuessTheNumber-v0-easy"):
        GemEnv("game:GuessTheNumbr-v0-easy")


def test_importing_gem_through_gemkit_keeps_the_root_logger_as_it_was():
    code = (
        "import logging, gemkit; root = logging.getLogger();"
        "before = (list(root.handlers), root.level);"
        "gemkit.make('gem:game:GuessTheNumber-v0-easy');"
        "print(before == (list(root.handlers), root.level))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "True", out.stderr[-2000:]


def test_without_gem_the_message_names_the_extra():
    code = (
        "import sys; sys.modules['gem'] = None\n"
        "import gemkit\n"
        "try:\n    gemkit.make('gem:game:GuessTheNumber-v0-easy')\n"
        "except gemkit.GemkitError as e:\n    print(json.dumps(str(e)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", "import json\n" + code], capture_output=True, text=True, timeout=120
    )
    message = json.loads(out.stdout.strip().splitlines()[-1])
    assert "pip install 'gemkit[gem]'" in message, out.stderr[-2000:]
