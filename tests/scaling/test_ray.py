"""Ray: the vector API with envs in Ray actors, and the Ray executor, on a local 2-CPU cluster.

One cluster serves the whole module (starting Ray takes seconds); authentication is turned
off through Ray's own setting, `RAY_AUTH_MODE=disabled`, and the dashboard is not started.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

import pytest

import gemkit
from gemkit.core import Env
from gemkit.errors import VectorEnvError
from gemkit.executor import get_executor
from gemkit.vector import AsyncVectorEnv

ray = pytest.importorskip("ray", reason="needs the `ray` extra (pip install 'gemkit[ray]')")
from gemkit.vector.ray import RayVectorEnv  # noqa: E402

SMALL = {"num_cpus": 0.25}  # several vectors share the 2-CPU test cluster


class Counter(Env):
    """Counts steps; ends after `length` steps; 'boom' raises; 'crash' kills its process."""

    def __init__(self, length: int = 2):
        self.length = length
        self.t = 0
        self.draw = -1

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        self.draw = int(self.np_random.integers(1_000_000))
        return f"start {self.draw}", {"draw": self.draw, "pid": os.getpid()}

    def step(self, action):
        if action == "boom":
            raise RuntimeError("env exploded")
        if action == "crash":
            os._exit(1)
        self.t += 1
        return f"t={self.t} a={action}", 1.0, self.t >= self.length, False, {"t": self.t}


class SlowCounter(Counter):
    """The same env with real async twins (an I/O-bound env)."""

    async def astep(self, action):
        await asyncio.sleep(0.001)
        return self.step(action)

    async def areset(self, *, seed=None, options=None):
        await asyncio.sleep(0.001)
        return self.reset(seed=seed, options=options)


class Broken(Env):
    def __init__(self):
        raise ValueError("no such dataset")


@pytest.fixture(scope="module", autouse=True)
def cluster():
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAY_AUTH_MODE", "disabled")
        # the envs above live in this test module, which Ray workers cannot import by name
        ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
        yield
        ray.shutdown()


_vectors: dict[str, RayVectorEnv] = {}


@pytest.fixture(scope="module")
def vectors():
    yield _vectors
    for v in _vectors.values():
        v.close()


def counters(vectors, mode: str) -> RayVectorEnv:
    """One 3-slot vector over 2 actors per autoreset mode, built once for the module."""
    if mode not in vectors:
        vectors[mode] = RayVectorEnv(
            [Counter] * 3, autoreset_mode=mode, num_workers=2, actor_options=SMALL
        )
    v = vectors[mode]
    v.reset(seed=0)
    return v


def test_envs_run_in_separate_actor_processes(vectors):
    v = counters(vectors, "next_step")
    _, infos = v.reset(seed=0)
    pids = {i["pid"] for i in infos}
    assert len(pids) == 2 and os.getpid() not in pids and v.num_workers == 2


def test_reset_seeds_env_i_with_seed_plus_i(vectors):
    obs, infos = counters(vectors, "next_step").reset(seed=10)
    single = [Counter().reset(seed=10 + i)[1]["draw"] for i in range(3)]
    assert [i["draw"] for i in infos] == single and obs == [f"start {d}" for d in single]


def test_next_step_autoreset(vectors):
    v = counters(vectors, "next_step")
    v.step(["a"] * 3)
    obs, rew, term, trunc, infos = v.step(["b"] * 3)
    assert list(term) == [True] * 3 and obs[0] == "t=2 a=b"
    obs, rew, term, trunc, infos = v.step(["ignored"] * 3)
    assert obs[0].startswith("start ") and list(rew) == [0.0] * 3
    assert v.step(["c"] * 3).observations[0] == "t=1 a=c"


def test_same_step_autoreset_keeps_final_obs_and_info(vectors):
    v = counters(vectors, "same_step")
    v.step(["a"] * 3)
    obs, rew, term, trunc, infos = v.step(["b"] * 3)
    assert list(term) == [True] * 3 and obs[2].startswith("start ")
    assert infos[2]["final_obs"] == "t=2 a=b" and infos[2]["final_info"] == {"t": 2}


def test_disabled_autoreset_reports_finished_slot_until_reset(vectors):
    v = counters(vectors, "disabled")
    v.step(["a"] * 3)
    v.step(["b"] * 3)
    obs, rew, term, trunc, infos = v.step(["c"] * 3)
    assert "call reset" in infos[0]["error"] and obs[0] == "t=2 a=b"
    obs, infos = v.reset(indices=[0])
    assert obs[0].startswith("start ") and infos[1] == {"skipped": True}
    obs, *_, infos = v.step(["d"] * 3)
    assert obs[0] == "t=1 a=d" and "error" in infos[2]


def test_subset_stepping(vectors):
    v = counters(vectors, "next_step")
    first, _ = v.reset(seed=1)
    obs, rew, term, trunc, infos = v.step({2: "x"})
    assert obs[2] == "t=1 a=x" and obs[:2] == first[:2]
    assert infos[0] == {"skipped": True} and list(rew) == [0.0, 0.0, 1.0]
    with pytest.raises(VectorEnvError, match="out of range"):
        v.step({5: "x"})


@pytest.mark.parametrize("mode", ["next_step", "same_step"])
def test_one_raising_env_does_not_sink_the_batch(vectors, mode):
    v = counters(vectors, mode)
    obs, rew, term, trunc, infos = v.step(["a", "boom", "a"])
    assert infos[1]["error"] == "RuntimeError: env exploded" and trunc[1]
    assert obs[0] == "t=1 a=a" and obs[2] == "t=1 a=a" and "error" not in infos[0]
    obs, *_, infos = v.step(["b", "c", "b"])
    assert infos[0].get("final_obs", obs[0]) == "t=2 a=b"
    assert obs[1].startswith("start ") if mode == "next_step" else obs[1] == "t=1 a=c"


def test_same_seeds_same_episodes_as_the_async_vector(vectors):
    def trace(v):
        out = [v.reset(seed=42)[0]]
        for k in range(5):
            out.append(v.step([f"a{k}"] * v.num_envs).observations)
        return out

    ray_vec = RayVectorEnv([SlowCounter] * 3, num_workers=2, actor_options=SMALL)
    try:
        assert trace(ray_vec) == trace(AsyncVectorEnv([SlowCounter] * 3))
    finally:
        ray_vec.close()
    assert trace(counters(vectors, "next_step")) == trace(AsyncVectorEnv([Counter] * 3))


def test_async_twins_await_the_actors(vectors):
    v = counters(vectors, "next_step")

    async def main():
        obs, _ = await v.areset(seed=0)
        return await v.astep(["a", "b", "c"])

    assert asyncio.run(main()).observations == ["t=1 a=a", "t=1 a=b", "t=1 a=c"]


def test_a_crashed_actor_marks_its_slots_and_comes_back():
    v = RayVectorEnv(
        [Counter] * 2, num_workers=2, actor_options={"num_cpus": 0.25, "max_restarts": 1}
    )
    try:
        v.reset(seed=0)
        obs, rew, term, trunc, infos = v.step(["a", "crash"])
        assert "actor failed" in infos[1]["error"] and trunc[1]
        assert obs[0] == "t=1 a=a"
        obs, *_, infos = v.step(["b", "b"])  # slot 1 resets in the restarted actor
        assert obs[1].startswith("start ") and "error" not in infos[1]
    finally:
        v.close()


def test_make_vec_ray_mode_matches_the_async_vector_on_a_registered_game(vectors):
    for v in vectors.values():  # make_vec's actors take a whole CPU each: free the cluster
        v.close()
    vectors.clear()
    ray_vec = gemkit.make_vec("game:GuessTheNumber-v0-easy", 4, mode="ray")
    async_vec = gemkit.make_vec("game:GuessTheNumber-v0-easy", 4, mode="async")
    try:
        assert ray_vec.reset(seed=3)[0] == async_vec.reset(seed=3)[0]
        for guess in (10, 5, 15):
            a, b = (
                ray_vec.step([f"\\boxed{{{guess}}}"] * 4),
                async_vec.step([f"\\boxed{{{guess}}}"] * 4),
            )
            assert a.observations == b.observations and list(a.rewards) == list(b.rewards)
    finally:
        ray_vec.close()
    with pytest.raises(VectorEnvError, match="closed"):
        ray_vec.step(["\\boxed{1}"] * 4)


def test_an_env_that_cannot_be_built_is_reported_with_its_error():
    with pytest.raises(VectorEnvError, match="no such dataset"):
        RayVectorEnv([Broken], num_workers=1, actor_options=SMALL)


def test_actors_that_cannot_be_placed_fail_with_advice():
    with pytest.raises(VectorEnvError, match="num_workers="):
        RayVectorEnv([Counter] * 2, num_workers=2, actor_options={"num_cpus": 2}, start_timeout_s=3)


def square(x: int) -> int:
    return x * x


def fail_on_three(x: int) -> int:
    if x == 3:
        raise ValueError("three is not allowed")
    return os.getpid()


def test_ray_executor_maps_over_the_cluster():
    with get_executor("ray", workers=2, num_cpus=0.5) as ex:
        assert sorted(ex.map_unordered(square, range(12))) == [x * x for x in range(12)]
        with pytest.raises(ValueError, match="three is not allowed"):
            list(ex.map_unordered(fail_on_three, range(6)))
        out = list(ex.map_unordered(fail_on_three, range(6), return_exceptions=True))
    assert sum(isinstance(r, ValueError) for r in out) == 1
    assert os.getpid() not in {r for r in out if isinstance(r, int)}


def remember(word: str) -> None:
    # process state that survives between tasks (this module travels by value, its globals don't)
    os.environ["GEMKIT_TEST_WORD"] = word


def with_state(x: int) -> str:
    return f"{os.environ.get('GEMKIT_TEST_WORD', 'uninitialized')}-{x}"


def test_ray_executor_map_keeps_item_order_and_initializes_each_worker():
    with get_executor("ray", 2, num_cpus=0.5, initializer=remember, initargs=("ready",)) as ex:
        assert list(ex.map(with_state, range(8))) == [f"ready-{x}" for x in range(8)]
    assert "GEMKIT_TEST_WORD" not in os.environ, "the initializer ran in the workers, not here"


# --- synthesis spread over Ray: the same records as a local run ---------------------------


def _lines(path):
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_qa_synthesis_on_ray_matches_a_local_run(tmp_path):
    from gemkit.synth.qa.run import RunConfig, read_records, run

    config = RunConfig(n=3, world_size=400, seed=5)
    run(tmp_path / "local", config, export=False)
    stats = run(tmp_path / "ray", config, workers=2, executor="ray", export=False)
    assert stats.kept == 3
    assert read_records(tmp_path / "ray") == read_records(tmp_path / "local")


def test_task_synthesis_on_ray_matches_a_local_run(tmp_path):
    from gemkit.synth.tasks.run import RunConfig, run_synthesis

    common = {"category": "trip_planning", "n": 2, "max_level": 2, "k": 1, "export": False}
    run_synthesis(RunConfig(out=tmp_path / "local", **common))
    run_synthesis(RunConfig(out=tmp_path / "ray", workers=2, executor="ray", **common))
    local = _lines(tmp_path / "local" / "tasks.jsonl")
    remote = _lines(tmp_path / "ray" / "tasks.jsonl")
    assert [r["id"] for r in remote] == [r["id"] for r in local]
    assert [r["reference_answer"] for r in remote] == [r["reference_answer"] for r in local]
