"""Task synthesis: verified tuples per minute, and the hardness curve by level.

1. Throughput: `gemkit synth tasks` offline (reference solution, verifier, exact counts, pass@k
   with the baseline agent, the random baseline's tries) for `--n` tasks per category at
   levels `--min-level` to `--max-level` (the CLI's 1-4 by default) with `--workers`
   processes; reports kept (verified, pass@k-filtered) tuples per minute, with the load
   average before and after each run, and the random but tool-using baseline's pass rate by
   level as the run recorded it.
2. Hardness curve: tasks hardened to `--curve-level`; at each level of their history, the
   number of valid plans, the fraction of well-formed plans that are valid, and the baseline
   agent's pass rate over `--k` tries.

Run: `python bench/synth_tasks.py [--n 60] [--workers 2] [--json out.json]`.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
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
    own, kids = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _load() -> float | None:
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else None


def throughput(
    category: str, n: int, workers: int, k: int, out: Path, levels: tuple[int, int] = (1, 4)
) -> dict[str, Any]:
    """Kept tuples per minute for a run of `n` tasks at `levels`."""
    config = RunConfig(
        category=category, n=n, out=out, min_level=levels[0], max_level=levels[1], k=k,
        workers=workers, seed=1, export=False,
    )  # fmt: skip
    load = _load()
    start, cpu0 = time.perf_counter(), _cpu()
    summary = run_synthesis(config)
    seconds = time.perf_counter() - start
    cpu = _cpu() - cpu0
    kept = len(summary.records)
    return {
        "load_average_before_after": [load, _load()],
        "levels": list(levels),
        "by_level": summary.by_level(),
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


def hardness_curve(
    category: str, tasks: int, level: int, k: int, root: Path
) -> list[dict[str, Any]]:
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
    ap.add_argument("--min-level", type=int, default=1)
    ap.add_argument("--max-level", type=int, default=4)
    ap.add_argument("--curve-tasks", type=int, default=12)
    ap.add_argument("--curve-level", type=int, default=8)
    ap.add_argument("--categories", default="trip_planning,meeting_scheduling,shopping_basket")
    ap.add_argument("--json", type=Path, default=None, help="save the figures here")
    args = ap.parse_args()
    console = Console()
    results: dict[str, Any] = {"throughput": [], "curves": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for category in args.categories.split(","):
            levels = (args.min_level, args.max_level)
            t = throughput(
                category, args.n, args.workers, args.k, Path(tmp) / f"run-{category}", levels
            )
            results["throughput"].append(t)
        title = f"verified tuples per minute (levels {args.min_level}-{args.max_level}, offline)"
        table = Table(title=title)
        cols = ("category", "kept", "rejected", "wall s", "tuples/min", "CPU s",
                "tuples/CPU-min", "workers", "pass@k", "load avg before/after")  # fmt: skip
        for col in cols:
            table.add_column(col, justify="right")
        for t in results["throughput"]:
            table.add_row(
                t["category"], str(t["kept"]), str(t["rejected"]), f"{t['seconds']:.1f}",
                f"{t['per_minute']:.0f}", f"{t['cpu_seconds']:.1f}",
                f"{t['per_cpu_minute']:.0f}", str(t["workers"]), str(t["k"]),
                " / ".join("-" if x is None else f"{x:.1f}" for x in t["load_average_before_after"]),
            )  # fmt: skip
        console.print(table)
        for t in results["throughput"]:
            table = Table(title=f"{t['category']}: the run's own records by level")
            for col in ("level", "kept", "mean valid fraction", "baseline pass@k",
                        "random baseline pass rate (tries)"):  # fmt: skip
                table.add_column(col, justify="right")
            for row in t["by_level"]:
                table.add_row(
                    str(row["level"]), str(row["kept"]), f"{row['mean_fraction']:.2e}",
                    "-" if row["pass_rate"] is None else f"{row['pass_rate']:.2f}",
                    "-" if row["random_rate"] is None
                    else f"{row['random_rate']:.2%} ({row['random_tries']})",
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
