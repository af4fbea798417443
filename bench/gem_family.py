"""`gem:` envs against GEM's own envs: the same game, the same moves, side by side in one run.

A `gem:` env is GEM's code plus gemkit's contract (each env's own random state, an error
observation instead of an exception, `info["success"]`); this measures what that adds per
step, resets included (a game that ends is reset and played on), each side in processes of
its own, alternating, best of three. Run: `python bench/gem_family.py [--quick]` (needs
`pip install 'gemkit[gem]'`). The load average is printed with the table: figures from a
loaded machine are noisy, the ratio less so.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import subprocess
import sys

import numpy as np

import gemkit
from envs import rate, single_env_loop

with contextlib.redirect_stdout(io.StringIO()):  # GEM prints on import
    import gem  # type: ignore[import-not-found]

#: GEM id -> a move generator (a list of well-formed moves for that game)
GAMES = {
    "game:GuessTheNumber-v0-hard": lambda rng: f"\\boxed{{{int(rng.integers(1, 51))}}}",
    "game:Mastermind-v0-easy": lambda rng: (
        "\\boxed{" + " ".join(map(str, rng.integers(1, 5, 3))) + "}"
    ),
    "game:Minesweeper-v0-easy": lambda rng: (
        f"\\boxed{{reveal {int(rng.integers(1, 6))} {int(rng.integers(1, 6))}}}"
    ),
    "game:TowerofHanoi-v0-easy": lambda rng: (
        f"\\boxed{{move from {'ABC'[rng.integers(3)]} to {'ABC'[rng.integers(3)]}}}"
    ),
    "game:Game2048-v0-easy": lambda rng: "\\boxed{" + "wasd"[int(rng.integers(4))] + "}",
}


def moves(gem_id: str, n: int, seed: int = 12345) -> list[str]:
    """The same `n` moves for both sides."""
    rng = np.random.default_rng(seed)
    return [GAMES[gem_id](rng) for _ in range(n)]


def measure(side: str, gem_id: str, seconds: float) -> float:
    """Steps per second of one side on one game, in this process."""
    acts = moves(gem_id, 5_000)
    if side == "gem":
        with contextlib.redirect_stdout(io.StringIO()):
            env = gem.make(gem_id)
    else:
        env = gemkit.make(f"gem:{gem_id}")
    return rate(single_env_loop(env, acts), seconds)


def main() -> None:
    """Print steps per second of each game both ways, and the ratio."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="shorter runs")
    ap.add_argument("--side", choices=("gem", "gemkit"), help=argparse.SUPPRESS)
    ap.add_argument("--game", help=argparse.SUPPRESS)
    args = ap.parse_args()
    t = 0.5 if args.quick else 2.0
    if args.side:  # one measurement, in a process of its own
        print(measure(args.side, args.game, t))
        return
    # each side in fresh processes, alternating, best of three: GEM's envs measured where no
    # gem: env ever ran (a gem: env puts gemkit's stand-ins into GEM's modules), and a burst
    # of load on this shared machine lands on both sides
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{'game':<30} {'gem: (gemkit)':>14} {'GEM':>14} {'cost':>8}")
    for gem_id in GAMES:
        best = {"gem": 0.0, "gemkit": 0.0}
        for _ in range(3):
            for side in best:
                cmd = [sys.executable, __file__, "--side", side, "--game", gem_id]
                if args.quick:
                    cmd.append("--quick")
                out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
                best[side] = max(best[side], float(out.split()[-1]))
        ours, theirs = best["gemkit"], best["gem"]
        print(f"{gem_id:<30} {ours:>14,.0f} {theirs:>14,.0f} {theirs / ours:7.2f}x", flush=True)
    print("cost: the time of a gem: step over the time of GEM's own step, resets included")
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
