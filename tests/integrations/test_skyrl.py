"""A gemkit id as a SkyRL-gym env, made and stepped by the real skyrl_gym (0.4.0)."""

from __future__ import annotations

import json

import pytest

import gemkit

skyrl_gym = pytest.importorskip("skyrl_gym", reason="needs gemkit[skyrl]")

from gemkit.integrations.skyrl import GemkitTextEnv, register_skyrl, skyrl_dataset  # noqa: E402

ENV = "game:GuessTheNumber-v0-easy"


def play_gemkit(seed: int, policy) -> list:
    env = gemkit.make(ENV)
    obs, _ = env.reset(seed=seed)
    policy.reset()
    out = []
    while True:
        action = policy.choose(obs)
        obs, reward, terminated, truncated, _ = env.step(action)
        out.append((action, reward))
        if terminated or truncated:
            return out


def test_skyrl_gym_makes_and_plays_a_gemkit_id_from_a_dataset_row():
    register_skyrl()
    register_skyrl()  # again: a no-op
    row = skyrl_dataset(ENV, 3, seed=10, system_prompt="Play well.")[2]
    assert json.loads(json.dumps(row)) == row  # a row is plain data, as datasets store it
    env = skyrl_gym.make(row["env_class"], env_config={}, extras=row)
    assert isinstance(env, GemkitTextEnv)
    messages, _ = env.init(row["prompt"])
    assert messages[0] == {"role": "system", "content": "Play well."}
    assert (
        messages[-1]["role"] == "user"
        and messages[-1]["content"] == gemkit.make(ENV).reset(seed=12)[0]
    )
    expert = gemkit.make_policy("expert", ENV)
    expected = play_gemkit(12, expert)
    expert.reset()
    obs, played = messages[-1]["content"], []
    while True:
        action = expert.choose(obs)
        out = env.step(action)
        played.append((action, out["reward"]))
        json.dumps(out["metadata"])  # JSON data all the way
        if out["done"]:
            assert out["observations"] == [] and out["metadata"]["success"] is True
            break
        obs = out["observations"][0]["content"]
    assert played == expected
    env.close()


def test_env_config_sets_the_id_for_every_row_and_make_kwargs_reach_make():
    env = GemkitTextEnv(
        env_config={"env_id": "toy:Doors-v0", "make_kwargs": {"num_doors": 3}}, extras={"seed": 1}
    )
    messages, _ = env.init([])
    assert "a b c" in messages[0]["content"] and "d" not in messages[0]["content"].split()
    out = env.step("zzz")  # junk: the env's own message, the episode goes on
    assert not out["done"] and "door" in out["observations"][0]["content"].lower()


def test_a_row_without_an_env_id_says_what_is_missing():
    with pytest.raises(ValueError, match="env_id"):
        GemkitTextEnv(env_config={}, extras={"seed": 0})


GSM8K_ROWS = [
    {
        "prompt": [{"role": "user", "content": "6 * 7 = ? End with #### N"}],
        "reward_spec": {"method": "rule", "ground_truth": "42"},
    },
    {
        "prompt": [{"role": "user", "content": "2 + 2 = ? End with #### N"}],
        "reward_spec": {"method": "rule", "ground_truth": "4"},
    },
]


@pytest.mark.parametrize(
    ("seed", "answer", "reward"), [(0, "#### 42", 1.0), (1, "#### 5", 0.0), (3, "#### 4", 1.0)]
)
def test_skyrl_gyms_own_gsm8k_env_plays_in_gemkit(seed, answer, reward):
    env = gemkit.make("skyrl:Env-v0", env_class="gsm8k", rows=GSM8K_ROWS)
    obs, info = env.reset(seed=seed)  # the seed picks the row (modulo the rows)
    assert obs == GSM8K_ROWS[seed % 2]["prompt"][0]["content"] and info["row"] == seed % 2
    obs, got, terminated, truncated, info = env.step(answer)  # scored by SkyRL's own gsm8k code
    assert (got, terminated, info["success"]) == (reward, True, reward > 0)
    assert env.step("#### 42")[1:3] == (0.0, True)  # after the end: nothing more is scored


def test_a_gemkit_id_through_skyrl_and_back_plays_as_itself():
    register_skyrl()
    rows = skyrl_dataset("toy:Doors-v0", 2, seed=3)
    vec = gemkit.make_vec("skyrl:Env-v0", 2, mode="sync", env_class="gemkit", rows=rows)
    obs, _ = vec.reset(seed=[0, 1])
    direct = [gemkit.make("toy:Doors-v0") for _ in range(2)]
    assert obs == [direct[i].reset(seed=3 + i)[0] for i in range(2)]
    out = vec.step(["a", "b"])
    for i, action in enumerate("ab"):
        expected = direct[i].step(action)
        assert (out[1][i], bool(out[2][i])) == (expected[1], expected[2])
        if not expected[2]:
            assert out[0][i] == expected[0]
    vec.close()


def test_skyrl_family_without_rows_says_what_to_pass():
    with pytest.raises(gemkit.GemkitError, match="env_class"):
        gemkit.make("skyrl:Env-v0")
