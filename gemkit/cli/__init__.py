"""The `gemkit` command line: one module per subcommand, each with `add_parser` and `run`."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

#: subcommand -> module with `add_parser(subparsers)` and `run(args) -> int`
COMMANDS: dict[str, str] = {
    "list": "gemkit.cli.list_cmd",
    "demo": "gemkit.cli.demo",
    "play": "gemkit.cli.play",
    "run": "gemkit.cli.run",
    "serve": "gemkit.cli.serve",
    "eval": "gemkit.cli.eval",
    "synth": "gemkit.cli.synth",
    "filter": "gemkit.cli.filter_cmd",
    "view": "gemkit.cli.view",
}


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every available subcommand."""
    parser = argparse.ArgumentParser(
        prog="gemkit", description="Experience and data for training LLM agents with RL."
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in COMMANDS.values():
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as e:
            if e.name == module:
                continue  # subcommand not part of this build
            raise
        mod.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `gemkit` command."""
    from gemkit.cli.console import console
    from gemkit.errors import GemkitError

    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except GemkitError as e:
        console.print(f"[red]error:[/red] {e}")
        return 2
    except KeyboardInterrupt:
        console.print("[yellow]interrupted[/yellow]")
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
