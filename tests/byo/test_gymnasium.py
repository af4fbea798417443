"""Bring your own gymnasium env: a plain `gymnasium.Env` with text spaces works everywhere a
gemkit env does, and gymnasium's own tooling works over gemkit envs."""

from __future__ import annotations

import asyncio
import copy
import sys
import warnings

import gymnasium
import numpy as np
import pytest

import gemkit
from gemkit.errors import VectorEnvError
from gemkit.policy import SyncPolicy
from gemkit.rollout import arun_episodes, run_episode
from gemkit.tools import tool
from gemkit.vector import AsyncVectorEnv, SyncVectorEnv, VectorStep
from gemkit.wrappers import ChatHistory, ConcatHistory, DiscardContext

GAME = "game:GuessTheNumber-v0-easy"


class SayNumber(gymnasium.Env):
    """A plain gymnasium text env (no gemkit base class): say the number you are shown."""

    observation_space = gymnasium.spaces.Text(200)
    action_space = gymnasium.spaces.Text(200)

    def __init__(self, max_turns: int = 3):
        self.max_turns = max_turns
        self.target = ""
        self.turns = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.target = str(int(self.np_random.integers(1000)))
        self.turns = 0
        return f"Say {self.target}.", {}

    def step(self, action):
        self.turns += 1
        ok = action.strip() == self.target
        truncated = not ok and self.turns >= self.max_turns
        obs = "Correct." if ok else f"No: say {self.target}."
        return obs, float(ok), ok, truncated, {"success": ok}


class Broken(SayNumber):
    """Every reset fails, with the slot's own reason."""

    def reset(self, *, seed=None, options=None):
        raise RuntimeError(f"no data for seed {seed}")


def _say(obs: str) -> str:
    return obs.split("\n")[0].rstrip(".").split()[-1]


class Sayer(SyncPolicy):
    """Says the number the observation shows."""

    def choose(self, observation: str) -> str:
        return _say(observation)


@tool
def shout(text: str) -> str:
    """Return the text in capitals."""
    return text.upper()


try:  # registered once per process: the tests below build it by id
    gemkit.register("byo:SayNumber-v0", SayNumber, description="a plain gymnasium env")
except gemkit.GemkitError:
    pass


# -- a plain gymnasium env inside gemkit ---------------------------------------------------------


def test_tool_wrapper_runs_tools_and_passes_answers_to_a_plain_gymnasium_env():
    env = gemkit.ToolEnvWrapper(SayNumber(), [shout])
    obs, info = env.reset(seed=3)
    target = _say(obs)
    assert "shout" in obs and info["tools"][0]["function"]["name"] == "shout"
    obs, reward, terminated, _, info = env.step("<shout>hi</shout>")
    assert "HI" in obs and info["tool_calls"] == 1 and not terminated
    obs, reward, terminated, _, info = env.step(target)
    assert (obs, reward, terminated, info["success"]) == ("Correct.", 1.0, True, True)


async def test_async_twins_are_derived_for_history_and_context_wrappers():
    base = SayNumber()
    env = DiscardContext(ChatHistory(base), max_context=10_000, include_plain=True)
    obs, _ = await env.areset(seed=5)
    assert obs[-1]["role"] == "user" and obs[-1]["content"] == f"Say {base.target}."
    obs, reward, terminated, _, _ = await env.astep("wrong")
    assert [m["role"] for m in obs] == ["user", "assistant", "user"] and reward == 0.0
    obs, reward, terminated, _, _ = await env.astep(base.target)
    assert reward == 1.0 and terminated and env.runs_sync()


async def test_a_rollout_plays_a_plain_gymnasium_env():
    policy = Sayer()
    episode = await run_episode(SayNumber(), policy, env_id="byo", seed=1)
    assert episode.error is None and episode.success and episode.num_turns == 1


async def test_a_registered_gymnasium_env_runs_in_rollouts_and_tool_stacks_by_id():
    episodes = await arun_episodes("byo:SayNumber-v0", Sayer, 4, seed=10, concurrency=2)
    assert [e.error for e in episodes] == [None] * 4 and all(e.success for e in episodes)
    env = gemkit.make("byo:SayNumber-v0", tools=[shout], wrappers=[ConcatHistory])
    obs, _ = await env.areset(seed=0)
    assert "shout" in obs and env.spec.id == "byo:SayNumber-v0"
    await env.env.aclose()


@pytest.mark.parametrize("cls", [SyncVectorEnv, AsyncVectorEnv])
def test_vectors_step_plain_gymnasium_envs_and_tool_stacks_over_them(cls):
    vec = cls([SayNumber] * 2 + [lambda: gemkit.ToolEnvWrapper(SayNumber(), [shout])] * 2)
    obs, _ = vec.reset(seed=0)
    actions = [_say(o) for o in obs]
    actions[3] = "<shout>x</shout>"
    out = vec.step(actions)
    assert list(out.rewards) == [1.0, 1.0, 1.0, 0.0] and out.observations[3].endswith("X")
    vec.close()


