"""Env throughput: gemkit's vector modes side by side, and gemkit vs GEM (gem-llm), in one run.

Sections (`--cases`, default all of them):

- `gem`: one env, a wrapped env, vectors of 64 and 1,024 envs (sync, async), and `import`
  time, next to GEM when `gem-llm` is installed (`pip install gem-llm`).
- `io`: 1,024 I/O-bound envs (each `astep` awaits 0.02 s) in the async vector, next to bare
  asyncio on the same loop (one task per env, no vector: the ceiling), and the ideal rate.
- `modes`: the cheap game (GuessTheNumber, microseconds a step) in 64 and 1,024 envs, in the
  sync, async and process vectors: the process vector's rate over the async one's.
- `cpu`: CPU-bound envs, 16 of each, an answer graded in every step (`same_step` autoreset):
  math grading (`math:Builtin-v0`, sympy and math-verify), an rg dataset with a heavy scorer
  (`rg:simple_integration`, sympy), a toolworld verifier (`toolworld:TripPlanning-v0`), in the
  sync, async and process vectors. Math grading checks each answer in helper processes, up to
  one per core (`gemkit.cores`), wherever it is awaited: so it also runs in the async vector
  with `GEMKIT_CORES=1`, its rate on one core. First, the toolworld verifier (which computes
  in the env's own process) in the process vector with 1 worker up to twice the cores (every
  env in the workers) and in its default layout (the driver steps a core's share itself), to
  show how the rate grows with workers.
- then Ray (unless `--no-ray`), started only now so its daemons load no other row: each case
  of `modes` and `cpu` in the Ray vector next to the async vector again, and so the process
  vector's rate over Ray's.

The modes of a case take turns trial by trial, and each one's best trial counts: a trial that
another process on the machine slowed down does not decide a ratio, and every ratio is
measured within one run (the median of the round-by-round ratios is printed too). Each section
prints the load average (`os.getloadavg`) it ran under, and each vector how long it took to
build (worker processes start, and import the env's packages, in that time).
Run: `python bench/envs.py [--quick] [--cases io,modes,cpu] [--no-ray] [--trials N]`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import io
import json
import os
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import numpy as np

import gemkit
from gemkit.core import Env, ObservationWrapper
from gemkit.cores import CORES_ENV
from gemkit.envs.games.guess_the_number import GuessTheNumber
from gemkit.vector import AsyncVectorEnv, SyncVectorEnv
from gemkit.vector.aio import new_event_loop
from gemkit.vector.process import default_workers, layout

# GEM's game:GuessTheNumber-v0-hard settings, so both sides play the same game
GTN = {"low": 1, "high": 50, "max_turns": 7}
GEM_ID = "game:GuessTheNumber-v0-hard"
GAME_ID = "game:GuessTheNumber-v0-hard-gem"  # gemkit's code under GEM's rules for that id
CASES = ("gem", "modes", "cpu", "io")

#: answers handed to every math env: numbers (fast checks) and expressions (symbolic ones)
MATH_ANSWERS = [
    "\\boxed{12}",
    "\\boxed{x^2 + 2x + 1}",
    "\\boxed{\\frac{1}{2}}",
    "\\boxed{2\\sqrt{3}}",
    "\\boxed{3.5}",
    "The answer is \\boxed{\\frac{\\pi}{4}}",
    "\\boxed{7}",
    "\\boxed{(x+1)(x-1)}",
]
RG_ANSWERS = ["<answer>x**3/3 + 2*x + C</answer>", "<answer>-5*x**4/4 + x**2 + C</answer>"]
TRIP_PLAN = json.dumps(
    [
        {
            "time": f"2024-05-0{d}",
            "city": "Lisbon",
            "hotel": "Hotel Central",
            "afternoon_restaurant": "Cafe Azul",
            "afternoon_attraction": "Old Tower",
            "evening_restaurant": "Casa Verde",
        }
        for d in (1, 2, 3)
    ]
)
#: (label, env id, answers, envs, vector steps per trial, make kwargs)
CPU_CASES = [
    ("math grading (math:Builtin-v0)", "math:Builtin-v0", MATH_ANSWERS, 16, 6, {}),
    ("rg heavy scorer (rg:simple_integration)", "rg:simple_integration", RG_ANSWERS, 16, 1, {}),
    ("toolworld verifier (TripPlanning)", "toolworld:TripPlanning-v0", [TRIP_PLAN], 16, 2, {}),
]

try:  # GEM prints on import and on vector construction; keep the table clean
    with contextlib.redirect_stdout(io.StringIO()):
        import gem  # type: ignore[import-not-found]
except ImportError:
    gem = None


def load() -> str:
    """The 1, 5 and 15 minute load averages, for the line under each figure."""
    return "load " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def actions(n: int, seed: int = 12345) -> list[str]:
    """Random well-formed guesses, the same list for every side."""
    rng = np.random.default_rng(seed)
    return [f"\\boxed{{{int(x)}}}" for x in rng.integers(1, 51, n)]


def rate(fn: Callable[[], int], min_time: float) -> float:
    """Steps per second of `fn` (which returns how many steps it took), best of a few runs."""
    best = 0.0
    deadline = time.perf_counter() + min_time
    while True:
        t0 = time.perf_counter()
        n = fn()
        best = max(best, n / (time.perf_counter() - t0))
        if time.perf_counter() > deadline:
            return best


def interleaved(trials: dict[str, Callable[[], int]], rounds: int) -> dict[str, list[float]]:
    """Each trial's rates (steps per second), the trials taking turns for `rounds` rounds."""
    rates: dict[str, list[float]] = {name: [] for name in trials}
    for _ in range(rounds):
        for name, trial in trials.items():
            t0 = time.perf_counter()
            n = trial()
            rates[name].append(n / (time.perf_counter() - t0))
    return rates


