"""`gemkit demo`: the main job, offline, in one command (what `make demo` runs)."""

from __future__ import annotations

import argparse
from pathlib import Path

from gemkit.cli.arguments import positive
from gemkit.cli.console import console

DEMO_GAMES = (
    "game:GuessTheNumber-v0-easy",
    "game:Mastermind-v0-easy",
    "game:Sudoku-v0-easy",
    "game:Wordle-v0-easy",
    "game:TowerOfHanoi-v0-easy",
    "game:LightsOut-v0-easy",
)


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register `gemkit demo`."""
    p = sub.add_parser(
        "demo", help="run the offline demo: verified data synthesis, then games played by experts"
    )
    p.add_argument(
        "--out", type=Path, default=Path("demo-out"), metavar="DIR",
        help="where the demo writes its runs (default demo-out; run again, it resumes)",
    )  # fmt: skip
    p.add_argument(
        "-n", "--episodes", type=positive, default=5, help="episodes per game (default 5)"
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Synthesize a small verified dataset, then play games with their expert policies."""
    from gemkit.cli.run import results_table, run_policy
    from gemkit.cli.synth import demo_qa
    from gemkit.cli.synth_tasks import demo_tasks
    from gemkit.registry import list_envs

    demo_qa(args.out / "synth-qa")
    demo_tasks(args.out / "synth-tasks")

    known = {s.id for s in list_envs("game")}
    games = [g for g in DEMO_GAMES if g in known]
    console.rule("[bold]gemkit demo: games played by their expert policies")
    # the same command again finds every part done and prints the same figures
    rows = run_policy(games, "expert", args.episodes, 0, 16, args.out, resume=True)
    console.print(results_table(rows, "expert policies"))
    console.print(f"episodes saved under {args.out}/")
    return 0
