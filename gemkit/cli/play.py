"""`gemkit play ID`: a person plays an env in the terminal."""

from __future__ import annotations

import argparse

from gemkit.cli.console import console


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register `gemkit play`."""
    p = sub.add_parser("play", help="play an env yourself in the terminal")
    p.add_argument("env_id", metavar="ID", help="the env id, e.g. game:Wordle-v0-easy")
    p.add_argument("--seed", type=int, default=None, help="episode seed (default: random)")
    p.add_argument(
        "--raw", action="store_true", help="send input as typed (default: wrap it in \\boxed{})"
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Read moves from the terminal until the episode ends or the player types `quit`."""
    from gemkit.registry import make

    env = make(args.env_id)
    obs, _ = env.reset(seed=args.seed)
    total, turns = 0.0, 0
    console.print(obs, markup=False, highlight=False)
    while True:
        try:
            move = console.input("[bold cyan]> [/bold cyan]")
        except EOFError:
            break
        if move.strip().lower() in {"quit", "exit", "q"}:
            break
        action = move if args.raw or "\\boxed" in move else f"\\boxed{{{move.strip()}}}"
        obs, reward, terminated, truncated, info = env.step(action)
        total, turns = total + reward, turns + 1
        console.print(obs, markup=False, highlight=False)
        console.print(f"[dim]reward {reward:+.3f}  total {total:+.3f}[/dim]")
        if terminated or truncated:
            result = "[green]solved[/green]" if info.get("success") else "[red]not solved[/red]"
            console.print(f"Episode over after {turns} turns: {result}, return {total:.3f}")
            break
    env.close()
    return 0