def paired(rates: dict[str, list[float]], top: str, bottom: str) -> str:
    """`top` over `bottom`: best over best, and the median of the round-by-round ratios."""
    best = max(rates[top]) / max(rates[bottom])
    rounds = statistics.median(a / b for a, b in zip(rates[top], rates[bottom], strict=True))
    return f"{best:.2f}x (round by round: {rounds:.2f}x)"


def single_env_loop(env, acts: list[str]) -> Callable[[], int]:
    """Step one env through `acts`, resetting on episode end."""

    def run() -> int:
        env.reset(seed=0)
        for a in acts:
            _, _, term, trunc, _ = env.step(a)
            if term or trunc:
                env.reset()
        return len(acts)

    return run


def vector_loop(venv, acts: list[str], steps: int, *, reset: bool = True) -> Callable[[], int]:
    """Step a vector env `steps` times with one action per env (after a reset, if asked)."""
    n = venv.num_envs
    batches = [[acts[(k * n + i) % len(acts)] for i in range(n)] for k in range(steps)]

    def run() -> int:
        if reset:
            venv.reset(seed=0)
        for batch in batches:
            venv.step(batch)
        return steps * n

    return run


class Concat(ObservationWrapper):
    """A wrapper that keeps the whole text history (as GEM's `concat` wrapper does)."""

    def reset(self, *, seed=None, options=None):
        obs, info = self.env.reset(seed=seed, options=options)
        self.history = [obs]
        return obs, info

    def observation(self, observation: str) -> str:
        self.history.append(observation)
        return "\n".join(self.history[-20:])


class SleepyEnv(Env):
    """An I/O-bound env: each async step only awaits `latency` seconds (an LLM judge, a search).

    Its own work is nil, so the gap to the ideal rate is the vector's overhead alone.
    """

    latency = 0.02

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return "ready", {}

    def step(self, action):
        return "ok", 0.0, False, False, {}

    async def astep(self, action):
        await asyncio.sleep(self.latency)
        return "ok", 0.0, False, False, {}


def bare_asyncio_rounds(n: int, rounds: int) -> int:
    """What asyncio alone allows: `rounds` rounds of `n` tasks each awaiting the latency.

    No vector, no env: one task per env joined by a counter, on the loop `AsyncVectorEnv`
    uses, with the collector paused as it does. The I/O-bound case cannot beat this ceiling.
    """

    async def one(join: list) -> None:
        await asyncio.sleep(SleepyEnv.latency)
        join[0] -= 1
        if not join[0]:
            join[1].set_result(None)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for _ in range(rounds):
            join = [n, loop.create_future()]
            tasks = [loop.create_task(one(join)) for _ in range(n)]
            await join[1]
            del tasks

    loop = new_event_loop()
    enabled = gc.isenabled()
    gc.disable()
    try:
        loop.run_until_complete(main())
    finally:
        if enabled:
            gc.enable()
        loop.close()
    return n * rounds


