"""Vector envs: autoreset modes, seeding, subset stepping, error isolation, concurrency.

The slot rules are checked in every local mode: sync, async, and process (two worker
processes, so the slots of one test span both; and the same with the last slot stepped by the
driver itself).
"""

from __future__ import annotations

import asyncio
import sys

import cloudpickle
import numpy as np
import pytest

import gemkit
from gemkit.core import Env
from gemkit.errors import VectorEnvError
from gemkit.vector import AsyncVectorEnv, ProcessVectorEnv, SyncVectorEnv

# the envs below live in this test module, which worker processes cannot import by name
cloudpickle.register_pickle_by_value(sys.modules[__name__])


class Counter(Env):
    """Counts steps; ends after `length` steps; 'boom' raises; obs shows the seed's draw."""

    def __init__(self, length: int = 3, delay: float = 0.0):
        self.length, self.delay = length, delay
        self.t = 0
        self.draw = -1

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        self.draw = int(self.np_random.integers(1_000_000))
        return f"start {self.draw}", {"draw": self.draw}

    def step(self, action):
        if action == "boom":
            raise RuntimeError("env exploded")
        self.t += 1
        done = self.t >= self.length
        return f"t={self.t} a={action}", 1.0, done, False, {"t": self.t}


class SlowCounter(Counter):
    """The same env whose async twins await real time (an I/O-bound env)."""

    async def astep(self, action):
        await asyncio.sleep(self.delay)
        return self.step(action)

    async def areset(self, *, seed=None, options=None):
        await asyncio.sleep(self.delay)
        return self.reset(seed=seed, options=options)


def vec(kind, n=3, mode="next_step", env=Counter, **kw):
    fns = [lambda: env(length=2, **kw)] * n
    if kind == "sync":
        return SyncVectorEnv(fns, autoreset_mode=mode)
    if kind == "process":
        return ProcessVectorEnv(fns, autoreset_mode=mode, num_workers=2)
    if kind == "process+driver":  # the last slot in the driver, the others in 1 or 2 workers
        v = ProcessVectorEnv(fns, autoreset_mode=mode, num_workers=2, driver_envs=1)
        assert v.driver_envs == 1 and v.num_workers == min(2, n - 1)
        return v
    return AsyncVectorEnv(fns, autoreset_mode=mode)


KINDS = ["sync", "async", "process", "process+driver"]


@pytest.mark.parametrize("kind", KINDS)
def test_reset_seeds_env_i_with_seed_plus_i(kind):
    v = vec(kind, n=3)
    obs, infos = v.reset(seed=10)
    single = [Counter().reset(seed=10 + i)[1]["draw"] for i in range(3)]
    assert [i["draw"] for i in infos] == single
    assert obs == [f"start {d}" for d in single]


@pytest.mark.parametrize("kind", KINDS)
def test_next_step_autoreset(kind):
    v = vec(kind, n=2, mode="next_step")
    v.reset(seed=0)
    v.step(["a", "a"])
    obs, rew, term, trunc, infos = v.step(["b", "b"])
    assert list(term) == [True, True] and list(rew) == [1.0, 1.0]
    assert obs[0] == "t=2 a=b"
    # the next step resets instead of stepping: the action is ignored, reward 0
    obs, rew, term, trunc, infos = v.step(["ignored", "ignored"])
    assert obs[0].startswith("start ") and list(rew) == [0.0, 0.0]
    assert not term.any() and not trunc.any()
    obs, *_ = v.step(["c", "c"])
    assert obs[0] == "t=1 a=c"


@pytest.mark.parametrize("kind", KINDS)
def test_same_step_autoreset_keeps_final_obs_and_info(kind):
    v = vec(kind, n=2, mode="same_step")
    v.reset(seed=0)
    v.step(["a", "a"])
    obs, rew, term, trunc, infos = v.step(["b", "b"])
    assert list(term) == [True, True] and list(rew) == [1.0, 1.0]
    assert obs[0].startswith("start ")
    assert infos[0]["final_obs"] == "t=2 a=b" and infos[0]["final_info"] == {"t": 2}
    obs, *_ = v.step(["c", "c"])
    assert obs[0] == "t=1 a=c"


