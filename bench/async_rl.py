"""Batch-synchronous vs one-step-off vs fully asynchronous RL on heavy-tailed episodes.

A simulated inference server (the scripted OpenAI-protocol server on 127.0.0.1, real HTTP)
has `--slots` generation slots, like a GPU's batch: a request waits for a free slot, holds it
for its turn's latency, and frees it. Episodes have log-normal turn counts and each turn a
log-normal latency, so a few episodes are an order of magnitude longer than most, as in
agentic search (ASearcher). A learner step takes `--train-s` seconds and consumes `--batch`
episodes. Three schedules, each for `--steps` learner steps, in one run:

- **batch-synchronous**: generate a batch, wait for its slowest episode, train, repeat;
- **one-step-off**: generate batch k+1 while training on batch k (verl/AReaL's "one step
  off-policy"); each batch still waits for its slowest episode;
- **fully asynchronous**: `--in-flight` episodes run at all times; the learner takes any
  `--batch` finished episodes whenever they are ready; weights "change" after each step, so
  each episode counts how many steps passed while it ran (its staleness).

Printed per schedule: generator utilization (slot-seconds busy over slots x wall time),
episodes trained per second, the ratio to batch-synchronous, and staleness. Run:
`python bench/async_rl.py [--quick]`.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from dataclasses import dataclass

import numpy as np

from gemkit.llm import LLMClient
from gemkit.testing.openai_server import ScriptedOpenAIServer


@dataclass
class Workload:
    """Heavy-tailed episodes: log-normal turns and per-turn latency."""

    turns_median: float = 4.0
    turns_sigma: float = 1.0
    max_turns: int = 100
    latency_median_s: float = 0.03
    latency_sigma: float = 0.5
    seed: int = 0

    def episode(self, k: int) -> list[float]:
        """The per-turn latencies of episode `k` (the same in every schedule)."""
        rng = np.random.default_rng([self.seed, k])
        turns = int(np.clip(round(rng.lognormal(np.log(self.turns_median), self.turns_sigma)), 1, self.max_turns))  # fmt: skip
        return [
            float(x)
            for x in rng.lognormal(np.log(self.latency_median_s), self.latency_sigma, size=turns)
        ]


class Generator:
    """The simulated server's model: `slots` concurrent turns, each busy for its latency."""

    def __init__(self, slots: int):
        self.slots = slots
        self.sem: asyncio.Semaphore | None = None
        self.busy_s = 0.0

    async def reply(self, request: dict) -> str:
        if self.sem is None:
            self.sem = asyncio.Semaphore(self.slots)
        latency = float(request["messages"][-1]["content"])
        async with self.sem:
            start = time.perf_counter()
            await asyncio.sleep(latency)
            self.busy_s += time.perf_counter() - start
        return "ok"


async def play(client: LLMClient, latencies: list[float]) -> None:
    """One episode: one chat request per turn, each asking for that turn's latency."""
    for latency in latencies:
        await client.chat([{"role": "user", "content": repr(latency)}], max_tokens=1)


async def batch_sync(client, work: Workload, args, counter) -> dict:
    """Generate, wait for the slowest, train; repeat."""
    for _ in range(args.steps):
        batch = [next(counter) for _ in range(args.batch)]
        await asyncio.gather(*(play(client, work.episode(k)) for k in batch))
        await asyncio.sleep(args.train_s)
    return {"staleness": 0.0}


async def one_step_off(client, work: Workload, args, counter) -> dict:
    """Generate batch k+1 while training on batch k."""

    async def generate() -> None:
        batch = [next(counter) for _ in range(args.batch)]
        await asyncio.gather(*(play(client, work.episode(k)) for k in batch))

    await generate()
    for step in range(args.steps):
        last = step == args.steps - 1
        await asyncio.gather(asyncio.sleep(args.train_s), *(() if last else (generate(),)))
    return {"staleness": 1.0}


async def fully_async(client, work: Workload, args, counter) -> dict:
    """Episodes always in flight; train whenever a batch has finished."""
    done: asyncio.Queue[int] = asyncio.Queue()
    version = 0

    async def worker() -> None:
        while True:
            k, started = next(counter), version
            await play(client, work.episode(k))
            await done.put(version - started)

    workers = [asyncio.create_task(worker()) for _ in range(args.in_flight)]
    lags: list[int] = []
    for _ in range(args.steps):
        lags += [await done.get() for _ in range(args.batch)]
        await asyncio.sleep(args.train_s)
        version += 1
    for w in workers:
        w.cancel()
    await asyncio.gather(*workers, return_exceptions=True)
    return {"staleness": float(np.mean(lags)), "staleness_max": int(max(lags))}


async def run(mode, base_url: str, gen: Generator, work: Workload, args) -> dict:
    client = LLMClient(base_url, "k", "sim", max_concurrency=4 * args.in_flight, max_retries=0)
    counter = iter(range(10**9))
    busy0, t0 = gen.busy_s, time.perf_counter()
    extra = await mode(client, work, args, counter)
    wall = time.perf_counter() - t0
    await client.close()
    return {
        "utilization": (gen.busy_s - busy0) / (gen.slots * wall),
        "episodes_per_s": args.steps * args.batch / wall,
        "wall_s": wall,
        **extra,
    }


def main() -> None:
    """Run the three schedules on the same workload and print a table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--slots", type=int, default=32, help="generation slots of the server")
    ap.add_argument("--batch", type=int, default=64, help="episodes per learner step")
    ap.add_argument("--in-flight", type=int, default=48, help="episodes in flight (async)")
    ap.add_argument("--train-s", type=float, default=0.3, help="seconds per learner step")
    ap.add_argument("--steps", type=int, default=10, help="learner steps per schedule")
    ap.add_argument("--quick", action="store_true", help="4 steps per schedule")
    args = ap.parse_args()
    if args.quick:
        args.steps = 4
    work = Workload()
    sample = [work.episode(k) for k in range(2000)]
    turns = np.array([len(s) for s in sample])
    seconds = np.array([sum(s) for s in sample])
    print(
        f"workload: turns median {np.median(turns):.0f}, p99 {np.percentile(turns, 99):.0f}, "
        f"max {turns.max()}; episode seconds median {np.median(seconds):.2f}, "
        f"p99 {np.percentile(seconds, 99):.2f}; {args.slots} slots, batch {args.batch}, "
        f"train {args.train_s:g} s/step, {args.in_flight} in flight (async)"
    )
    gen = Generator(args.slots)
    rows = []
    with ScriptedOpenAIServer(gen.reply) as srv:
        for name, mode in (
            ("batch-synchronous", batch_sync),
            ("one-step-off", one_step_off),
            ("fully asynchronous", fully_async),
        ):
            rows.append((name, asyncio.run(run(mode, srv.base_url, gen, work, args))))
    base = rows[0][1]["episodes_per_s"]
    print(f"{'schedule':<20} {'gen. utilization':>17} {'episodes/s':>11} {'vs sync':>8} {'staleness':>14} {'wall s':>7}")  # fmt: skip
    for name, r in rows:
        stale = f"{r['staleness']:.2f}" + (
            f" (max {r['staleness_max']})" if "staleness_max" in r else ""
        )
        print(f"{name:<20} {r['utilization']:>17.2f} {r['episodes_per_s']:>11.1f} "
              f"{r['episodes_per_s'] / base:>7.2f}x {stale:>14} {r['wall_s']:>7.1f}")  # fmt: skip


if __name__ == "__main__":
    main()
