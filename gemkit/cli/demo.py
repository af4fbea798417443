"""`gemkit demo`: the main job, offline, in one command (what `make demo` runs)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

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


TOOLWORLD = "toolworld:TripPlanning-v0"


def run(args: argparse.Namespace) -> int:
    """Synthesize small verified datasets, play their tasks and some games, point at the viewer."""
    from gemkit.cli.run import results_table, run_policy
    from gemkit.cli.synth import demo_qa
    from gemkit.cli.synth_tasks import demo_tasks
    from gemkit.registry import list_envs

    demo_qa(args.out / "synth-qa")
    demo_tasks(args.out / "synth-tasks")
    play_tasks(args.out / "synth-tasks", args.out / "toolworld", args.episodes)

    known = {s.id for s in list_envs("game")}
    games = [g for g in DEMO_GAMES if g in known]
    console.rule("[bold]gemkit demo: games played by their expert policies")
    # the same command again finds every part done and prints the same figures
    rows = run_policy(games, "expert", args.episodes, 0, 16, args.out, resume=True)
    console.print(results_table(rows, "expert policies"))
    console.rule("[bold]next: look at what the demo made")
    console.print(
        f"QA records, tasks and episodes are saved under {args.out}/; browse them (the failed "
        "toolworld episodes show every tool call and the rule they broke) with:",
        highlight=False,
    )
    console.print(f"  gemkit view {args.out}", highlight=False)
    return 0


def play_tasks(tasks: Path, out: Path, episodes: int) -> None:
    """Play the synthesized tasks with the baseline agent, saving every episode under `out`."""
    import asyncio

    from gemkit.evaluate import evaluate
    from gemkit.registry import make_policy

    console.rule(f"[bold]{TOOLWORLD} on those tasks, played by the baseline agent")
    lines: dict[int, str] = {}

    def on_episode(env_id: str, k: int, episode) -> None:
        lines[k] = _episode_line(k, episode)

    def on_start(
        done: Mapping[str, dict[str, Any]],
    ) -> None:  # a resumed demo prints the episodes it found
        from gemkit.rollout import Episode

        for record in done.values():
            lines[record["index"]] = _episode_line(record["index"], Episode.from_dict(record))

    asyncio.run(
        evaluate(
            [TOOLWORLD],
            lambda env_id, seed: make_policy("expert", env_id, seed=seed),
            episodes,
            out,
            resume=True,
            make_kwargs=lambda env_id: {"path": tasks},
            on_episode=on_episode,
            on_start=on_start,
            policy_info=lambda seed: {"name": "expert", "seed": seed},
            settings={"policy": "expert", "tasks": str(tasks)},
            kind="run",
        )
    )
    for k in sorted(lines)[:episodes]:
        console.print(lines[k], highlight=False)


def _episode_line(k: int, episode) -> str:
    info = episode.turns[-1].info if episode.turns else {}
    verdict = "passed" if episode.success else "failed: " + "; ".join(info.get("violations", []))
    return (
        f"episode {k}, task {info.get('task_id')}: the baseline agent made "
        f"{episode.tool_calls} tool calls in {episode.num_turns} actions, reward "
        f"{episode.total_reward:g} ({verdict})"
    )