@pytest.mark.parametrize("kind", KINDS)
def test_disabled_autoreset_reports_finished_slot_until_reset(kind):
    v = vec(kind, n=2, mode="disabled")
    v.reset(seed=0)
    v.step(["a", "a"])
    v.step(["b", "b"])
    obs, rew, term, trunc, infos = v.step(["c", "c"])
    assert "call reset" in infos[0]["error"] and obs[0] == "t=2 a=b"
    assert rew[0] == 0.0
    obs, infos = v.reset(indices=[0])
    assert obs[0].startswith("start ") and infos[1] == {"skipped": True}
    obs, rew, term, trunc, infos = v.step(["d", "d"])
    assert obs[0] == "t=1 a=d" and "error" in infos[1]


@pytest.mark.parametrize("kind", KINDS)
def test_subset_stepping(kind):
    v = vec(kind, n=3)
    first, _ = v.reset(seed=1)
    obs, rew, term, trunc, infos = v.step({1: "x"})
    assert obs[1] == "t=1 a=x"
    assert obs[0] == first[0] and obs[2] == first[2]
    assert infos[0] == {"skipped": True} and list(rew) == [0.0, 1.0, 0.0]
    with pytest.raises(VectorEnvError, match="out of range"):
        v.step({5: "x"})
    with pytest.raises(VectorEnvError, match="one per env"):
        v.step(["x"])


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("mode", ["next_step", "same_step"])
def test_one_raising_env_does_not_sink_the_batch(kind, mode):
    v = vec(kind, n=3, mode=mode)
    v.reset(seed=0)
    obs, rew, term, trunc, infos = v.step(["a", "boom", "a"])
    assert "env exploded" in infos[1]["error"] and trunc[1]
    assert obs[0] == "t=1 a=a" and obs[2] == "t=1 a=a" and "error" not in infos[0]
    # the broken slot is reset like a finished episode; the others go on
    obs, rew, term, trunc, infos = v.step(["b", "c", "b"])
    assert infos[0].get("final_obs", obs[0]) == "t=2 a=b"
    if mode == "next_step":
        assert obs[1].startswith("start ")
    else:
        assert obs[1] == "t=1 a=c"


def test_same_seeds_same_episodes_in_every_mode():
    def trace(v):
        out = [v.reset(seed=42)[0]]
        for k in range(5):
            out.append(v.step([f"a{k}"] * v.num_envs).observations)
        return out

    runs = [
        trace(SyncVectorEnv([lambda: Counter(length=2)] * 5)),
        trace(AsyncVectorEnv([lambda: Counter(length=2)] * 5)),
        trace(AsyncVectorEnv([lambda: SlowCounter(length=2)] * 5)),
        trace(ProcessVectorEnv([lambda: Counter(length=2)] * 5, num_workers=2)),
        trace(ProcessVectorEnv([lambda: SlowCounter(length=2)] * 5, num_workers=3)),
    ]
    assert all(run == runs[0] for run in runs)


def test_async_vector_overlaps_io_bound_envs():
    v = AsyncVectorEnv([lambda: SlowCounter(length=100, delay=0.05)] * 20)
    v.reset(seed=0)
    loop = asyncio.new_event_loop()
    t0 = loop.time()
    v.step(["a"] * 20)
    elapsed = loop.time() - t0
    loop.close()
    assert elapsed < 0.05 * 20 / 2, "20 sleeping envs must overlap, not run one after another"


def test_concurrency_limit_bounds_in_flight_calls():
    in_flight, peak = 0, 0

    class Probe(SlowCounter):
        async def astep(self, action):
            nonlocal in_flight, peak
            in_flight += 1
            peak = max(peak, in_flight)
            await asyncio.sleep(0.01)
            in_flight -= 1
            return self.step(action)

    v = AsyncVectorEnv([lambda: Probe(length=9)] * 12, max_concurrency=3)
    v.reset(seed=0)
    v.step(["a"] * 12)
    assert peak == 3


