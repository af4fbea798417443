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
    p.add_argument("--min-inject", type=_count, default=4, help="injections a record needs (default 4)")
    p.add_argument("--min-fuzz", type=_count, default=2, help="fuzzes a record needs (default 2)")
    p.add_argument("--llm", metavar="URL", help="OpenAI-compatible base URL, e.g. http://localhost:8000/v1")
    p.add_argument("--model", help="model name for --llm")
    add_timeout_option(p)
    p.add_argument("--corpus", help="an outside corpus JSONL ({id, title, text, url}); needs --seeds and --llm")
    p.add_argument("--seeds", help="a JSONL of {question, answer} seed questions; needs --llm")
    p.add_argument("--workers", type=_positive, default=1, help="worker processes (default 1)")
    p.add_argument(
        "--executor", choices=["process", "ray"], default="process",
        help="run workers as local processes or as Ray tasks on a cluster",
    )
    p.add_argument("--ray-address", default=None, help="Ray cluster address (or RAY_ADDRESS)")
    p.set_defaults(func=run_qa)


def _table(stats: Any, title: str) -> Any:
    from rich.table import Table

    s = stats.summary()
    table = Table(title=title)
    table.add_column("figure")
    table.add_column("value", justify="right")
    table.add_row("work items", str(s["items"]))
    table.add_row("kept", str(s["kept"]))
    for stage in ("seed", "edits", "quality", "difficulty", "uniqueness", "error"):
        if s["rejected"].get(stage):
            table.add_row(f"rejected at {stage}", str(s["rejected"][stage]))
    for stage, count in sorted(s["edit_rejections"].items()):
        table.add_row(f"edits rejected at {stage}", str(count))
    table.add_row("mean injections (published 4.27)", f"{s['mean_inject']:.2f}")
    table.add_row("mean fuzzes (published 2.10)", f"{s['mean_fuzz']:.2f}")
    table.add_row("mean tool calls needed", f"{s['mean_tool_calls']:.1f}")
    table.add_row("closed-book accuracy", f"{s['closed_book_accuracy']:.1%}")
    rate = stats.kept_per_minute()
    if rate is not None:  # this run's own records over its own time, not the resumed ones
        table.add_row("kept per minute", f"{rate:.0f}")
    if stats.resumed:
        table.add_row("found on disk (resumed)", str(stats.resumed))
    if stats.failed:
        table.add_row("failed on the model server (retried on resume)", str(stats.failed))
    return table


def run_qa(args: argparse.Namespace) -> int:
    """Run (or resume) a QA synthesis run with a progress bar, then print its figures."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from gemkit.synth.qa.run import RunConfig, run

    if args.llm and not args.model:
        raise GemkitError("--llm needs --model NAME (the model the endpoint serves)")
    if args.model and not args.llm:
        raise GemkitError("--model needs --llm URL (an OpenAI-compatible endpoint)")
    refuse_unless_resume(args, "synth qa")
    config = RunConfig(n=args.n, world_size=args.world_size, seed=args.seed,
                       min_inject=args.min_inject, min_fuzz=args.min_fuzz, llm_url=args.llm,
                       model=args.model, corpus=args.corpus, seeds=args.seeds,
                       timeout=args.timeout)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[rejected]} rejected"), TimeElapsedColumn())
    seen: dict[str, Any] = {}

    def describe() -> str:
        stats = seen.get("stats")
        if stats is None:
            return "synth qa: preparing the world and its search index"
        return (f"synth qa: {stats.kept}/{args.n} kept, {sum(stats.rejected.values())} rejected "
                f"after {stats.items} work items (a work item asks the model many times)")

    with Progress(*columns, console=console, transient=True) as progress, heartbeat(describe):
        task = progress.add_task("synth qa", total=args.n, rejected=0)

        def on_item(outcome: dict[str, Any], stats: Any) -> None:
            seen["stats"] = stats
            progress.update(task, completed=min(stats.kept, args.n),
                            rejected=sum(stats.rejected.values()))

        stats = run(args.out, config, workers=args.workers, on_item=on_item,
                    on_start=lambda stats: on_item({}, stats),
                    executor=args.executor, ray_address=args.ray_address)
    console.print(_table(stats, f"synth qa → {args.out}"))
    records = args.out / "qa.jsonl"
    if records.exists():
        console.print(f"records: {records}   dataset: {args.out / 'dataset'}")
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
SUBCOMMANDS: dict[str, Callable[[argparse._SubParsersAction], None]] = {
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
