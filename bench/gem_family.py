"""`gem:` envs against GEM's own envs: the same game, the same moves, side by side in one run.

A `gem:` env is GEM's code plus gemkit's contract (each env's own random state, an error
observation instead of an exception, `info["success"]`); this measures what that adds per
step, resets included (a game that ends is reset and played on). Run:
`python bench/gem_family.py [--quick]` (needs `pip install 'gemkit[gem]'`). The load average
is printed with the table: figures from a loaded machine are noisy, the ratio less so.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os

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


def main() -> None:
    """Print steps per second of each game both ways, and the ratio."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="shorter runs")
    args = ap.parse_args()
    t = 0.5 if args.quick else 2.0
    acts = {gem_id: moves(gem_id, 5_000) for gem_id in GAMES}
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    # GEM first, as it runs on its own: once a gem: env exists, GEM's modules draw through
    # gemkit's stand-ins (gemkit.global_rng), which GEM's own envs then pay for too
    theirs: dict[str, float] = {}
    for gem_id in GAMES:
        with contextlib.redirect_stdout(io.StringIO()):
            env = gem.make(gem_id)
        theirs[gem_id] = rate(single_env_loop(env, acts[gem_id]), t)
    print(f"{'game':<30} {'gem: (gemkit)':>14} {'GEM':>14} {'cost':>8}")
    for gem_id in GAMES:
        ours = rate(single_env_loop(gemkit.make(f"gem:{gem_id}"), acts[gem_id]), t)
        print(
            f"{gem_id:<30} {ours:>14,.0f} {theirs[gem_id]:>14,.0f} {theirs[gem_id] / ours:7.2f}x",
            flush=True,
        )
    print("cost: the time of a gem: step over the time of GEM's own step, resets included")
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