def test_envs_from_outside_gemkit_are_awaited_only_when_they_have_async_twins():
    import gymnasium

    class Plain(gymnasium.Env):
        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            return "plain", {}

        def step(self, action):
            return f"plain {action}", 0.0, False, False, {}

    class ForeignAsync(Plain):
        async def astep(self, action):
            await asyncio.sleep(0)
            return f"awaited {action}", 0.0, False, False, {}

    v = AsyncVectorEnv([Plain, ForeignAsync])
    v.reset(seed=0)
    assert v.step(["a", "b"]).observations == ["plain a", "awaited b"]
    v.close()


def test_the_collector_is_paused_during_a_round_for_a_bounded_time_and_restored(monkeypatch):
    import gc

    import gemkit.vector.aio as aio

    seen = []

    class Probe(SlowCounter):
        async def astep(self, action):
            seen.append(("start", gc.isenabled()))
            await asyncio.sleep(self.delay)
            seen.append(("end", gc.isenabled()))
            return self.step(action)

    monkeypatch.setattr(aio, "GC_PAUSE_LIMIT", 0.05)
    v = AsyncVectorEnv([lambda: Probe(length=9, delay=0.2)] * 2)
    v.reset(seed=0)
    assert gc.isenabled()
    v.step(["a", "b"])
    # paused while the round starts, resumed once it ran past the limit, restored after
    assert seen == [("start", False)] * 2 + [("end", True)] * 2 and gc.isenabled()
    gc.disable()
    try:
        seen.clear()
        v.step(["a", "b"])
        assert not gc.isenabled(), "a collector the caller turned off stays off"
    finally:
        gc.enable()
    seen.clear()
    off = AsyncVectorEnv([lambda: Probe(length=9, delay=0.0)] * 2, pause_gc=False)
    off.reset(seed=0)
    off.step(["a", "b"])
    assert seen and all(enabled for _, enabled in seen)


def test_an_interrupt_in_one_slot_stops_the_round_and_cancels_the_others():
    cancelled = []

    class Stuck(SlowCounter):
        async def astep(self, action):
            if action == "interrupt":
                raise KeyboardInterrupt
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                cancelled.append(action)
                raise
            return self.step(action)

    async def main():
        v = AsyncVectorEnv([lambda: Stuck(length=5)] * 3)
        await v.areset(seed=0)
        with pytest.raises(KeyboardInterrupt):
            await v.astep(["interrupt", "a", "b"])
        await asyncio.sleep(0)  # let the cancelled slots run their handlers

    asyncio.run(asyncio.wait_for(main(), 10))
    assert sorted(cancelled) == ["a", "b"]


def test_astep_inside_a_running_loop_and_step_refused_there():
    async def main():
        v = AsyncVectorEnv([lambda: SlowCounter(length=3)] * 2)
        obs, _ = await v.areset(seed=0)
        res = await v.astep(["a", "b"])
        with pytest.raises(VectorEnvError, match="await astep"):
            v.step(["a", "b"])
        return res.observations

    assert asyncio.run(main()) == ["t=1 a=a", "t=1 a=b"]


def test_make_vec_runs_registered_games():
    v = gemkit.make_vec("game:GuessTheNumber-v0-easy", 8, mode="async")
    obs, _ = v.reset(seed=0)
    assert len(obs) == 8 and all("between 1 and 20" in o for o in obs)
    out = v.step(["\\boxed{10}"] * 8)
    assert out.rewards.dtype == np.float64 and out.terminated.dtype == bool
    v.close()
    with pytest.raises(VectorEnvError, match="closed"):
        v.step(["\\boxed{1}"] * 8)


def test_bad_vector_arguments_have_clear_messages():
    with pytest.raises(VectorEnvError, match="autoreset_mode"):
        SyncVectorEnv([Counter], autoreset_mode="sometimes")
    with pytest.raises(ValueError, match="vector mode"):
        gemkit.make_vec("game:GuessTheNumber-v0-easy", 2, mode="threads")
    with pytest.raises(VectorEnvError, match="seeds"):
        SyncVectorEnv([Counter] * 2).reset(seed=[1, 2, 3])


