"""`gemkit synth <kind>`: data synthesis from the command line.

Each kind is one `add_<kind>(sub)` function registering its sub-subcommand; `SUBCOMMANDS`
lists them, so a new kind is one function and one entry.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gemkit.cli.arguments import add_run_folder, add_timeout_option, refuse_unless_resume
from gemkit.cli.arguments import count as _count
from gemkit.cli.arguments import positive as _positive
from gemkit.cli.console import console, heartbeat
from gemkit.cli.synth_tasks import add_tasks_parser
from gemkit.errors import GemkitError

# -- qa -----------------------------------------------------------------------------------------


def _fraction(text: str) -> float:
    """A share between 0 and 1 (argparse type)."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"expected a number from 0 to 1, got {text!r}")
    return value


def add_qa(sub: argparse._SubParsersAction) -> None:
    """Register `gemkit synth qa`."""
    p = sub.add_parser(
        "qa",
        help="grow verified multi-hop QA pairs by inject/fuzz edits",
        description="Synthesize hard, verified question-answer pairs over a procedural world "
        "(offline by default, or with an OpenAI-compatible model via --llm). Resumable: after "
        "an interruption, run the same command with --resume.",
    )
    p.add_argument("-n", type=_positive, default=100, help="records to keep (default 100)")
    add_run_folder(p, what="run folder (qa.jsonl, rejected.jsonl, corpus.jsonl, dataset/)")
    p.add_argument("--world-size", type=_positive, default=10_000, help="entities in the world")
    p.add_argument("--seed", type=int, default=0, help="run seed: world, seeds, edits (default 0)")
    p.add_argument(
        "--min-inject", type=_count, default=4, help="injections a record needs (default 4)"
    )
    p.add_argument("--min-fuzz", type=_count, default=2, help="fuzzes a record needs (default 2)")
    p.add_argument(
        "--llm", metavar="URL", help="OpenAI-compatible base URL, e.g. http://localhost:8000/v1"
    )
    p.add_argument("--model", help="model name for --llm")
    add_timeout_option(p)
    p.add_argument(
        "--corpus", help="an outside corpus JSONL ({id, title, text, url}); needs --seeds and --llm"
    )
    p.add_argument("--seeds", help="a JSONL of {question, answer} seed questions; needs --llm")
    p.add_argument("--workers", type=_positive, default=1, help="worker processes (default 1)")
    p.add_argument(
        "--test-fraction",
        type=_fraction,
        default=0.1,
        help="share of answers the dataset export puts in its test split (default 0.1; no "
        "answer is on both sides)",
    )
    p.add_argument(
        "--executor",
        choices=["process", "ray"],
        default="process",
        help="run workers as local processes or as Ray tasks on a cluster",
    )
    p.add_argument("--ray-address", default=None, help="Ray cluster address (or RAY_ADDRESS)")
    p.set_defaults(func=run_qa)


def _table(stats: Any, title: str) -> Any:
    """The run's figures: every work item by the stage that settled it, what the kept records
    are like, and (apart: an item tries many) the edits."""
    from rich.console import Group
    from rich.table import Table

    from gemkit.synth.qa.run import STAGES

    s = stats.summary()
    items = Table(title=title)
    items.add_column("work items", overflow="fold")
    items.add_column("count", justify="right")
    items.add_row("work items", str(s["items"]))
    items.add_row("kept", str(s["kept"]))
    for stage in STAGES:  # every stage, so kept + rejected adds up to the work items
        n = s["rejected"].get(stage, 0)
        if n or stage not in ("duplicate", "error"):
            items.add_row(f"rejected at {stage}", str(n))
    for stage, n in s["rejected"].items():
        if stage not in STAGES:
            items.add_row(f"rejected at {stage}", str(n))
    if stats.failed:
        items.add_row(
            "failed on the model server (not settled: retried on resume)", str(stats.failed)
        )
    if stats.resumed:
        items.add_row("kept records found on disk (resumed)", str(stats.resumed))

    kept = Table(title="kept records")
    kept.add_column("figure", overflow="fold")
    kept.add_column("value", justify="right")
    checked = s["clauses_checked"]
    if checked:
        kept.add_row("checked clause by clause", f"{checked} of {s['kept']}")
        kept.add_row("with a clause the answer does not need", str(s["idle_clauses"]))
        kept.add_row("with a blurred value that excludes no entity", str(s["vacuous_blurs"]))
    kept.add_row(
        "hard to read (clause in a clause, verb twice, deep clauses)", str(s["hard_to_read"])
    )
    kept.add_row("mean injections per record", f"{s['mean_inject']:.2f}")
    kept.add_row("mean fuzzes per record", f"{s['mean_fuzz']:.2f}")
    kept.add_row("mean tool calls to solve", f"{s['mean_tool_calls']:.1f}")
    kept.add_row("closed-book accuracy (every verified item)", f"{s['closed_book_accuracy']:.1%}")
    rate = stats.kept_per_minute()
    if rate is not None:  # this run's own records over its own time, and enough of them
        kept.add_row("kept per minute (this run)", f"{rate:.0f}")

    edits = Table(title="edits (a work item tries many)")
    edits.add_column("edits", overflow="fold")
    edits.add_column("count", justify="right")
    edits.add_row("accepted injections (kept records)", str(s["accepted_edits"]["inject"]))
    edits.add_row("accepted fuzzes (kept records)", str(s["accepted_edits"]["fuzz"]))
    for stage, count in sorted(s["edit_rejections"].items()):
        edits.add_row(f"refused at {stage}", str(count))
    if s["idle_edits"]:
        edits.add_row("  of which: the clause added did no work", str(s["idle_edits"]))
    return Group(items, kept, edits)