def import_time(module: str) -> float:
    """Seconds `python -X importtime -c 'import module'` reports for the module itself."""
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", f"import {module}"],
        capture_output=True,
        text=True,
    ).stderr
    for line in out.splitlines()[::-1]:
        m = re.match(r"import time:\s+\d+ \|\s+(\d+) \| (\S+)$", line.strip())
        if m and m[2] == module:
            return int(m[1]) / 1e6
    return float("nan")


# -- sections --------------------------------------------------------------------------------


def gem_section(t: float) -> None:
    """gemkit vs GEM: one env, a wrapped env, 64 and 1,024 envs (sync, async), import time."""
    acts = actions(20_000)

    def add(case: str, ours: float, theirs: float | None, unit: str = "steps/s") -> None:
        ratio = f"{ours / theirs:6.2f}x" if theirs else "   -   "
        print(f"{case:<34} {ours:>14,.0f} {theirs or 0:>14,.0f} {ratio}  {unit}", flush=True)

    print(f"\n== gemkit vs GEM ({load()})")
    print(f"{'case':<34} {'gemkit':>14} {'GEM':>14} {'ratio':>7}")
    gem_make = (lambda: gem.make(GEM_ID, seed=0)) if gem else None
    ours = rate(single_env_loop(GuessTheNumber(**GTN), acts[:5000]), t)
    theirs = rate(single_env_loop(gem_make(), acts[:5000]), t) if gem else None
    add("single env", ours, theirs)
    ours = rate(single_env_loop(Concat(GuessTheNumber(**GTN)), acts[:5000]), t)
    theirs = None
    if gem:
        from gem.wrappers.wrapper_factory import get_wrapper_fns

        env = gem_make()
        for w in get_wrapper_fns("concat", tokenizer=None):
            env = w(env)
        theirs = rate(single_env_loop(env, acts[:5000]), t)
    add("wrapped env (history)", ours, theirs)
    for n in (64, 1024):
        steps = max(2, 20_000 // n)
        fns = [lambda: GuessTheNumber(**GTN)] * n
        for mode in ("sync", "async"):
            cls = SyncVectorEnv if mode == "sync" else AsyncVectorEnv
            venv = cls(fns)
            ours = rate(vector_loop(venv, acts, steps), t)
            venv.close()
            theirs = None
            if gem:
                with contextlib.redirect_stdout(io.StringIO()):
                    gvec = gem.make_vec([GEM_ID] * n, async_mode=(mode == "async"), seed=0)
                theirs = rate(vector_loop(gvec, acts, steps), t)
                if hasattr(gvec, "thread_pool_executer"):
                    gvec.thread_pool_executer.shutdown()
            add(f"{n} envs, {mode}", ours, theirs)
    if gem:  # GEM's async vector on the I/O-bound env (threads, one per env)
        from gem.core import Env as GemEnv
        from gem.vector.async_vector_env import AsyncVectorEnv as GemAsync

        class GemSleepy(GemEnv):
            def reset(self, seed=None):
                super().reset(seed)
                return "ready", {}

            def step(self, action):
                time.sleep(SleepyEnv.latency)
                return "ok", 0.0, False, False, {}

        n, steps = 1024, 10
        venv = AsyncVectorEnv([SleepyEnv] * n)
        ours = rate(vector_loop(venv, acts, steps), t)
        venv.close()
        with contextlib.redirect_stdout(io.StringIO()):
            gvec = GemAsync(env_ids=[GEM_ID] * n, env_fns=[GemSleepy] * n)
        theirs = rate(vector_loop(gvec, acts, steps), t)
        gvec.thread_pool_executer.shutdown()
        add("I/O-bound 1024 envs (0.02 s)", ours, theirs)
    ours_imp = import_time("gemkit")
    theirs_imp = import_time("gem") if gem else None
    print(
        f"{'import time (s)':<34} {ours_imp:>14.4f} {theirs_imp or 0:>14.4f} "
        + (f"{theirs_imp / ours_imp:6.1f}x faster" if theirs_imp else "")
    )


def build(env_id: str, n: int, mode: str, **kw) -> tuple[object, float]:
    """A vector of `n` envs in `mode`, and the seconds it took to build and reset it."""
    t0 = time.perf_counter()
    venv = gemkit.make_vec(env_id, n, mode=mode, **kw)
    venv.reset(seed=0)
    return venv, time.perf_counter() - t0


def show(rates: dict[str, list[float]], unit: str, starts: dict[str, float] | None = None) -> None:
    """One line per mode: its best rate, median rate and start-up time."""
    for name, got in rates.items():
        start = f"   built in {starts[name]:5.1f} s" if starts and name in starts else ""
        print(
            f"  {name:<22} best {max(got):>11,.0f}  median {statistics.median(got):>11,.0f}"
            f" {unit}{start}"
        )


class Case:
    """One workload: how to build its vectors and what a trial of one vector does."""

    def __init__(
        self,
        label: str,
        env_id: str,
        n: int,
        trial: Callable[[object], Callable[[], int]],
        unit: str,
        **make: object,
    ):
        self.label, self.env_id, self.n, self.trial, self.unit = label, env_id, n, trial, unit
        self.make = make

    def run(self, modes: list[str], rounds: int) -> dict[str, list[float]]:
        """Build a vector per mode, warm each up, then time their trials taking turns."""
        vecs, starts = {}, {}
        for mode in modes:
            kind = mode.split(",")[0]  # "async, 1 core": the async vector with GEMKIT_CORES=1
            vecs[mode], starts[mode] = build(self.env_id, self.n, kind, **self.make)
        trials = {m: self.trial(v) for m, v in vecs.items()}
        for m in trials:
            if m.endswith(", 1 core"):
                trials[m] = one_core(trials[m])
        for trial in trials.values():
            trial()  # warm-up: imports, caches, the grading helper processes
        rates = interleaved(trials, rounds)
        show(rates, self.unit, starts)
        for v in vecs.values():
            v.close()
        return rates


def one_core(trial: Callable[[], int]) -> Callable[[], int]:
    """`trial` with `GEMKIT_CORES=1` while it runs: the math grader checks one answer at a time."""

    def run() -> int:
        before = os.environ.get(CORES_ENV)
        os.environ[CORES_ENV] = "1"
        try:
            return trial()
        finally:
            if before is None:
                del os.environ[CORES_ENV]
            else:
                os.environ[CORES_ENV] = before

    return run


def compare(cases: list[Case], rounds: int, ray: bool) -> None:
    """Each case in the sync, async and process vectors, interleaved; then, with Ray started
    only now (its daemons would load the machine), Ray next to the async vector again."""
    cores = default_workers()
    ratios = {}
    for case in cases:
        print(f"\n== {case.label} ({load()})")
        helpers = case.env_id.startswith("math:")  # its grader checks in helper processes
        modes = ["sync", "async", *(["async, 1 core"] * helpers), "process"]
        rates = case.run(modes, rounds)
        ratios[case.label] = max(rates["process"]) / max(rates["async"])
        w, d = layout(case.n, None, None)
        where = f"{w} worker{'s' * (w > 1)} + {d} envs in the driver" if d else f"{w} workers"
        print(f"  process ({where}, {cores} cores) / async: {paired(rates, 'process', 'async')}")
        if helpers:
            for top in ("async", "process"):
                print(f"  {top} / async on 1 core: {paired(rates, top, 'async, 1 core')}")
    if not ray or not start_ray():
        return
    for case in cases:
        print(f"\n== {case.label}, Ray next to the async vector ({load()})")
        rates = case.run(["async", "ray"], rounds)
        ray_ratio = max(rates["ray"]) / max(rates["async"])
        print(f"  ray / async: {paired(rates, 'ray', 'async')}")
        print(f"  so process / ray: {ratios[case.label] / ray_ratio:.2f}x   ({load()})")


def game_cases() -> list[Case]:
    """The cheap game (microseconds a step) in 64 and 1,024 envs."""
    acts = actions(20_000)
    return [
        Case(
            f"{n} envs of {GAME_ID}, {max(4, 8_192 // n)} steps a trial",
            GAME_ID,
            n,
            lambda v, n=n: vector_loop(v, acts, max(4, 8_192 // n), reset=False),
            "steps/s",
        )
        for n in (64, 1024)
    ]


def answer_trial(venv, answers: list[str], steps: int) -> Callable[[], int]:
    """`steps` vector steps in which every env answers (env i the answer i, rotating)."""
    n = venv.num_envs
    batches = [[answers[(k * n + i) % len(answers)] for i in range(n)] for k in range(steps)]

    def run() -> int:
        for batch in batches:
            venv.step(batch)
        return steps * n

    return run


def cpu_cases() -> list[Case]:
    """The CPU-bound envs: every step grades an answer (`same_step` autoreset)."""
    return [
        Case(
            f"{label}: {n} envs, {steps} answers each a trial",
            env_id,
            n,
            lambda v, answers=answers, steps=steps: answer_trial(v, answers, steps),
            "answers/s",
            autoreset_mode="same_step",
            **kw,
        )
        for label, env_id, answers, n, steps, kw in CPU_CASES
    ]


def workers_section(rounds: int, max_workers: int) -> None:
    """The toolworld verifier in the process vector by number of workers, interleaved."""
    label, env_id, answers, n, steps, kw = CPU_CASES[2]
    counts = sorted({1, *range(2, max_workers + 1, max(1, max_workers // 8)), max_workers})
    print(
        f"\n== {label}: the process vector by number of workers "
        f"({default_workers()} cores; {load()})"
    )
    vecs = {}
    for w in counts:  # every env in the workers
        vecs[f"{w} workers"], _ = build(
            env_id, n, "process", num_workers=w, autoreset_mode="same_step", **kw
        )
    w, d = layout(n, None, None)
    if d:  # the default: the driver steps a block too
        vecs[f"{w} + driver"], _ = build(env_id, n, "process", autoreset_mode="same_step", **kw)
    trials = {name: answer_trial(v, answers, steps) for name, v in vecs.items()}
    for trial in trials.values():
        trial()
    rates = interleaved(trials, rounds)
    one = max(rates["1 workers"])
    for name, got in rates.items():
        print(f"  {name:<12} best {max(got):>9,.1f} answers/s   {max(got) / one:5.2f}x one worker")
    print(f"  ({load()})")
    for v in vecs.values():
        v.close()


def io_section(rounds: int) -> None:
    """The async vector on 1,024 I/O-bound envs next to bare asyncio, interleaved."""
    n, steps = 1024, 10
    ideal = n / SleepyEnv.latency
    venv = AsyncVectorEnv([SleepyEnv] * n)
    venv.reset(seed=0)
    trials = {
        "async vector": vector_loop(venv, ["go"], steps, reset=False),
        "bare asyncio": lambda: bare_asyncio_rounds(n, steps),
    }
    print(f"\n== I/O-bound: {n} envs awaiting {SleepyEnv.latency} s a step ({load()})")
    for trial in trials.values():
        trial()
    rates = interleaved(trials, rounds)
    show(rates, "steps/s")
    for name, got in rates.items():
        print(f"  {name}: {max(got) / ideal:.3f} of the ideal {ideal:,.0f} steps/s")
    print(f"  async vector / bare asyncio: {paired(rates, 'async vector', 'bare asyncio')}")
    print(f"  ({load()})")
    venv.close()


def start_ray() -> bool:
    """A private local Ray instance with one CPU per core; False when Ray is not installed."""
    try:
        import ray  # noqa: F401
    except ImportError:
        print("\n(Ray is not installed: its rows are left out; pip install 'gemkit[ray]')")
        return False
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a private local cluster for the run
    from gemkit.executor import ensure_ray

    t0 = time.perf_counter()
    ensure_ray(None, num_cpus=default_workers(), configure_logging=False)
    print(f"\n(Ray started in {time.perf_counter() - t0:.1f} s)")
    return True


def main() -> None:
    """Run the sections asked for and print their tables."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="shorter runs (fewer trials)")
    ap.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of {CASES}")
    ap.add_argument("--trials", type=int, default=None, help="trials per mode (default 7, 3)")
    ap.add_argument("--no-ray", action="store_true", help="leave out the Ray vector")
    ap.add_argument(
        "--max-workers", type=int, default=None, help="most workers tried (default 2x cores)"
    )
    args = ap.parse_args()
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = sorted(set(cases) - set(CASES))
    if unknown:
        ap.error(f"unknown cases {unknown}; expected some of {CASES}")
    rounds = args.trials or (3 if args.quick else 7)
    print(
        f"gemkit {gemkit.__version__}, python {sys.version.split()[0]}, "
        f"{default_workers()} cores, {load()}"
    )
    ray = not args.no_ray
    if "gem" in cases:
        gem_section(0.5 if args.quick else 2.0)
    if "io" in cases:
        io_section(rounds * 2)
    chosen = (game_cases() if "modes" in cases else []) + (cpu_cases() if "cpu" in cases else [])
    if "cpu" in cases:
        workers_section(rounds, args.max_workers or 2 * default_workers())
    if chosen:
        compare(chosen, rounds, ray)


if __name__ == "__main__":
    main()
