"""Task synthesis: verified tuples per minute, and the hardness curve by level.

1. Throughput: `gemkit synth tasks` offline (reference solution, verifier, exact counts, pass@k
   with the baseline agent) for `--n` trip-planning tasks at levels 3-5 with `--workers`
   processes; reports kept (verified, pass@k-filtered) tuples per minute.
2. Hardness curve: tasks hardened to `--curve-level`; at each level of their history, the
   number of valid plans, the fraction of well-formed plans that are valid, and the baseline
   agent's pass rate over `--k` tries.

Run: `python bench/synth_tasks.py [--n 60] [--workers 2] [--json out.json]`.
"""

from __future__ import annotations

import argparse
import copy
import json
import resource
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from gemkit.synth.tasks import get_category
from gemkit.synth.tasks.base import synthesize
from gemkit.synth.tasks.run import RunConfig, make_record, pass_at_k, run_synthesis


def _cpu() -> float:
    # this process and its finished workers: the cost without other jobs' load
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def throughput(category: str, n: int, workers: int, k: int, out: Path) -> dict[str, Any]:
    """Kept tuples per minute for a run of `n` tasks at levels 3-5."""
    config = RunConfig(
        category=category, n=n, out=out, min_level=3, max_level=5, k=k, workers=workers,
        seed=1, export=False,
    )  # fmt: skip
    start, cpu0 = time.perf_counter(), _cpu()
    summary = run_synthesis(config)
    seconds = time.perf_counter() - start
    cpu = _cpu() - cpu0
    kept = len(summary.records)
    return {
        "category": category,
        "kept": kept,
        "rejected": summary.rejected,
        "seconds": seconds,
        "per_minute": kept / seconds * 60,
        "cpu_seconds": cpu,
        "per_cpu_minute": kept / cpu * 60 if cpu else None,
        "workers": workers,
        "k": k,
        "min_level": min(r["level"] for r in summary.records) if kept else None,
    }


def hardness_curve(category: str, tasks: int, level: int, k: int, root: Path) -> list[dict[str, Any]]:
    """Per level: tasks, median valid answers, mean valid fraction, baseline pass rate."""
    cat = get_category(category)
    rows: dict[int, dict[str, list[float]]] = {}
    for i in range(tasks):
        path = root / f"{category}-{i}.sqlite"
        syn = synthesize(cat, path, np.random.default_rng([99, i]), level)
        if syn is None:
            continue
        for entry in syn.history:
            task = cat.make_task(entry["spec"], entry["level"], [])
            at_level = copy.copy(syn)
            at_level.task = task
            at_level.history = syn.history[: entry["level"]]
            at_level.n_valid = entry["n_valid_solutions"]
            record = make_record(cat, at_level, f"{i}-{entry['level']}", path.name, [99, i])
            passes = pass_at_k(record, root, k, seed=i * 31 + entry["level"])
            row = rows.setdefault(entry["level"], {"valid": [], "fraction": [], "pass": []})
            row["valid"].append(entry["n_valid_solutions"])
            row["fraction"].append(entry["valid_fraction"])
            row["pass"].append(passes / k)
    return [
        {
            "level": lv,
            "tasks": len(r["valid"]),
            "median_valid": float(np.median(r["valid"])),
            "mean_fraction": float(np.mean(r["fraction"])),
            "pass_rate": float(np.mean(r["pass"])),
        }
        for lv, r in sorted(rows.items())
    ]


def main() -> None:
    """Run both parts and print (and optionally save) the tables."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=60, help="tasks to keep in the throughput run")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--k", type=int, default=4, help="pass@k tries")
    ap.add_argument("--curve-tasks", type=int, default=12)
    ap.add_argument("--curve-level", type=int, default=8)
    ap.add_argument("--categories", default="trip_planning,meeting_scheduling,shopping_basket")
    ap.add_argument("--json", type=Path, default=None, help="save the figures here")
    args = ap.parse_args()
    console = Console()
    results: dict[str, Any] = {"throughput": [], "curves": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for category in args.categories.split(","):
            t = throughput(category, args.n, args.workers, args.k, Path(tmp) / f"run-{category}")
            results["throughput"].append(t)
        table = Table(title="verified tuples per minute (levels 3-5, offline)")
        cols = ("category", "kept", "rejected", "wall s", "tuples/min", "CPU s",
                "tuples/CPU-min", "workers", "pass@k")  # fmt: skip
        for col in cols:
            table.add_column(col, justify="right")
        for t in results["throughput"]:
            table.add_row(
                t["category"], str(t["kept"]), str(t["rejected"]), f"{t['seconds']:.1f}",
                f"{t['per_minute']:.0f}", f"{t['cpu_seconds']:.1f}",
                f"{t['per_cpu_minute']:.0f}", str(t["workers"]), str(t["k"]),
            )  # fmt: skip
        console.print(table)
        for category in args.categories.split(","):
            curve_root = Path(tmp) / f"curve-{category}"
            curve_root.mkdir()
            curve = hardness_curve(category, args.curve_tasks, args.curve_level, 8, curve_root)
            results["curves"][category] = curve
            table = Table(title=f"{category}: hardness by level ({args.curve_tasks} tasks)")
            for col in ("level", "tasks", "median valid", "mean valid fraction", "baseline pass@1"):
                table.add_column(col, justify="right")
            for row in curve:
                table.add_row(
                    str(row["level"]), str(row["tasks"]), f"{row['median_valid']:.3g}",
                    f"{row['mean_fraction']:.2e}", f"{row['pass_rate']:.2f}",
                )  # fmt: skip
            console.print(table)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
