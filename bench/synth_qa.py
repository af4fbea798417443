"""QA synthesis throughput and shape: verified records per minute, stage acceptance rates,
mean injections/fuzzes, and the data figures (shortcut rate, clauses that do no work,
question frames and readability, repeated answers, tool calls to solve, closed-book accuracy).

Run: `python bench/synth_qa.py [-n 300] [--workers 2] [--world-size 10000] [--json out.json]`.
Setup (world build, corpus, index) is timed apart from synthesis; the rate counts kept
(fully verified) records only. CPU time is measured too, since on a shared machine the
wall-clock rate says more about the neighbours than about the code; the load average before
and after the run is printed next to the rates.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import tempfile
import time
from pathlib import Path

from gemkit.synth.qa.report import data_report
from gemkit.synth.qa.run import RunConfig, prepare, read_records, run


def cpu_seconds() -> float:
    """CPU time of this process and its finished children (workers): load-independent cost."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def main() -> None:
    """Run one synthesis job in a temporary folder and print its figures."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=300, help="records to keep")
    ap.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--world-size", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--min-inject", type=int, default=4)
    ap.add_argument("--min-fuzz", type=int, default=2)
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="bench-synth-qa-"))
    config = RunConfig(
        n=args.n,
        world_size=args.world_size,
        seed=args.seed,
        min_inject=args.min_inject,
        min_fuzz=args.min_fuzz,
    )
    try:
        t0 = time.perf_counter()
        world, _ = prepare(tmp, config)
        from gemkit.search.index import SearchIndex

        SearchIndex.open(tmp / "corpus.jsonl", cache_dir=tmp / ".index")
        setup_s = time.perf_counter() - t0
        load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
        t1, c1 = time.perf_counter(), cpu_seconds()
        stats = run(tmp, config, workers=args.workers, export=False)
        total_s, cpu_s = time.perf_counter() - t1, cpu_seconds() - c1
        records = read_records(tmp)
        outcomes = records + [
            json.loads(x) for x in (tmp / "rejected.jsonl").read_text().splitlines()
        ]
        data = data_report(records, outcomes, world)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    s = stats.summary()
    items = max(1, s["items"])
    reached = {"edits": items - s["rejected"].get("seed", 0)}
    after_edits = reached["edits"] - s["rejected"].get("edits", 0)
    after_quality = after_edits - s["rejected"].get("quality", 0)
    after_difficulty = after_quality - s["rejected"].get("difficulty", 0)
    after_uniqueness = after_difficulty - s["rejected"].get("uniqueness", 0)
    figures = {
        "world_size": args.world_size,
        "workers": args.workers,
        "setup_s (world + corpus + index)": round(setup_s, 2),
        "synthesis_s": round(total_s, 2),
        "kept": s["kept"],
        "work_items": s["items"],
        "kept_per_minute": round(60 * s["kept"] / total_s, 1),
        "cpu_s": round(cpu_s, 2),
        "kept_per_cpu_minute": round(60 * s["kept"] / cpu_s, 1),
        # what `workers` idle cores would do; the wall-clock rate above depends on other load
        "kept_per_minute_on_idle_cores": round(args.workers * 60 * s["kept"] / cpu_s, 1),
        "items_per_minute": round(60 * s["items"] / total_s, 1),
        "acceptance": {
            "edits reached minimums": round(after_edits / max(1, reached["edits"]), 3),
            "quality": round(after_quality / max(1, after_edits), 3),
            "difficulty": round(after_difficulty / max(1, after_quality), 3),
            "uniqueness": round(after_uniqueness / max(1, after_difficulty), 3),
            "shortcut": round(
                (after_uniqueness - s["rejected"].get("shortcut", 0)) / max(1, after_uniqueness), 3
            ),
            "not a duplicate": round(
                s["kept"] / max(1, s["kept"] + s["rejected"].get("duplicate", 0)), 3
            ),
            "overall": round(s["kept"] / items, 3),
        },
        "edit_rejections": s["edit_rejections"],
        "mean_inject": s["mean_inject"],
        "mean_fuzz": s["mean_fuzz"],
        "mean_tool_calls": s["mean_tool_calls"],
        "closed_book_accuracy": s["closed_book_accuracy"],
        "load_average_before_after": [
            load_before,
            os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        ],
        # what a data scientist checks before training on it (`gemkit.synth.qa.report`)
        "data": data,
    }
    width = max(len(k) for k in figures)
    for k, v in figures.items():
        print(f"{k:<{width}}  {v}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
