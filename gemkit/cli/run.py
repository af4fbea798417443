"""`gemkit run ID --policy expert|random`: play many episodes and report the figures."""

from __future__ import annotations

import argparse
import itertools
from collections.abc import Iterator
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from gemkit.cli.console import console


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register `gemkit run`."""
    p = sub.add_parser("run", help="run a built-in policy on env ids and report the results")
    p.add_argument("env_ids", nargs="+", metavar="ID")
    p.add_argument("--policy", choices=["expert", "random"], default="expert")
    p.add_argument("-n", "--episodes", type=int, default=10)
    p.add_argument("--seed", type=int, default=0, help="episode k uses seed SEED+k")
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--out", type=Path, help="save episodes as JSONL (one file per id if several)")
    p.set_defaults(func=run)


def results_table(rows: dict[str, dict[str, float]], title: str) -> Table:
    """A rich table of per-env summary figures."""
    table = Table(title=title)
    for col in ("env", "episodes", "success rate", "mean return", "mean turns", "errors"):
        if col == "env":
            table.add_column(col, no_wrap=True, overflow="fold")
        else:
            table.add_column(col, justify="right", min_width=len(col), no_wrap=True)
    for env_id, s in rows.items():
        table.add_row(
            env_id,
            str(s["episodes"]),
            f"{s['success_rate']:.1%}",
            f"{s['mean_return']:.3f}",
            f"{s['mean_turns']:.2f}",
            str(s["errors"]),
        )
    return table


def run_policy(
    env_ids: list[str], policy: str, n: int, seed: int, concurrency: int, out: Path | None
) -> dict[str, dict[str, float]]:
    """Run `policy` on each id with a progress bar; save and summarise the episodes."""
    from gemkit.registry import make_policy, spec
    from gemkit.rollout import run_episodes, save_jsonl, summarize

    for env_id in env_ids:
        spec(env_id)  # unknown ids fail before any work starts
    rows: dict[str, dict[str, float]] = {}
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        for env_id in env_ids:
            task = progress.add_task(env_id, total=n)
            counter = itertools.count(seed)

            def factory(env_id: str = env_id, counter: Iterator[int] = counter):
                return make_policy(policy, env_id, seed=next(counter))

            episodes = run_episodes(
                env_id,
                factory,
                n,
                seed=seed,
                concurrency=concurrency,
                on_episode=lambda k, ep, task=task: progress.advance(task),
            )
            rows[env_id] = summarize(episodes)
            if out is not None:
                path = out if len(env_ids) == 1 else out.with_name(
                    f"{out.stem}-{env_id.replace(':', '_')}{out.suffix or '.jsonl'}"
                )
                save_jsonl(episodes, path)
    return rows


def run(args: argparse.Namespace) -> int:
    """Run and print the table."""
    if args.episodes < 1:
        console.print("[red]error:[/red] -n must be at least 1")
        return 2
    rows = run_policy(args.env_ids, args.policy, args.episodes, args.seed, args.concurrency, args.out)
    console.print(results_table(rows, f"policy: {args.policy}"))
    if args.out is not None:
        console.print(f"episodes saved next to {args.out}")
    return 0
