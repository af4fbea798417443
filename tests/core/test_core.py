"""The Env/Wrapper contract: live attribute forwarding, async twins, clone, lazy import."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

import gemkit
from gemkit.core import ActionWrapper, Env, ObservationWrapper, RewardWrapper, TextSpace, Wrapper


class Box(Env):
    def __init__(self):
        self.level = 1
        self.log: list[str] = []

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.log = []
        return f"level {self.level}", {}

    def step(self, action):
        self.log.append(action)
        return f"got {action}", 1.0, False, False, {"n": len(self.log)}


class Upper(ObservationWrapper):
    def observation(self, observation):
        return observation.upper()


class Exclaim(ActionWrapper):
    def action(self, action):
        return action + "!"


class Double(RewardWrapper):
    def reward(self, reward):
        return 2 * reward


class StepOnly(Wrapper):
    """A user wrapper that overrides only the sync step."""

    def step(self, action):
        obs, r, te, tr, info = self.env.step(action)
        return obs + " (seen)", r, te, tr, info


def test_wrappers_forward_attributes_live_not_copied():
    env = Box()
    wrapped = Double(Exclaim(Upper(env)))
    assert wrapped.level == 1
    env.level = 7  # changed after wrapping: the wrapper must see it
    assert wrapped.level == 7
    assert wrapped.unwrapped is env
    with pytest.raises(AttributeError):
        _ = wrapped.no_such_attribute


def test_wrappers_compose_in_sync_and_async():
    wrapped = Double(Exclaim(Upper(Box())))
    assert wrapped.reset(seed=0)[0] == "LEVEL 1"
    assert wrapped.step("hi")[:2] == ("GOT HI!", 2.0)

    async def run():
        w = Double(Exclaim(Upper(Box())))
        first = await w.areset(seed=0)
        return first[0], (await w.astep("hi"))[:2]

    assert asyncio.run(run()) == ("LEVEL 1", ("GOT HI!", 2.0))


def test_sync_only_override_still_applies_under_astep():
    wrapped = StepOnly(Upper(Box()))
    wrapped.reset()
    assert asyncio.run(wrapped.astep("x"))[0] == "GOT X (seen)"


class Sleepy(Box):
    async def astep(self, action):
        await asyncio.sleep(0)
        return self.step(action)


def test_runs_sync_detects_async_native_envs():
    assert Box().runs_sync() and Upper(Box()).runs_sync()
    assert not Sleepy().runs_sync() and not Upper(Sleepy()).runs_sync()


def test_runs_sync_answers_per_method():
    class AsyncStepOnly(Box):
        async def astep(self, action):
            return self.step(action)

    env = Upper(AsyncStepOnly())
    assert env.runs_sync("reset") and not env.runs_sync("step") and not env.runs_sync()
    assert not Upper(Sleepy()).runs_sync("step")


def test_seeding_is_lazy_but_draws_exactly_what_gymnasium_would():
    import numpy as np
    from gymnasium.utils import seeding

    env = Box()
    env.reset(seed=7)
    assert env._rng is None  # nothing drawn yet: no generator built
    expected, expected_seed = seeding.np_random(7)
    assert (
        env.np_random.integers(1 << 30, size=5).tolist()
        == expected.integers(1 << 30, size=5).tolist()
    )
    assert env.np_random_seed == expected_seed == 7
    env.reset()  # no seed: the stream goes on, as in gymnasium
    assert env.np_random.integers(1 << 30) == expected.integers(1 << 30)
    fresh = Box()
    fresh.reset(seed=7)
    assert fresh.np_random_seed == 7 and fresh._np_random is not None
    fresh.np_random = np.random.default_rng(1)
    assert fresh.np_random_seed == -1
    with pytest.raises(Exception, match="Seed must be"):
        Box().reset(seed=-1)  # a bad seed fails at reset, not at the first draw


def test_clone_shares_nothing():
    env = Box()
    env.reset(seed=3)
    env.step("a")
    twin = env.clone()
    twin.step("b")
    assert env.log == ["a"] and twin.log == ["a", "b"]
    assert env.np_random.integers(1 << 30) == twin.np_random.integers(1 << 30)
    wrapped = Upper(Box())
    wrapped.reset(seed=1)
    wtwin = wrapped.clone()
    wtwin.step("z")
    assert wrapped.unwrapped.log == [] and wtwin.unwrapped.log == ["z"]


def test_text_space_accepts_any_string_and_samples_printable():
    space = TextSpace(10)
    assert space.contains("héllo ☃") and not space.contains(b"x") and not space.contains("x" * 11)
    space.seed(0)
    assert all(isinstance(space.sample(), str) for _ in range(5))


def test_import_gemkit_is_lazy():
    code = (
        "import sys, gemkit; heavy = [m for m in ('gymnasium', 'numpy', 'datasets', 'torch', "
        "'docker', 'reasoning_gym', 'aiohttp', 'pydantic') if m in sys.modules]; print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_public_api_resolves():
    for name in gemkit.__all__:
        assert getattr(gemkit, name) is not None
    with pytest.raises(AttributeError):
        _ = gemkit.not_a_name