class FlakyReset(Counter):
    """Its reset raises while the file named by `fail_path` exists (read in any process)."""

    def __init__(self, length: int = 2, fail_path: str = ""):
        super().__init__(length=length)
        self.fail_path = fail_path

    def reset(self, *, seed=None, options=None):
        import os

        if os.path.exists(self.fail_path):
            raise RuntimeError("reset failed")
        return super().reset(seed=seed, options=options)


@pytest.mark.parametrize("kind", KINDS)
def test_same_step_slot_whose_reset_failed_resets_at_its_next_step(kind, tmp_path):
    flag = tmp_path / "fail"
    v = vec(kind, n=2, mode="same_step", env=FlakyReset, fail_path=str(flag))
    v.reset(seed=0)
    v.step(["a", "a"])
    flag.touch()
    obs, rew, term, trunc, infos = v.step(["b", "b"])  # ends the episode; its reset fails
    assert list(term) == [True, True] and "reset failed" in infos[0]["error"]
    assert obs[0] == "t=2 a=b"
    flag.unlink()
    # there is no episode to step: the slot resets instead, its action ignored
    obs, rew, term, trunc, infos = v.step(["c", "c"])
    assert obs[0].startswith("start ") and list(rew) == [0.0, 0.0] and "error" not in infos[0]
    obs, *_ = v.step(["d", "d"])
    assert obs[0] == "t=1 a=d"


@pytest.mark.parametrize("kind", KINDS)
def test_a_reset_that_fails_in_every_slot_raises_with_each_slots_error(kind, tmp_path):
    flag = tmp_path / "fail"
    flag.touch()
    v = vec(kind, n=3, env=FlakyReset, fail_path=str(flag))
    with pytest.raises(VectorEnvError, match="every env failed to reset") as e:
        v.reset(seed=0)
    assert all(f"env {i}: RuntimeError: reset failed" in str(e.value) for i in range(3))
    flag.unlink()
    assert [o.startswith("start ") for o in v.reset(seed=0)[0]] == [True] * 3
    v.close()


class Odd(Counter):
    """Answers 'short' with a 4-tuple and 'numpy' with numpy values (through step and astep)."""

    def step(self, action):
        if action == "short":
            return "short", 0.0, False, False
        if action == "numpy":
            self.t += 1
            return "np", np.float32(0.5), np.bool_(False), np.bool_(False), {"t": self.t}
        return super().step(action)


class AsyncOdd(Odd):
    async def astep(self, action):
        await asyncio.sleep(0)
        return self.step(action)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("env", [Odd, AsyncOdd])
def test_malformed_and_numpy_answers_are_handled_alike_in_every_mode(kind, env):
    v = vec(kind, n=3, env=env)
    v.reset(seed=0)
    obs, rew, term, trunc, infos = v.step(["short", "numpy", "a"])
    assert "not enough values to unpack" in infos[0]["error"] and trunc[0]
    assert obs[1] == "np" and rew[1] == 0.5 and infos[1] == {"t": 1} and not term[1]
    assert obs[2] == "t=1 a=a"
    assert rew.dtype == np.float64 and term.dtype == bool
    obs, *_ = v.step(["a", "a", "a"])  # the broken slot resets, the others go on
    assert obs[0].startswith("start ") and obs[1:] == ["t=2 a=a", "t=2 a=a"]


@pytest.mark.parametrize("mode", ["next_step", "same_step", "disabled"])
def test_first_request_is_what_the_slot_generator_asks_first(mode):
    v = SyncVectorEnv([lambda: Counter(length=1)] * 2, autoreset_mode=mode)
    v.reset(seed=0)
    v.step(["a", "a"])  # both episodes end (same_step: and restart)
    v._done[1] = not v._done[1]
    for i in range(2):
        first = v._first_request(i, "x")
        gen = v._step_slot(i, "x")
        if first is None:
            with pytest.raises(StopIteration):
                next(gen)
        else:
            assert next(gen) == first
        gen.close()
