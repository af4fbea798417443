"""`gemkit list`: every registered env id, its tags, whether it has an expert, what it lacks.

A table on a terminal; one plain line per id in a pipe or a file (`gemkit list | grep hard`,
`cut -f1` for the ids), or JSON (`--format json`). Descriptions are printed as text: a
registered description is never read as rich markup.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from gemkit.cli.console import console

FORMATS = ("table", "plain", "ids", "json")


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register `gemkit list`."""
    p = sub.add_parser(
        "list",
        help="list registered env ids",
        description="List env ids with their tags, whether they have an expert policy "
        "(`gemkit run --policy expert`) and what is missing to make them here.",
    )
    p.add_argument("--family", help="only this family (e.g. game, math, rg)")
    p.add_argument("--tag", help="only ids with this tag (e.g. easy, planning)")
    p.add_argument(
        "--format",
        choices=FORMATS,
        default=None,
        help="table (the default on a terminal); plain: one tab-separated line per id: id, "
        "tags, notes (the default in a pipe or file); ids: the ids alone; json: a list of "
        "objects",
    )
    p.set_defaults(func=run)


def entry(spec: Any) -> dict[str, Any]:
    """What `gemkit list` says about one id, as `--format json` writes it."""
    missing = list(spec.missing())
    return {
        "id": spec.id,
        "family": spec.family,
        "description": spec.description,
        "tags": list(spec.tags),
        "expert": spec.expert is not None,
        "requires": list(spec.requires),
        "missing": missing,
        "install": spec.install_hint() if missing else None,
    }


def notes(item: dict[str, Any]) -> str:
    """The marks of one id: `expert`, and what to install when something is missing."""
    marks = ["expert"] if item["expert"] else []
    if item["missing"]:
        marks.append(f"missing {', '.join(item['missing'])}: {item['install']}")
    return "; ".join(marks)


def run(args: argparse.Namespace) -> int:
    """Print the env ids in the chosen format."""
    from gemkit.registry import list_envs

    items = [entry(s) for s in list_envs(args.family, args.tag)]
    fmt = args.format or ("table" if console.is_terminal else "plain")
    if not items:
        # a pipe reads an empty list; a person reads why it is empty
        if fmt == "json":
            sys.stdout.write("[]\n")
        sys.stderr.write(f"no env ids match family={args.family!r} tag={args.tag!r}\n")
        return 1
    if fmt == "json":
        sys.stdout.write(json.dumps(items, indent=1) + "\n")
    elif fmt == "ids":
        sys.stdout.write("".join(f"{item['id']}\n" for item in items))
    elif fmt == "plain":
        sys.stdout.write(
            "".join(f"{item['id']}\t{','.join(item['tags'])}\t{notes(item)}\n" for item in items)
        )
    else:
        console.print(_table(items))
    return 0


def _table(items: list[dict[str, Any]]) -> Any:
    from rich.table import Table
    from rich.text import Text

    lacking = sum(bool(item["missing"]) for item in items)
    title = f"{len(items)} env ids"
    if lacking:
        title += f" ({lacking} need a package that is not installed)"
    table = Table(title=title)
    table.add_column("id", style="cyan", no_wrap=True)
    table.add_column("description")
    table.add_column("tags", style="dim")
    table.add_column("notes")
    for item in items:
        style = "yellow" if item["missing"] else "green"
        # Text, not str: a description is never parsed as markup ("gemkit[gem]" stays as it is)
        table.add_row(
            Text(item["id"]),
            Text(item["description"]),
            Text(", ".join(item["tags"])),
            Text(notes(item), style=style),
        )
    return table