def run_qa(args: argparse.Namespace) -> int:
    """Run (or resume) a QA synthesis run with a progress bar, then print its figures."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from gemkit.synth.qa.run import RunConfig, run

    if args.llm and not args.model:
        raise GemkitError("--llm needs --model NAME (the model the endpoint serves)")
    if args.model and not args.llm:
        raise GemkitError("--model needs --llm URL (an OpenAI-compatible endpoint)")
    refuse_unless_resume(args, "synth qa")
    config = RunConfig(
        n=args.n,
        world_size=args.world_size,
        seed=args.seed,
        min_inject=args.min_inject,
        min_fuzz=args.min_fuzz,
        llm_url=args.llm,
        model=args.model,
        corpus=args.corpus,
        seeds=args.seeds,
        timeout=args.timeout,
    )
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rejected]} rejected"),
        TimeElapsedColumn(),
    )
    seen: dict[str, Any] = {}

    def describe() -> str:
        stats = seen.get("stats")
        if stats is None:
            return "synth qa: preparing the world and its search index"
        return (
            f"synth qa: {stats.kept}/{args.n} kept, {sum(stats.rejected.values())} rejected "
            f"after {stats.items} work items (a work item asks the model many times)"
        )

    with Progress(*columns, console=console, transient=True) as progress, heartbeat(describe):
        task = progress.add_task("synth qa", total=args.n, rejected=0)

        def on_item(outcome: dict[str, Any], stats: Any) -> None:
            seen["stats"] = stats
            progress.update(
                task, completed=min(stats.kept, args.n), rejected=sum(stats.rejected.values())
            )

        stats = run(
            args.out,
            config,
            workers=args.workers,
            on_item=on_item,
            on_start=lambda stats: on_item({}, stats),
            executor=args.executor,
            ray_address=args.ray_address,
            test_fraction=args.test_fraction,
        )
    console.print(_table(stats, f"synth qa → {args.out}"))
    records = args.out / "qa.jsonl"
    if records.exists():
        console.print(
            f"records: {records}   dataset: {args.out / 'dataset'} (train and test splits, "
            "no answer in both)"
        )
    else:  # record files are made with their first record
        console.print(f"no record kept: each item's reason is in {args.out / 'rejected.jsonl'}")
    return 0


def demo_qa(out: Path, n: int = 5, world_size: int = 1_000) -> int:
    """The offline QA synthesis step of `gemkit demo`: a few verified records and their table."""
    from gemkit.synth.qa.run import RunConfig, run

    console.rule("[bold]gemkit demo: QA synthesis (procedural world, rule-based agent)")
    stats = run(out, RunConfig(n=n, world_size=world_size, seed=0))
    console.print(_table(stats, "synth qa"))
    console.print(f"records saved under {out}/qa.jsonl")
    return stats.kept


#: sub-subcommand name -> function registering it
SUBCOMMANDS: dict[str, Callable[[argparse._SubParsersAction], object]] = {
    "qa": add_qa,
    "tasks": add_tasks_parser,
}


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register `gemkit synth` and its kinds."""
    p = sub.add_parser("synth", help="synthesize verified training data (qa, tasks)")
    kinds = p.add_subparsers(dest="synth_kind", metavar="KIND")
    for add in SUBCOMMANDS.values():
        add(kinds)
    p.set_defaults(func=lambda args: _no_kind(p))


def _no_kind(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2
