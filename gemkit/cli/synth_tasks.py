"""`gemkit synth tasks`: synthesize <database, tools, task, verifier> tuples, resumably."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from gemkit.cli.arguments import (
    add_run_folder,
    add_timeout_option,
    count,
    positive,
    refuse_unless_resume,
)
from gemkit.cli.console import console, heartbeat

#: the reply bound of each program (gemkit.synth.tasks.run.RunConfig.max_tokens); the real
#: Qwen2.5-Coder-0.5B's programs took 300-850 tokens
MAX_TOKENS = 1536


def add_tasks_parser(synth_subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add the `tasks` subcommand to `gemkit synth`."""
    p = synth_subparsers.add_parser(
        "tasks",
        help="synthesize tool-use tasks (database, tools, task, verifier) by category",
        description=(
            "Build a database per task, propose a task with a solution that may only call "
            "tools and a verifier, harden it level by level while the solution still "
            "verifies, and keep tasks a solver passes at least once in k tries. "
            "Resumable: after an interruption, run the same command with --resume."
        ),
    )
    p.add_argument(
        "--category", default="trip_planning", help="task category (default trip_planning)"
    )
    p.add_argument("-n", type=positive, default=10, help="tasks to keep (default 10)")
    p.add_argument("--min-level", type=positive, default=1, help="lowest target level (default 1)")
    p.add_argument("--max-level", type=positive, default=4, help="highest target level (default 4)")
    add_run_folder(p, what="run folder (tasks.jsonl, rejected.jsonl, db/, dataset/)")
    p.add_argument("--k", type=count, default=4, help="tries of the pass@k filter (0: no filter)")
    p.add_argument(
        "--random-k",
        type=count,
        default=16,
        help="tries of the random but tool-using baseline per task, recorded (default 16; 0: "
        "not run)",
    )
    p.add_argument("--llm", default=None, metavar="URL", help="OpenAI-compatible endpoint")
    p.add_argument("--model", default=None, help="model name for --llm")
    p.add_argument(
        "--max-tokens",
        type=positive,
        default=MAX_TOKENS,
        help=f"longest program reply asked of the model (default {MAX_TOKENS}); a reply cut "
        "there is answered with a request for a shorter program",
    )
    add_timeout_option(p)
    p.add_argument("--workers", type=positive, default=1, help="worker processes (default 1)")
    p.add_argument(
        "--executor",
        choices=["process", "ray"],
        default="process",
        help="run workers as local processes or as Ray tasks on a cluster",
    )
    p.add_argument("--ray-address", default=None, help="Ray cluster address (or RAY_ADDRESS)")
    p.add_argument("--seed", type=int, default=0, help="run seed (default 0)")
    p.add_argument("--no-export", action="store_true", help="skip the `datasets` export")
    p.set_defaults(func=run_tasks)
    return p


def run_tasks(args: argparse.Namespace) -> int:
    """Run the synthesis with a progress bar; print the per-level table."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    from gemkit.synth.tasks.run import RunConfig, run_synthesis

    if getattr(args, "writes_run", False):  # the command line, not the demo
        refuse_unless_resume(args, "synth tasks")
    config = RunConfig(
        category=args.category,
        n=args.n,
        out=args.out,
        min_level=args.min_level,
        max_level=args.max_level,
        k=args.k,
        seed=args.seed,
        workers=args.workers,
        executor=args.executor,
        ray_address=args.ray_address,
        export=not args.no_export,
        llm=args.llm,
        model=args.model,
        max_tokens=args.max_tokens,
        timeout=args.timeout,
        random_k=args.random_k,
    )
    rejected = 0
    counts = {"kept": 0}

    def describe() -> str:
        return (
            f"synth tasks: {counts['kept']}/{config.n} kept, {rejected} rejected "
            f"(each model reply is in {config.out / 'progress.log'})"
        )

    with (
        heartbeat(describe),
        Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[note]}"),
            TimeElapsedColumn(),
            console=console,
            transient=False,
        ) as bar,
    ):
        job = bar.add_task(f"{config.category} tasks", total=config.n, note="")

        def progress(outcome: object, kept: int, n: int) -> None:
            nonlocal rejected
            counts["kept"] = kept
            if outcome is not None and getattr(outcome, "record", None) is None:
                rejected += 1
            bar.update(job, completed=min(kept, n), note=f"rejected {rejected}")
            if outcome is not None and not console.is_terminal:
                # no live bar without a terminal (a log file, CI): one plain line per task
                why = getattr(outcome, "reason", "") or "kept"
                console.print(f"{getattr(outcome, 'id', '?')}: {why} ({kept}/{n} kept)")

        logging.getLogger("datasets").setLevel(logging.ERROR)
        summary = run_synthesis(config, progress)

    table = Table(title=f"{config.category}: {len(summary.records)} tasks in {config.out}")
    columns = ("level", "kept", "mean valid answers", "valid fraction", f"baseline pass@{config.k}")
    for col in (*columns, "random baseline passes"):
        table.add_column(col, justify="right")
    rows = summary.by_level()
    for row in rows:
        table.add_row(
            str(row["level"]),
            str(row["kept"]),
            f"{row['mean_valid']:.3g}",
            f"{row['mean_fraction']:.2e}",
            "-" if row["pass_rate"] is None else f"{row['pass_rate']:.2f}",
            "-"
            if row["random_rate"] is None
            else f"{row['random_rate']:.1%} of {row['random_tries']}",
        )
    console.print(table)
    curve = [
        f"level {r['level']}: {r['random_rate']:.1%}" for r in rows if r["random_rate"] is not None
    ]
    if curve:
        console.print(
            "random but tool-using baseline (lists the items, picks at random), passes by "
            "level: " + ", ".join(curve)
        )
    console.print(
        f"new {summary.new}, resumed {summary.resumed}, rejected {summary.rejected}; "
        f"records: {config.out / 'tasks.jsonl'}; progress log: {config.out / 'progress.log'}"
    )
    if len(summary.records) < config.n:
        console.print(
            f"[yellow]kept {len(summary.records)} of {config.n}: the attempts ran out; "
            "lower --max-level or --k, or run again with another --seed[/yellow]"
        )
    return 0


def demo_tasks(out: Path, n: int = 4) -> int:
    """The demo's part: a small trip-planning synthesis (its tuples play as toolworld envs)."""
    import argparse as _argparse

    console.rule("[bold]task synthesis: trip planning tuples")
    args = _argparse.Namespace(
        category="trip_planning", n=n, min_level=1, max_level=4, out=out, k=2, llm=None,
        model=None, workers=1, seed=0, no_export=True, executor="process", ray_address=None,
        max_tokens=MAX_TOKENS, timeout=None, random_k=16,
    )  # fmt: skip
    return run_tasks(args)