async def test_an_async_vector_awaits_a_plain_env_under_a_running_loop():
    vec = AsyncVectorEnv([lambda: gemkit.ToolEnvWrapper(SayNumber(), [shout])] * 3)
    obs, _ = await vec.areset(seed=0)
    out = await vec.astep(["<shout>a</shout>"] * 3)
    assert all(o.endswith("A") for o in out.observations)
    out = await vec.astep([_say(o) for o in obs])
    assert out.rewards.tolist() == [1.0, 1.0, 1.0]
    vec.close()


def test_a_cloned_stack_over_a_plain_env_is_independent():
    env = gemkit.ToolEnvWrapper(SayNumber(), [shout])
    obs, _ = env.reset(seed=2)
    twin = env.clone()
    assert twin.env is not env.env and twin.env.target == env.env.target
    twin.step(twin.env.target)
    assert env.env.turns == 0 and twin.env.turns == 1


# -- what a gymnasium user expects of results -------------------------------------------------


def test_vector_step_unpacks_and_indexes_like_gymnasiums_five_tuple():
    vec = gemkit.make_vec(GAME, 2, mode="sync")
    vec.reset(seed=0)
    out = vec.step(["\\boxed{5}", "5"])
    assert isinstance(out, VectorStep) and len(out) == 5
    obs, rewards, terminated, truncated, infos = out
    assert out[0] is obs and out[1] is rewards and out[-1] is infos
    assert out[2] is terminated and out[3] is truncated and out[1:3] == (rewards, terminated)
    assert tuple(out) == (obs, rewards, terminated, truncated, infos)
    vec.close()


@pytest.mark.parametrize("cls", [SyncVectorEnv, AsyncVectorEnv])
def test_a_vector_whose_every_slot_fails_to_reset_raises_each_error(cls):
    vec = cls([Broken] * 3)
    with pytest.raises(VectorEnvError) as e:
        vec.reset(seed=7)
    text = str(e.value)
    assert "every env failed to reset" in text
    for i in range(3):
        assert f"env {i}: RuntimeError: no data for seed {7 + i}" in text
    vec.close()


def test_a_vector_with_some_slots_failing_still_resets_the_others():
    vec = SyncVectorEnv([Broken, SayNumber])
    obs, infos = vec.reset(seed=0)
    assert "no data" in infos[0]["error"] and obs[1].startswith("Say ")
    vec.close()


def test_resetting_only_a_failing_slot_marks_that_slot_and_raises_nothing():
    # re-arming one slot is a partial reset: its failure is that slot's, like a failed step
    vec = SyncVectorEnv([Broken, SayNumber], autoreset_mode="disabled")
    vec.reset(seed=0)
    obs, infos = vec.reset(indices=[0])
    assert "no data" in infos[0]["error"] and infos[1] == {"skipped": True}
    assert obs[1].startswith("Say ")
    vec.close()


def test_wrapped_envs_have_a_spec_without_a_gymnasium_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        env = gemkit.make(GAME, tools=[shout], wrappers=[ChatHistory])
        assert env.spec.id == GAME
        assert [w.name for w in env.spec.additional_wrappers] == ["ToolEnvWrapper", "ChatHistory"]
        limited = gymnasium.wrappers.TimeLimit(env, 3)
        assert limited.spec.max_episode_steps == 3
    # the registered spec is a copy's source, never changed by wrapping
    assert (
        gemkit.spec(GAME).additional_wrappers == () and gemkit.spec(GAME).max_episode_steps is None
    )
    env.close()


# -- gymnasium's own tooling over gemkit envs -------------------------------------------------


def test_gymnasium_wrappers_over_a_gemkit_env_count_and_limit_the_episode():
    env = gymnasium.wrappers.RecordEpisodeStatistics(
        gymnasium.wrappers.TimeLimit(gemkit.make(GAME), max_episode_steps=2)
    )
    env.reset(seed=0)
    _, _, terminated, truncated, _ = env.step("\\boxed{1}")
    assert not (terminated or truncated)
    _, _, terminated, truncated, info = env.step("\\boxed{2}")
    assert truncated and info["episode"]["l"] == 2


async def test_a_gemkit_vector_of_gymnasium_wrapped_tool_envs_steps_them_in_threads():
    # a gymnasium wrapper has no async twin; over a tool env (which awaits I/O) the derived
    # twin runs the sync step in a worker thread, so the caller's loop keeps running
    def build():
        return gymnasium.wrappers.TimeLimit(gemkit.ToolEnvWrapper(SayNumber(), [shout]), 2)

    vec = AsyncVectorEnv([build] * 2)
    assert vec._sync_slots == [False, False]
    await vec.areset(seed=0)
    out = await vec.astep(["<shout>a</shout>", "<shout>b</shout>"])
    assert [o.splitlines()[-1] for o in out.observations] == ["A", "B"]
    out = await vec.astep(["<shout>c</shout>", "<shout>d</shout>"])
    assert out.truncated.tolist() == [True, True]  # TimeLimit counted the tool steps
    vec.close()


