"""The process vector: envs in worker processes, lost workers, shutdown, shipping factories.

The slot rules it shares with the other vectors (seeds, autoreset, subsets, env errors) are
checked in `test_vector.py`; this module checks what only a vector of processes can get
wrong. Scripts that must die or be interrupted run as their own session, so no signal they
send reaches the test run.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import cloudpickle
import pytest

import gemkit
from gemkit.core import Env
from gemkit.errors import VectorEnvError
from gemkit.vector import ProcessVectorEnv, SyncVectorEnv, process
from gemkit.vector.process import _share
from gemkit.wrappers.history import ChatHistory

# the envs below live in this test module, which worker processes cannot import by name
cloudpickle.register_pickle_by_value(sys.modules[__name__])


class Probe(Env):
    """Counts steps; its info names its process. Actions: 'crash' (SIGKILL its own process),
    'exit3', 'spawn:<file>' (start a `sleep` child, write its pid, then SIGKILL itself),
    'lock' (an info value that cannot be pickled), 'interrupt:<pgid>' (Ctrl-C to that group)."""

    def __init__(self, length: int = 3, marker: str | None = None):
        self.length = length
        self.marker = marker
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        draw = int(self.np_random.integers(1_000_000))
        return f"start {draw}", {"pid": os.getpid(), "draw": draw}

    def step(self, action):
        if action == "crash":
            os.kill(os.getpid(), signal.SIGKILL)
        if action == "exit3":
            os._exit(3)
        if action.startswith("spawn:"):
            child = subprocess.Popen(["sleep", "600"])
            with open(action[len("spawn:") :], "w") as f:
                f.write(str(child.pid))
            os.kill(os.getpid(), signal.SIGKILL)
        if action.startswith("interrupt:"):
            os.killpg(int(action.split(":")[1]), signal.SIGINT)
            time.sleep(0.2)  # most often the driver is interrupted while it waits for this
        self.t += 1
        info = {"pid": os.getpid(), "t": self.t}
        if action == "lock":
            info["lock"] = threading.Lock()
        return f"t={self.t} a={action}", 1.0, self.t >= self.length, False, info

    def close(self):
        if self.marker:
            with open(f"{self.marker}.{os.getpid()}.{id(self)}", "w") as f:
                f.write("closed")


class Waiting(Probe):
    """Awaits in `astep` (an I/O-bound env) and reports the most calls in flight at once in its
    process."""

    in_flight = 0
    peak = 0

    async def astep(self, action):
        cls = type(self)
        cls.in_flight += 1
        cls.peak = max(cls.peak, cls.in_flight)
        await asyncio.sleep(0.05 if action == "slow" else 0.001)
        cls.in_flight -= 1
        obs, reward, term, trunc, info = self.step("a")
        return obs, reward, term, trunc, {**info, "peak": cls.peak}


class Cores(Probe):
    """Its reset info says how many cores its process counts as its own."""

    def reset(self, *, seed=None, options=None):
        obs, info = super().reset(seed=seed, options=options)
        return obs, {**info, "cores": os.environ.get("GEMKIT_CORES")}


class Broken(Env):
    def __init__(self):
        raise ValueError("no such dataset")


def alive(pid: int) -> bool:
    """True while `pid` runs (a zombie no longer counts)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def wait_gone(pids, limit_s: float = 60.0) -> list[int]:
    """The pids still running once all are gone or `limit_s` has passed."""
    deadline = time.monotonic() + limit_s
    while (left := [p for p in pids if alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def worker_pids(v: ProcessVectorEnv) -> list[int]:
    return [w.pid for w in v._pool.workers]


# -- where the envs run ----------------------------------------------------------------------


def test_envs_run_in_worker_processes_each_holding_a_block_of_slots():
    with ProcessVectorEnv([Probe] * 5, num_workers=2) as v:
        _, infos = v.reset(seed=0)
        pids = [info["pid"] for info in infos]
        assert os.getpid() not in pids
        assert pids[:2] == [pids[0]] * 2 and pids[2:] == [pids[2]] * 3 and pids[0] != pids[2]
        assert v.envs == [] and v.num_workers == 2


def test_by_default_each_core_steps_a_block_of_slots_the_drivers_included():
    cores = len(os.sched_getaffinity(0))
    with ProcessVectorEnv([Probe] * 8) as v:
        _, infos = v.reset(seed=0)
        pids = [info["pid"] for info in infos]
        if cores >= 2:
            w = min(cores - 1, 7)
            d = 8 // (w + 1)
            assert (v.num_workers, v.driver_envs) == (w, d)
            assert pids[8 - d :] == [os.getpid()] * d and os.getpid() not in pids[: 8 - d]
        else:
            assert (v.num_workers, v.driver_envs) == (1, 0)
    with ProcessVectorEnv([Probe]) as v:
        assert (v.num_workers, v.driver_envs) == (1, 0)
    with ProcessVectorEnv([Probe] * 8, num_workers=3) as v:  # named workers hold every env
        assert (v.num_workers, v.driver_envs) == (3, 0)


@pytest.mark.parametrize(
    "num_workers, driver_envs, workers_share",
    [
        (None, None, "1"),  # 3 workers (and the driver's block)
        (2, 0, "2"),  # the driver only waits: two cores each
        (3, 0, "1"),  # 4 // 3
        (8, 0, "1"),  # more workers than cores: still one each
    ],
)
def test_each_worker_counts_its_share_of_the_cores(
    monkeypatch, num_workers, driver_envs, workers_share
):
    # what an env starts to spread work over cores (the math grader's helper processes)
    # sizes itself by GEMKIT_CORES: a worker that counted every core would start them all
    monkeypatch.setenv("GEMKIT_CORES", "4")
    with ProcessVectorEnv([Cores] * 8, num_workers=num_workers, driver_envs=driver_envs) as v:
        _, infos = v.reset(seed=0)
        m = 8 - v.driver_envs
        assert [i["cores"] for i in infos[:m]] == [workers_share] * m
        assert [i["cores"] for i in infos[m:]] == ["4"] * v.driver_envs  # the caller's own
    assert os.environ["GEMKIT_CORES"] == "4"


@pytest.mark.parametrize(
    "n, cores, num_workers, driver_envs, layout",
    [
        (64, 2, None, None, (1, 32)),  # one worker, the driver steps the other half
        (16, 16, None, None, (15, 1)),
        (2, 16, None, None, (1, 1)),
        (64, 1, None, None, (1, 0)),  # one core: all in a worker, the driver only waits
        (64, 16, 4, None, (4, 0)),
        (64, 2, None, 10, (1, 10)),
        (64, 4, 2, 10, (2, 10)),
        (5, 8, None, 4, (1, 4)),
        (5, 8, None, 0, (5, 0)),
    ],
)
def test_the_layout_of_workers_and_the_drivers_block(
    monkeypatch, n, cores, num_workers, driver_envs, layout
):
    monkeypatch.setattr(process, "default_workers", lambda: cores)
    assert process.layout(n, num_workers, driver_envs) == layout


def test_a_wait_polls_before_sleeping_only_when_each_process_has_a_core(monkeypatch):
    monkeypatch.setattr(process, "default_workers", lambda: 2)
    with ProcessVectorEnv([Probe] * 4) as v:  # the driver and one worker
        assert v._pool.spin_s == process.SPIN_S > 0
    with ProcessVectorEnv([Probe] * 4, num_workers=2) as v:  # the driver sleeps, 2 workers run
        assert v._pool.spin_s == 0
        v.reset(seed=0)
        assert v.step(["a"] * 4).observations == ["t=1 a=a"] * 4


@pytest.mark.parametrize("num_workers, driver_envs", [(2, 0), (1, 2)])
def test_async_twins_await_the_workers_without_blocking_the_loop(
    monkeypatch, num_workers, driver_envs
):
    # envs in the driver count their peak here: put it back for the workers of later tests
    # (cloudpickle ships this module's classes by value, class attributes included)
    monkeypatch.setattr(Waiting, "peak", 0)

    async def main():
        v = ProcessVectorEnv([Waiting] * 4, num_workers=num_workers, driver_envs=driver_envs)
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                await asyncio.sleep(0.005)
                ticks += 1

        t = asyncio.create_task(ticker())
        obs, _ = await v.areset(seed=0)
        out = await v.astep(["slow"] * 4)
        t.cancel()
        v.close()
        return obs, out, ticks

    obs, out, ticks = asyncio.run(main())
    assert all(o.startswith("start ") for o in obs) and out.observations == ["t=1 a=a"] * 4
    # the driver's block (if any) awaits its envs on the caller's loop, both at once
    in_driver = [i["pid"] == os.getpid() for i in out.infos]
    assert in_driver == [False] * (4 - driver_envs) + [True] * driver_envs
    assert out.infos[3]["peak"] == 2
    assert ticks > 0, "the loop ran other tasks while the envs waited"


def test_max_concurrency_is_split_over_the_workers():
    assert [_share(5, 2, k) for k in range(2)] == [3, 2]
    assert [_share(1, 3, k) for k in range(3)] == [1, 1, 1]
    assert _share(None, 2, 0) is None
    with ProcessVectorEnv([Waiting] * 8, num_workers=2, max_concurrency=2) as v:
        v.reset(seed=0)
        out = v.step(["a"] * 8)
        assert [info["peak"] for info in out.infos] == [1] * 8


# -- lost workers ----------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["next_step", "same_step"])
def test_a_killed_worker_is_reported_in_its_slots_and_replaced(mode):
    v = ProcessVectorEnv([Probe] * 4, num_workers=2, autoreset_mode=mode)
    v.reset(seed=0)
    first = worker_pids(v)
    obs, rew, term, trunc, infos = v.step(["a", "a", "crash", "a"])
    # the other worker's envs go on; both envs of the lost one say what happened, in one line
    assert obs[:2] == ["t=1 a=a"] * 2 and "error" not in infos[0]
    for i in (2, 3):
        error = infos[i]["error"]
        assert error.startswith("WorkerLost: the worker process of envs 2-3")
        assert "killed by SIGKILL" in error and "\n" not in error
        assert trunc[i] and rew[i] == 0.0
    # a replacement took over: those envs reset on their next step, the others step on
    obs, rew, term, trunc, infos = v.step(["b"] * 4)
    assert obs[:2] == ["t=2 a=b"] * 2
    assert obs[2].startswith("start ") and obs[3].startswith("start ") and list(rew[2:]) == [0, 0]
    assert "error" not in infos[2] and infos[2]["pid"] != first[1]
    obs, *_ = v.step(["c"] * 4)
    assert obs[2:] == ["t=1 a=c"] * 2
    assert not alive(first[1])
    v.close()


def test_the_drivers_block_steps_on_when_a_worker_dies_and_closes_with_the_vector(tmp_path):
    marker = str(tmp_path / "closed")
    v = ProcessVectorEnv(
        [functools.partial(Probe, marker=marker)] * 4, num_workers=1, driver_envs=2
    )
    _, infos = v.reset(seed=0)
    assert [i["pid"] for i in infos][2:] == [os.getpid()] * 2
    same = SyncVectorEnv([Probe] * 4).reset(seed=0)[1]
    assert [i["draw"] for i in infos] == [i["draw"] for i in same]  # seeds, wherever envs run
    obs, rew, _, trunc, infos = v.step(["crash", "a", "a", "b"])
    assert all(
        infos[i]["error"].startswith("WorkerLost: the worker process of envs 0-1") for i in (0, 1)
    )
    assert obs[2:] == ["t=1 a=a", "t=1 a=b"] and list(rew[2:]) == [1.0, 1.0]
    lost = obs[1]
    obs, *_ = v.step({0: "c", 3: "c"})  # a subset across the worker and the driver
    assert obs[0].startswith("start ") and obs[1:] == [lost, "t=1 a=a", "t=2 a=c"]
    v.close()
    # the driver's two envs, and the replacement worker's two (the lost one closed nothing)
    assert len(list(tmp_path.glob(f"closed.{os.getpid()}.*"))) == 2
    assert len(list(tmp_path.glob("closed.*"))) == 4


def test_a_worker_that_exits_or_dies_between_calls_is_reported_at_the_next_call():
    with ProcessVectorEnv([Probe] * 2, num_workers=2) as v:
        v.reset(seed=0)
        out = v.step({1: "exit3"})
        assert "exited with code 3" in out.infos[1]["error"] and out.infos[0] == {"skipped": True}
        v.step(["a", "a"])  # slot 1 resets in the replacement
        os.kill(worker_pids(v)[0], signal.SIGKILL)
        out = v.step(["b", "b"])
        assert "killed by SIGKILL" in out.infos[0]["error"] and out.observations[1] == "t=1 a=b"


def test_a_reset_of_only_lost_workers_raises_with_each_slots_error():
    with ProcessVectorEnv([Probe] * 2, num_workers=2) as v:
        v.reset(seed=0)
        for pid in worker_pids(v):
            os.kill(pid, signal.SIGKILL)
        with pytest.raises(VectorEnvError, match="every env failed to reset") as e:
            v.reset(seed=0)
        assert "env 0: WorkerLost" in str(e.value) and "env 1: WorkerLost" in str(e.value)
        obs, _ = v.reset(seed=0)  # the replacements are up
        assert obs == SyncVectorEnv([Probe] * 2).reset(seed=0)[0]


def test_what_a_lost_worker_started_is_ended_with_it(tmp_path):
    child_file = tmp_path / "child.pid"
    with ProcessVectorEnv([Probe] * 2, num_workers=2) as v:
        v.reset(seed=0)
        out = v.step({0: f"spawn:{child_file}"})
        assert "killed by SIGKILL" in out.infos[0]["error"]
        assert wait_gone([int(child_file.read_text())]) == []


# -- what crosses between processes -----------------------------------------------------------


def test_factories_travel_by_value_and_unpicklable_ones_get_advice():
    length = 2
    with ProcessVectorEnv([lambda: Probe(length=length)] * 2) as v:  # a closure
        v.reset(seed=0)
        assert list(v.step(["a", "a"]).terminated) == [False, False]
        assert list(v.step(["a", "a"]).terminated) == [True, True]
    lock = threading.Lock()
    with pytest.raises(VectorEnvError, match="envs 0-1 cannot be sent to a worker process"):
        ProcessVectorEnv([lambda: (lock, Probe())[1]] * 2, num_workers=1)


def test_an_info_value_that_cannot_be_pickled_arrives_as_its_repr():
    with ProcessVectorEnv([Probe] * 2, num_workers=1) as v:
        v.reset(seed=0)
        out = v.step(["lock", "a"])
        assert "lock" in out.infos[0]["lock"] and isinstance(out.infos[0]["lock"], str)
        assert out.observations == ["t=1 a=lock", "t=1 a=a"]


def test_an_env_that_cannot_be_built_is_reported_with_its_error():
    with pytest.raises(VectorEnvError, match="could not build its envs.*no such dataset"):
        ProcessVectorEnv([Broken] * 2, num_workers=2)


def test_bad_arguments_have_clear_messages():
    with pytest.raises(VectorEnvError, match="num_workers"):
        ProcessVectorEnv([Probe], num_workers=0)
    with pytest.raises(VectorEnvError, match="driver_envs must be from 0 to 1 .* got 2"):
        ProcessVectorEnv([Probe] * 2, driver_envs=2)
    with pytest.raises(ValueError, match="num_workers is for the process and ray modes"):
        gemkit.make_vec("game:GuessTheNumber-v0-easy", 2, mode="async", num_workers=2)
    with pytest.raises(ValueError, match="driver_envs is for the process mode, not 'ray'"):
        gemkit.make_vec("game:GuessTheNumber-v0-easy", 2, mode="ray", driver_envs=1)
    with gemkit.make_vec("game:GuessTheNumber-v0-easy", 3, mode="process", driver_envs=2) as v:
        assert (v.num_workers, v.driver_envs) == (1, 2)
    with ProcessVectorEnv([Probe] * 2) as v:
        v.reset(seed=0)
        with pytest.raises(VectorEnvError, match="must pickle"):
            v.step([threading.Lock(), "a"])
        assert v.step(["a", "a"]).observations == ["t=1 a=a"] * 2  # nothing was sent


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first.
        b: the second.
    """
    return a + b


def test_make_vec_process_mode_plays_like_async_with_tools_and_history():
    def play(mode):
        v = gemkit.make_vec(
            "game:GuessTheNumber-v0-easy",
            3,
            mode=mode,
            tools=[add],
            wrappers=[functools.partial(ChatHistory)],
            **({"num_workers": 2} if mode == "process" else {}),
        )
        trace = [v.reset(seed=5)[0]]
        call = '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>'
        for action in (call, "\\boxed{10}", "\\boxed{15}"):
            out = v.step([action] * 3)
            trace.append((out.observations, list(out.rewards)))
        v.close()
        return trace

    process = play("process")
    assert process == play("async")
    assert process[1][0][0][-1]["content"] == "5"  # the tool ran in the worker


class Echo(Env):
    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return "say hi", {}

    def step(self, action):
        return "ok", float(action == "hi"), True, False, {}


def test_an_id_registered_at_run_time_plays_in_the_workers():
    gemkit.register("proctest:Echo-v0", Echo, override=True)
    with gemkit.make_vec("proctest:Echo-v0", 2, mode="process") as v:
        v.reset(seed=0)
        assert list(v.step(["hi", "no"]).rewards) == [1.0, 0.0]


# -- shutdown -------------------------------------------------------------------------------


def test_close_closes_every_env_in_the_workers_and_ends_them(tmp_path):
    marker = str(tmp_path / "closed")
    v = ProcessVectorEnv([functools.partial(Probe, marker=marker)] * 3, num_workers=2)
    pids = worker_pids(v)
    v.close()
    v.close()
    assert [w.proc.returncode for w in v._pool.workers] == [0, 0]
    assert len(list(tmp_path.glob("closed.*"))) == 3 and wait_gone(pids) == []
    with pytest.raises(VectorEnvError, match="closed"):
        v.step(["a"] * 3)


@pytest.mark.parametrize("num_workers, driver_envs", [(2, 0), (1, 1)])
def test_a_vector_dropped_without_close_ends_its_workers(tmp_path, num_workers, driver_envs):
    marker = str(tmp_path / "closed")
    v = ProcessVectorEnv(
        [functools.partial(Probe, marker=marker)] * 2,
        num_workers=num_workers,
        driver_envs=driver_envs,
    )
    pids = worker_pids(v)
    del v
    gc.collect()
    assert wait_gone(pids) == []
    # the driver's envs are closed too
    assert len(list(tmp_path.glob(f"closed.{os.getpid()}.*"))) == driver_envs
    assert len(list(tmp_path.glob("closed.*"))) == 2


SCRIPT = """
import json, os, signal, sys, functools
sys.path.insert(0, {test_dir!r})
import cloudpickle
import test_process_vector as t
cloudpickle.register_pickle_by_value(t)
from gemkit.vector import ProcessVectorEnv

if __name__ == "__main__":
    v = ProcessVectorEnv([functools.partial(t.Probe, marker={marker!r})] * 2, num_workers=2)
    print(json.dumps([w.pid for w in v._pool.workers]), flush=True)
    v.reset(seed=0)
{body}
"""


def run_script(tmp_path, body: str) -> tuple[subprocess.CompletedProcess, list[int]]:
    script = tmp_path / "driver.py"
    script.write_text(
        SCRIPT.format(
            test_dir=os.path.dirname(__file__),
            marker=str(tmp_path / "closed"),
            body=textwrap.indent(textwrap.dedent(body), "    "),
        )
    )
    proc = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        start_new_session=True,  # its own process group: its Ctrl-C reaches only it
        timeout=300,
    )
    return proc, json.loads(proc.stdout.splitlines()[0])


def test_workers_are_closed_when_the_interpreter_exits_without_close(tmp_path):
    proc, pids = run_script(tmp_path, "v.step(['a', 'a'])\nprint('done', flush=True)")
    assert proc.returncode == 0 and "done" in proc.stdout, proc.stderr
    assert wait_gone(pids) == [] and len(list(tmp_path.glob("closed.*"))) == 2


def test_workers_end_when_their_driver_is_killed(tmp_path):
    proc, pids = run_script(tmp_path, "os.kill(os.getpid(), signal.SIGKILL)")
    assert proc.returncode == -signal.SIGKILL
    assert wait_gone(pids) == []


def test_ctrl_c_interrupts_the_driver_only_and_the_vector_stays_consistent(tmp_path):
    body = """
    try:  # the last worker's env sends it, once every worker has its message
        v.step(["a", "interrupt:%d" % os.getpgid(0)])
    except KeyboardInterrupt:
        print("interrupted", flush=True)
    # the interrupted step did happen in the workers: the next one is their second
    out = v.step(["b", "b"])
    print(json.dumps(out.observations), flush=True)
    print(json.dumps([info.get("pid") for info in out.infos]), flush=True)
    """
    proc, pids = run_script(tmp_path, body)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[1] == "interrupted"
    assert json.loads(lines[2]) == ["t=2 a=b", "t=2 a=b"]
    assert json.loads(lines[3]) == pids, "no worker saw the Ctrl-C"
    assert wait_gone(pids) == [] and len(list(tmp_path.glob("closed.*"))) == 2


def test_ctrl_c_in_the_drivers_own_block_leaves_the_vector_consistent(tmp_path):
    body = """
    v.close()
    d = ProcessVectorEnv([t.Probe] * 2, num_workers=1, driver_envs=1)
    d.reset(seed=0)
    try:  # the driver's own env sends it, once the worker has its message
        d.step(["a", "interrupt:%d" % os.getpgid(0)])
    except KeyboardInterrupt:
        print("interrupted", flush=True)
    # the worker's env took its step (its reply is read at the next call); the driver's was
    # cut off before it counted
    out = d.step(["b", "b"])
    print(json.dumps(out.observations), flush=True)
    print(json.dumps([info["pid"] == os.getpid() for info in out.infos]), flush=True)
    d.close()
    """
    proc, _ = run_script(tmp_path, body)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[1] == "interrupted"
    assert json.loads(lines[2]) == ["t=2 a=b", "t=1 a=b"]
    assert json.loads(lines[3]) == [False, True]
