"""Env throughput: gemkit vs GEM (gem-llm) measured side by side in one run.

Cases: one env, a wrapped env, vectors of 64 and 1,024 envs (sync and async), an I/O-bound
env (each `astep` awaits 0.02 s; 1,024 envs) as a fraction of the ideal num_envs / latency,
next to what bare asyncio reaches on the same machine (one task per env, no vector: the
ceiling for that case), and `import` time. Run: `python bench/envs.py [--quick]`. GEM columns appear when
`gem-llm` is installed (`pip install gem-llm`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import re
import subprocess
import sys
import time
from collections.abc import Callable

import numpy as np

from gemkit.core import Env, ObservationWrapper
from gemkit.envs.games.guess_the_number import GuessTheNumber
from gemkit.vector import AsyncVectorEnv, SyncVectorEnv

# GEM's game:GuessTheNumber-v0-hard settings, so both sides play the same game
GTN = {"low": 1, "high": 50, "max_turns": 7}
GEM_ID = "game:GuessTheNumber-v0-hard"

try:  # GEM prints on import and on vector construction; keep the table clean
    with contextlib.redirect_stdout(io.StringIO()):
        import gem  # type: ignore[import-not-found]
except ImportError:
    gem = None


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


def vector_loop(venv, acts: list[str], steps: int) -> Callable[[], int]:
    """Step a vector env `steps` times with one action per env."""
    n = venv.num_envs
    batches = [[acts[(k * n + i) % len(acts)] for i in range(n)] for k in range(steps)]

    def run() -> int:
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
    import gc

    from gemkit.vector.aio import new_event_loop

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


def main() -> None:
    """Run every case and print the table."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="shorter runs")
    args = ap.parse_args()
    t = 0.5 if args.quick else 2.0
    acts = actions(20_000)
    rows: list[tuple[str, float, float | None, str]] = []

    def add(case: str, ours: float, theirs: float | None, unit: str = "steps/s") -> None:
        rows.append((case, ours, theirs, unit))
        ratio = f"{ours / theirs:6.2f}x" if theirs else "   -   "
        print(f"{case:<34} {ours:>14,.0f} {theirs or 0:>14,.0f} {ratio}  {unit}", flush=True)

    print(f"{'case':<34} {'gemkit':>14} {'GEM':>14} {'ratio':>7}")
    gem_make = (lambda: gem.make(GEM_ID, seed=0)) if gem else None

    # one env
    ours = rate(single_env_loop(GuessTheNumber(**GTN), acts[:5000]), t)
    theirs = rate(single_env_loop(gem_make(), acts[:5000]), t) if gem else None
    add("single env", ours, theirs)

    # wrapped env
    ours = rate(single_env_loop(Concat(GuessTheNumber(**GTN)), acts[:5000]), t)
    theirs = None
    if gem:
        from gem.wrappers.wrapper_factory import get_wrapper_fns

        env = gem_make()
        for w in get_wrapper_fns("concat", tokenizer=None):
            env = w(env)
        theirs = rate(single_env_loop(env, acts[:5000]), t)
    add("wrapped env (history)", ours, theirs)

    # vectors
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

    # I/O-bound: 1,024 envs each awaiting 0.02 s per step
    n, steps = 1024, 10
    venv = AsyncVectorEnv([SleepyEnv] * n)
    ideal = n / SleepyEnv.latency
    ours = rate(vector_loop(venv, acts, steps), t)
    venv.close()
    theirs = None
    if gem:
        from gem.core import Env as GemEnv

        class GemSleepy(GemEnv):
            def reset(self, seed=None):
                super().reset(seed)
                return "ready", {}

            def step(self, action):
                time.sleep(SleepyEnv.latency)
                return "ok", 0.0, False, False, {}

        from gem.vector.async_vector_env import AsyncVectorEnv as GemAsync

        with contextlib.redirect_stdout(io.StringIO()):
            gvec = GemAsync(
                env_ids=[GEM_ID] * n,
                env_fns=[GemSleepy] * n,
            )
        theirs = rate(vector_loop(gvec, acts, steps), t)
        gvec.thread_pool_executer.shutdown()
    add("I/O-bound 1024 envs (0.02 s)", ours, theirs)
    print(f"  gemkit fraction of ideal ({ideal:,.0f} steps/s): {ours / ideal:.2f}"
          + (f"; GEM: {theirs / ideal:.2f}" if theirs else ""))
    ceiling = rate(lambda: bare_asyncio_rounds(n, steps), t)
    print(f"  bare asyncio on this machine (one task per env, no vector): {ceiling / ideal:.2f}")

    # import time
    ours_imp = import_time("gemkit")
    theirs_imp = import_time("gem") if gem else None
    print(f"{'import time (s)':<34} {ours_imp:>14.4f} {theirs_imp or 0:>14.4f} "
          + (f"{theirs_imp / ours_imp:6.1f}x faster" if theirs_imp else ""))


if __name__ == "__main__":
    main()
