"""`gemkit list`: every registered env id with its description and tags."""

from __future__ import annotations

import argparse

from rich.table import Table

from gemkit.cli.console import console


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register `gemkit list`."""
    p = sub.add_parser("list", help="list registered env ids")
    p.add_argument("--family", help="only this family (e.g. game, math, rg)")
    p.add_argument("--tag", help="only ids with this tag (e.g. easy, planning)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the table of env ids."""
    from gemkit.registry import list_envs

    specs = list_envs(args.family, args.tag)
    if not specs:
        console.print(f"no env ids match family={args.family!r} tag={args.tag!r}")
        return 1
    table = Table(title=f"{len(specs)} env ids")
    table.add_column("id", style="cyan", no_wrap=True)
    table.add_column("description")
    table.add_column("tags", style="dim")
    for s in specs:
        table.add_row(s.id, s.description, ", ".join(s.tags))
    console.print(table)
    return 0