def test_gymnasium_vector_runs_gemkit_envs():
    vec = gymnasium.vector.SyncVectorEnv(
        [lambda: gemkit.make(GAME)] * 3, autoreset_mode=gymnasium.vector.AutoresetMode.SAME_STEP
    )
    obs, _ = vec.reset(seed=0)
    assert len(obs) == 3 and all("Guess" in o or "guess" in o for o in obs)
    obs, rewards, terminated, truncated, infos = vec.step(("nonsense",) * 3)
    assert rewards.shape == (3,) and isinstance(rewards, np.ndarray)
    vec.close()


def test_gymnasium_env_checker_accepts_a_gemkit_env():
    from gymnasium.utils.env_checker import check_env

    env = gemkit.make(GAME)
    check_env(env, skip_render_check=True)


def test_deepcopy_of_a_wrapped_gemkit_env_keeps_its_spec():
    env = ChatHistory(gemkit.make(GAME))
    assert copy.deepcopy(env).spec.id == GAME


def test_asyncio_run_of_a_plain_env_under_tools_needs_no_loop_of_its_own():
    async def main():
        env = gemkit.ToolEnvWrapper(SayNumber(), [shout])
        obs, _ = await env.areset(seed=4)
        return await env.astep(_say(obs))

    _, reward, terminated, _, _ = asyncio.run(main())
    assert reward == 1.0 and terminated


async def test_eval_runs_a_registered_plain_gymnasium_env(tmp_path):
    from gemkit.evaluate import evaluate

    summary = await evaluate(["byo:SayNumber-v0"], lambda env_id, seed: Sayer(), 3, tmp_path)
    assert summary["byo:SayNumber-v0"]["success_rate"] == 1.0
    assert summary["byo:SayNumber-v0"]["errors"] == 0


def test_a_ray_vector_steps_plain_gymnasium_envs(monkeypatch):
    ray = pytest.importorskip("ray", reason="needs the `ray` extra")
    from gemkit.vector.ray import RayVectorEnv

    started = not ray.is_initialized()
    if started:
        monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    # the env lives in this test module, which Ray workers cannot import by name
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    vec = RayVectorEnv([SayNumber] * 2, num_workers=1, actor_options={"num_cpus": 0})
    try:
        obs, infos = vec.reset(seed=0)
        assert all(o.startswith("Say ") for o in obs) and not any("error" in i for i in infos)
        out = vec.step([_say(o) for o in obs])
        assert out.rewards.tolist() == [1.0, 1.0] and not any("error" in i for i in out.infos)
    finally:
        vec.close()
        if started:
            ray.shutdown()


class Silent(SayNumber):
    """A third-party env that, like most, says nothing of success in its info."""

    def step(self, action):
        obs, reward, terminated, truncated, _ = super().step(action)
        return obs, reward, terminated, truncated, {}


async def test_an_env_that_reports_no_success_is_solved_when_its_return_reaches_1():
    won = await run_episode(Silent(), Sayer(), seed=2)
    assert won.total_reward == 1.0 and won.success
    assert won.turns[-1].info["success_from"] == "return >= 1"
    lost = await run_episode(Silent(max_turns=2), SyncPolicyThatMumbles(), seed=2)
    assert lost.total_reward == 0.0 and not lost.success


async def test_a_spec_reward_threshold_is_the_bar_for_an_env_without_success():
    from gymnasium.envs.registration import EnvSpec

    env = Silent()
    env.spec = EnvSpec("Silent-v0", reward_threshold=2.0)
    episode = await run_episode(env, Sayer(), seed=2)
    assert episode.total_reward == 1.0 and not episode.success
    assert episode.turns[-1].info["success_from"] == "spec.reward_threshold 2"


async def test_an_envs_own_success_is_never_overridden():
    episode = await run_episode(SayNumber(), Sayer(), seed=2)
    assert episode.success and "success_from" not in episode.turns[-1].info


class SyncPolicyThatMumbles(SyncPolicy):
    """Never says the number."""

    def choose(self, observation: str) -> str:
        return "hmm"


def test_gymnasiums_async_vector_refuses_shared_memory_for_text_and_says_how_to_go_on():
    with pytest.raises(ValueError, match="shared_memory=False") as e:
        gymnasium.vector.AsyncVectorEnv([lambda: gemkit.make(GAME)] * 2)  # shared memory: default
    assert "the same string of '0's" in str(e.value.__cause__)


def test_gymnasiums_async_vector_without_shared_memory_returns_the_real_observations():
    vec = gymnasium.vector.AsyncVectorEnv([lambda: gemkit.make(GAME)] * 2, shared_memory=False)
    try:
        obs, _ = vec.reset(seed=0)
        assert obs == tuple(gemkit.make(GAME).reset(seed=k)[0] for k in range(2))
        obs, *_ = vec.step(["\\boxed{5}"] * 2)
        assert all("5" in o for o in obs)
    finally:
        vec.close()
