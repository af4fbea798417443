"""Argument types and options shared by the subcommands: a bad number is a one-line usage
error."""

from __future__ import annotations

import argparse


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


def add_token_option(parser: argparse.ArgumentParser) -> None:
    """The `--token` option every `gemkit serve` server takes (read with `resolve_token`)."""
    parser.add_argument(
        "--token",
        help="require 'Authorization: Bearer TOKEN' on every request (default $GEMKIT_SERVE_TOKEN)",
    )
