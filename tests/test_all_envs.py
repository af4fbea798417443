"""Every registered id (every family) resets, steps on junk without raising, and is seeded."""

from __future__ import annotations

import warnings

import pytest
from gymnasium.utils.env_checker import check_env

import gemkit

#: ids that cannot be made with no arguments, and why
NEEDS_ARGUMENTS = {
    "math:Jsonl-v0": "reads the user's own file (path=...)",
    "qa:Jsonl-v0": "reads the user's own file (path=...)",
    "code:Jsonl-v0": "reads the user's own file (path=...)",
    "rg:composite": "mixes datasets the user names (datasets=[...])",
    "openenv:Remote-v0": "plays the user's own OpenEnv server (base_url=...)",
    "verifiers:Env-v0": "plays the verifiers taskset the user names (taskset=...)",
    "skyrl:Env-v0": "plays the user's SkyRL-gym env class over their rows (env_class=, rows=)",
    "nemo_gym:Server-v0": "plays the user's NeMo Gym server over their rows (base_url=, rows=)",
}
#: GEM ids registered once GEM is imported that are not checked to run offline: its datasets
#: (from the Hugging Face hub), word games (NLTK's list) and the ones GEM 0.1.0 itself breaks
#: (see gemkit.envs.gem.names); tests/byo covers the gem: family
NOT_OFFLINE = {"download", "left-out"}
MULTI_AGENT = "multi-agent envs have dict observations; tests/multiagent checks their contract"
#: scienceworld: ids are one env class over 30 task names (each load takes seconds in its
#: Java engine): two are checked here, tests/envs/test_java_text_games.py checks the table
SAMPLED = {"scienceworld": {"scienceworld:boil-v0-easy", "scienceworld:find_plant-v0"}}


def single_agent_ids() -> list:
    out = []
    for s in gemkit.list_envs():
        if s.id in NEEDS_ARGUMENTS or NOT_OFFLINE & set(s.tags):
            continue
        if s.family in SAMPLED and s.id not in SAMPLED[s.family]:
            continue
        env = s.make()
        multi = not isinstance(env, gemkit.Env) and not isinstance(env, gemkit.Wrapper)
        env.close()
        if not multi:
            out.append(s.id)
    return out


ALL = single_agent_ids()
JUNK = ["", "hello", "\\boxed{", "<tool_call>{</tool_call>", "\u2603" * 100, "9" * 20_000]


def test_every_family_is_covered():
    families = {i.split(":")[0] for i in ALL}
    assert {"game", "math", "qa", "code", "rg", "toolworld", "terminal"} <= families


@pytest.mark.parametrize("env_id", ALL)
def test_resets_deterministically_and_answers_junk(env_id):
    env = gemkit.make(env_id)
    try:
        first, _ = env.reset(seed=3)
        again, _ = env.reset(seed=3)
        assert isinstance(first, str) and first == again
        for junk in JUNK:
            obs, reward, terminated, truncated, info = env.step(junk)
            assert isinstance(obs, str) and isinstance(float(reward), float)
            if terminated or truncated:
                env.reset(seed=3)
    finally:
        env.close()


CHECKED = [i for i in ALL if not i.startswith(("rg:", "terminal:"))] + ["rg:leg_counting"]


@pytest.mark.parametrize("env_id", CHECKED)
def test_passes_gymnasium_env_checker(env_id):
    # rg ids share one env class (checked once); terminal ids start a container per reset
    # and are checked by tests/terminal
    env = gemkit.make(env_id)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            check_env(env.unwrapped, skip_render_check=True)
    finally:
        env.close()


def _end_episode(env, seed: int) -> bool:
    """Step junk until the episode ends; False if it is still open after 1,000 steps."""
    env.reset(seed=seed)
    for _ in range(1_000):
        _, _, terminated, truncated, _ = env.step("hello")
        if terminated or truncated:
            return True
    return False


@pytest.mark.parametrize("env_id", [i for i in ALL if not i.startswith("terminal:")])
def test_no_reward_once_the_episode_is_over(env_id):
    # a loop that ignores the end flags must never get a later answer graded: every action
    # after the end, the random baseline's included, earns 0 and is answered as an ended step
    # (terminal ids: tests/terminal checks that no command or answer runs once the tests ran)
    env = gemkit.make(env_id)
    try:
        if not _end_episode(env, seed=5):
            pytest.fail(f"{env_id}: 1,000 junk moves do not end an episode")
        policy = gemkit.make_policy("random", env_id, seed=5)
        obs = ""
        for action in ["hello", policy.choose(obs), policy.choose(obs), "\\boxed{0}"]:
            obs, reward, terminated, truncated, _ = env.step(action)
            assert float(reward) == 0.0, (env_id, action, obs)
            assert terminated or truncated, (env_id, action, obs)
    finally:
        env.close()
