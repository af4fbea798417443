"""`gemkit run ID --policy expert|random`: play many episodes and report the figures."""

from __future__ import annotations

import argparse
import asyncio
import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from gemkit.cli.arguments import add_run_folder, positive
from gemkit.cli.console import console
from gemkit.errors import GemkitError


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register `gemkit run`."""
    p = sub.add_parser("run", help="run a built-in policy on env ids and report the results")
    p.add_argument("env_ids", nargs="+", metavar="ID", help="env ids (see gemkit list)")
    p.add_argument(
        "--policy", choices=["expert", "random"], default="expert",
        help="expert: the env's scripted solver (gemkit list marks the ids that have one); "
        "random: a random valid action (default expert)",
    )  # fmt: skip
    p.add_argument(
        "-n", "--episodes", type=positive, default=10, help="episodes per env id (default 10)"
    )
    p.add_argument("--seed", type=int, default=0, help="episode k uses seed SEED+k")
    p.add_argument(
        "--concurrency", type=positive, default=64, help="episodes played at once (default 64)"
    )
    add_run_folder(
        p, required=False, what="results folder (episodes.jsonl, run.json, summary.json); "
        "without it nothing is saved",
    )  # fmt: skip
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
    env_ids: list[str],
    policy: str,
    n: int,
    seed: int,
    concurrency: int,
    out: Path | None,
    *,
    resume: bool = False,
) -> dict[str, dict[str, float]]:
    """Run `policy` on each id with a progress bar; summarise the episodes, saved under `out`.

    Episode k is played with seed `seed + k` by a policy seeded with the same seed, so the
    figures do not depend on the concurrency. With `out`, the episodes go to a run folder
    (`gemkit.evaluate`): `resume=True` continues one made with the same settings.
    """
    from gemkit.evaluate import evaluate, play
    from gemkit.registry import check_policy, make_policy
    from gemkit.rollout import summarize

    for env_id in env_ids:  # every id and policy is checked before any episode is played
        check_policy(policy, env_id)
    if out is not None and out.suffix == ".jsonl":
        raise GemkitError(
            f"--out {out} names a file; --out is a folder now (episodes.jsonl, run.json and "
            "summary.json go inside it): pass a folder name"
        )
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=True) as progress:
        bars = {env_id: progress.add_task(env_id, total=n) for env_id in env_ids}

        def factory(env_id: str, s: int):
            return make_policy(policy, env_id, seed=s)

        if out is not None:

            def on_start(done: Mapping[str, dict[str, Any]]) -> None:
                for r in done.values():
                    if r["env_id"] in bars and r["index"] < n:
                        progress.advance(bars[r["env_id"]])

            return asyncio.run(
                evaluate(
                    env_ids,
                    factory,
                    n,
                    out,
                    seed=seed,
                    concurrency=concurrency,
                    resume=resume,
                    on_start=on_start,
                    on_episode=lambda env_id, k, ep: progress.advance(bars[env_id]),
                    policy_info=lambda s: {"name": policy, "seed": s},
                    settings={"policy": policy},
                    kind="run",
                )
            )
        rows: dict[str, dict[str, float]] = {}
        for env_id in env_ids:
            episodes: list[Any] = []

            def commit(k: int, ep, env_id: str = env_id, episodes: list = episodes) -> None:
                episodes.append(ep)
                progress.advance(bars[env_id])

            asyncio.run(
                play(
                    env_id,
                    range(n),
                    functools.partial(factory, env_id),
                    seed=seed,
                    concurrency=concurrency,
                    commit=commit,
                )
            )
            rows[env_id] = summarize(episodes)
    return rows


def run(args: argparse.Namespace) -> int:
    """Run and print the table."""
    rows = run_policy(
        args.env_ids,
        args.policy,
        args.episodes,
        args.seed,
        args.concurrency,
        args.out,
        resume=args.resume,
    )
    console.print(results_table(rows, f"policy: {args.policy}"))
    if args.out is not None:
        console.print(f"episodes saved in {args.out}/episodes.jsonl")
    return 0
