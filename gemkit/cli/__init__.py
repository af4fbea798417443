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
    from gemkit import __version__

    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    parser.add_argument(
        "--version", action="version", version=f"gemkit {__version__}", help="print the version"
    )
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
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        from gemkit.cores import usable_cores

        usable_cores()  # a bad GEMKIT_CORES stops the command here, not episodes midway
        return int(args.func(args) or 0)
    except GemkitError as e:
        from rich.markup import escape

        # escaped: a message quoting `gemkit[rg]` or a path with brackets prints as it is
        console.print(f"[red]error:[/red] {escape(str(e))}", highlight=False)
        return 2
    except KeyboardInterrupt:
        console.print(f"[yellow]interrupted[/yellow]{how_to_go_on(args, argv)}", highlight=False)
        return 130


def how_to_go_on(args: argparse.Namespace, argv: Sequence[str]) -> str:
    """After Ctrl-C: where the work done so far is, and the command that continues it."""
    import shlex

    out = getattr(args, "out", None)
    if not getattr(args, "writes_run", False) or out is None:
        return ""
    again = ["gemkit", *argv] + ([] if "--resume" in argv else ["--resume"])
    return (
        f"; what was done is kept in {out}. To go on where it stopped, run:\n  {shlex.join(again)}"
    )


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
