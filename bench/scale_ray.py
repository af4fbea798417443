"""Ray vector env throughput vs the async vector env, for a cheap and a CPU-heavy env.

Cases: `game:GuessTheNumber-v0-easy` (a step costs microseconds: Ray's per-round messaging
dominates) and the same game with `--work-ms` of CPU work per step (hashing; Ray's actors run
it in parallel processes, the async vector in one thread). Each runs `--envs` envs for
`--steps` vector steps, in the async vector and in Ray with 1 and 2 workers (one actor, one
CPU each). Prints env steps per second and the ratio to the async vector.
Run: `python bench/scale_ray.py [--envs 8 --steps 200 --work-ms 10]` (needs `gemkit[ray]`).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import time

from rich.console import Console
from rich.table import Table

import gemkit
from gemkit.core import Wrapper

GAME = "game:GuessTheNumber-v0-easy"


class BusyStep(Wrapper):
    """Burns about `work_ms` of CPU in every step (a simulator, a verifier, a parser)."""

    def __init__(self, env: gemkit.Env, work_ms: float):
        super().__init__(env)
        self.rounds = calibrate(work_ms)

    def step(self, action: str):
        """Hash for a while, then step the game."""
        digest = b"gemkit"
        for _ in range(self.rounds):
            digest = hashlib.sha256(digest).digest()
        return self.env.step(action)


def calibrate(work_ms: float) -> int:
    """How many sha256 rounds take `work_ms` on this machine."""
    n, digest = 20_000, b"x"
    t0 = time.perf_counter()
    for _ in range(n):
        digest = hashlib.sha256(digest).digest()
    per_round = (time.perf_counter() - t0) / n
    return max(1, int(work_ms / 1000 / per_round))


def rate(mode: str, envs: int, steps: int, work_ms: float, workers: int | None = None) -> float:
    """Env steps per second of one vector run."""
    wrappers = [lambda e: BusyStep(e, work_ms)] if work_ms else []
    if mode == "ray":
        from gemkit.vector.ray import RayVectorEnv

        def factory() -> gemkit.Env:
            return gemkit.make(GAME, wrappers=wrappers)

        vec = RayVectorEnv([factory] * envs, num_workers=workers)
    else:
        vec = gemkit.make_vec(GAME, envs, wrappers=wrappers, mode=mode)
    try:
        vec.reset(seed=0)
        actions = [f"\\boxed{{{k % 20 + 1}}}" for k in range(envs)]
        vec.step(actions)  # warm up (imports, first calls)
        t0 = time.perf_counter()
        for _ in range(steps):
            vec.step(actions)
        return envs * steps / (time.perf_counter() - t0)
    finally:
        vec.close()


def main() -> None:
    """Run every case and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, default=8)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--work-ms", type=float, default=10.0)
    parser.add_argument("--address", default=None, help="Ray cluster address (default: local)")
    args = parser.parse_args()
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a private local cluster for the run
    from gemkit.executor import ensure_ray

    ray = ensure_ray(args.address, num_cpus=None if args.address else max(2, os.cpu_count() or 2))
    console = Console()
    table = Table(title=f"vector throughput, {args.envs} envs x {args.steps} steps (env steps/s)")
    for col in ("env", "async", "ray 1 worker", "ray 2 workers", "ray 2w / async"):
        table.add_column(col, justify="right" if col != "env" else "left")
    for label, work in (("GuessTheNumber", 0.0), (f"+{args.work_ms:g} ms CPU/step", args.work_ms)):
        steps = args.steps if not work else max(10, int(args.steps * 2 / max(work, 1)))
        base = rate("async", args.envs, steps, work)
        one = rate("ray", args.envs, steps, work, workers=1)
        two = rate("ray", args.envs, steps, work, workers=2)
        table.add_row(label, f"{base:,.0f}", f"{one:,.0f}", f"{two:,.0f}", f"{two / base:.2f}x")
    console.print(table)
    console.print(f"Ray {ray.__version__}, {os.cpu_count()} CPUs on this machine")
    ray.shutdown()


if __name__ == "__main__":
    main()
