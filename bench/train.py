"""Training throughput of the tiny model through `examples/rebn.py` on CPU.

For each env, runs a few ReBN iterations with `--tiny` on one thread and reports rollout turns
per second (one turn = the model samples an action for one env and the env steps), and where
the rollout time goes: the model (prompt encoding, sampling, decoding) vs gemkit (vector env
step: env logic and bookkeeping); plus the update time per iteration. The first iteration is
a warm-up and is left out. Run: `python bench/train.py [--quick]`.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "rebn.py"


def load_rebn():
    """Import `examples/rebn.py` as a module."""
    spec = importlib.util.spec_from_file_location("gemkit_example_rebn", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def bench(env_id: str, iterations: int, num_envs: int) -> dict:
    """Train for `iterations` and sum the timings of all but the first."""
    rebn = load_rebn()
    with tempfile.TemporaryDirectory() as out:
        history = rebn.main(
            ["--tiny", "--env", env_id, "--iterations", str(iterations), "--num-envs",
             str(num_envs), "--threads", "1", "--no-progress", "--out", out]
        )  # fmt: skip
    rows = history[1:]
    turns = sum(r["transitions"] for r in rows)
    rollout = sum(r["rollout_s"] for r in rows)
    model = sum(r["model_s"] for r in rows)
    env = sum(r["env_s"] for r in rows)
    update = sum(r["update_s"] for r in rows)
    return {
        "env": env_id,
        "turns_per_s": turns / rollout,
        "model_share": model / rollout,
        "gemkit_share": env / rollout,
        "gemkit_us_per_turn": 1e6 * env / turns,
        "update_s_per_iter": update / len(rows),
        "turns_per_iter": turns / len(rows),
    }


def main() -> None:
    """Print one line per env (and the JSON rows with --json)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer iterations")
    parser.add_argument("--json", action="store_true", help="also print JSON rows")
    args = parser.parse_args()
    iterations = 3 if args.quick else 6
    results = [
        bench("toy:Copy-v0", iterations, 32),
        bench("game:GuessTheNumber-v0-easy", iterations, 32),
    ]
    print(f"{'env':30s} {'turns/s':>8s} {'model':>7s} {'gemkit':>7s} {'gemkit us/turn':>15s} "
          f"{'update s/iter':>14s}")  # fmt: skip
    for r in results:
        print(
            f"{r['env']:30s} {r['turns_per_s']:8.0f} {r['model_share']:7.1%} "
            f"{r['gemkit_share']:7.1%} {r['gemkit_us_per_turn']:15.0f} "
            f"{r['update_s_per_iter']:14.2f}"
        )
    if args.json:
        print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
