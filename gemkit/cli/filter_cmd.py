"""`gemkit filter`: keep the items of a QA or task dataset that a model finds hard, not hopeless."""

from __future__ import annotations

import argparse

from gemkit.cli.arguments import (
    add_run_folder,
    add_timeout_option,
    count,
    positive,
    refuse_unless_resume,
)
from gemkit.cli.console import console
from gemkit.episode_shape import TOOL_FORMATS


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register `gemkit filter`."""
    p = sub.add_parser(
        "filter",
        help="keep dataset items a model solves sometimes, with tools, in several turns",
        description=(
            "Play every item of a `gemkit synth qa` or `gemkit synth tasks` folder k times "
            "without tools and k times with them through an OpenAI-compatible model, and keep "
            "the items whose tool-using accuracy is above 0 and below --max-accuracy, that the "
            "model does not solve without tools, and that need at least --min-tool-turns tool "
            "turns. It needs a model that solves some items: with none solved it says so and "
            "exits 1. Episodes are played as gemkit eval plays them. Resumable: after an "
            "interruption, run the same command with --resume."
        ),
    )
    p.add_argument("source", help="a synth qa or synth tasks folder (or its qa/tasks.jsonl)")
    add_run_folder(p, what="the filter's run folder (kept records, verdicts, attempts)")
    p.add_argument("--llm", required=True, metavar="URL", help="OpenAI-compatible base URL")
    p.add_argument("--model", required=True, help="the model name the endpoint serves")
    p.add_argument("--k", type=positive, default=16, help="attempts per item and mode (default 16)")
    p.add_argument(
        "--max-accuracy",
        type=float,
        default=0.5,
        help="drop items solved with tools this often or more (default 0.5)",
    )
    p.add_argument(
        "--max-closed-book",
        type=float,
        default=0.0,
        help="drop items solved without tools more often than this (default 0)",
    )
    p.add_argument(
        "--min-tool-turns",
        type=count,
        default=2,
        help="tool turns every solving attempt must take (default 2)",
    )
    p.add_argument(
        "--tool-format",
        choices=TOOL_FORMATS,
        default="text",
        help="how the tools reach the model, as in gemkit eval: text (in the prompt, any "
        "server) or native (the request's tools= list)",
    )
    p.add_argument(
        "--max-steps", type=positive, default=32, help="turns an attempt may take (default 32)"
    )
    p.add_argument(
        "--temperature", type=float, default=1.0, help="sampling temperature (default 1.0)"
    )
    p.add_argument(
        "--max-tokens",
        type=positive,
        default=1024,
        help="token budget of each reply (default 1024)",
    )
    p.add_argument("--concurrency", type=positive, default=8, help="attempts played at once")
    add_timeout_option(p)
    p.add_argument("--limit", type=positive, default=None, help="only the first N items")
    p.add_argument(
        "--seed",
        type=int,
        default=0,
        help="run seed: each attempt draws its seed from (SEED, item, mode, attempt)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run (or resume) a difficulty filter and print what it kept."""
    from rich.table import Table

    from gemkit.synth.difficulty_filter import NOTHING_SOLVED, FilterConfig, run_filter

    refuse_unless_resume(args, "filter")
    config = FilterConfig(
        source=args.source, out=str(args.out), llm_url=args.llm, model=args.model, k=args.k,
        max_accuracy=args.max_accuracy, max_closed_book=args.max_closed_book,
        min_tool_turns=args.min_tool_turns, temperature=args.temperature,
        max_tokens=args.max_tokens, concurrency=args.concurrency, limit=args.limit,
        seed=args.seed, timeout=args.timeout, tool_format=args.tool_format,
        max_steps=args.max_steps,
    )  # fmt: skip
    summary = run_filter(config)
    table = Table(title=f"difficulty filter: {args.source}")
    table.add_column("figure")
    table.add_column("value", justify="right")
    table.add_row("items", str(summary.items))
    table.add_row("kept", str(summary.kept))
    for why, n in sorted(summary.dropped.items()):
        table.add_row(f"dropped: {why}", str(n))
    table.add_row(
        "attempts played / resumed", f"{summary.attempts_played} / {summary.attempts_resumed}"
    )
    console.print(table)
    console.print(f"kept records: {args.out}")
    if not summary.judged:
        console.print(f"[yellow]{NOTHING_SOLVED % (summary.items, args.model)}[/yellow]")
        return 1
    return 0
