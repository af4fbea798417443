"""Argument types and options shared by the subcommands: a bad number is a one-line usage
error."""

from __future__ import annotations

import argparse
from pathlib import Path


def positive(text: str) -> int:
    """A whole number >= 1 (`-n`, `--concurrency`, `--workers`)."""
    value = whole(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a number >= 1, got {value}")
    return value


def count(text: str) -> int:
    """A whole number >= 0."""
    value = whole(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {value}")
    return value


def whole(text: str) -> int:
    """A whole number."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None


def seconds(text: str) -> float:
    """A number of seconds > 0 (`--timeout`)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, got {text}")
    return value


#: what `--timeout` says (the names are gemkit.llm.client's ENV_TIMEOUT and DEFAULT_TIMEOUT,
#: written out so that building the parser imports no HTTP client)
TIMEOUT_HELP = (
    "seconds the model server has to answer each request it accepted; a request left "
    "unanswered fails at once instead of being sent again (default $GEMKIT_TIMEOUT, else 600)"
)


def add_timeout_option(parser: argparse.ArgumentParser) -> None:
    """The `--timeout` option of every command that talks to a model (read by `LLMClient`)."""
    parser.add_argument(
        "--timeout", type=seconds, default=None, metavar="SECONDS", help=TIMEOUT_HELP
    )


def add_token_option(parser: argparse.ArgumentParser) -> None:
    """The `--token` option every `gemkit serve` server takes (read with `resolve_token`)."""
    parser.add_argument(
        "--token",
        help="require 'Authorization: Bearer TOKEN' on every request (default $GEMKIT_SERVE_TOKEN)",
    )


#: what every command that writes a run folder says about resuming (`--resume` help, Ctrl-C)
RESUME_RULE = (
    "continue the run in --out with the same settings (after Ctrl-C, a kill or a crash, "
    "run the same command again with --resume); without it a folder that holds a run is refused"
)


def add_run_folder(
    parser: argparse.ArgumentParser, *, required: bool = True, what: str = "results folder"
) -> None:
    """`--out DIR` and `--resume`: the one resume rule of every command that writes a run.

    The parser's namespace gets `writes_run=True`, which `gemkit.cli.main` reads to say how to
    go on after Ctrl-C.
    """
    parser.add_argument("--out", type=Path, required=required, metavar="DIR", help=what)
    parser.add_argument("--resume", action="store_true", help=RESUME_RULE)
    parser.set_defaults(writes_run=True)


def refuse_unless_resume(args: argparse.Namespace, kind: str) -> None:
    """For commands whose library call always resumes: refuse a run folder without --resume."""
    from gemkit.runstore import check_resume

    check_resume(args.out, kind, resume=args.resume)
