"""Command-line flags from a dataclass: one `--flag` per field, help from the field's metadata."""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from collections.abc import Sequence
from typing import Any, TypeVar

T = TypeVar("T")


def _scalar(tp: Any) -> tuple[Any, bool]:
    """The field's value type and whether it may be None (`float | None` -> (float, True))."""
    args = typing.get_args(tp)
    if typing.get_origin(tp) in (typing.Union, types.UnionType) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return rest[0], True
    return tp, False


def parse_args(cls: type[T], argv: Sequence[str] | None = None, description: str = "") -> T:
    """Parse `argv` into an instance of dataclass `cls` (`some_field` is `--some-field`).

    Booleans are switches (`--tiny`, `--no-tiny`); a field typed `X | None` also takes
    `none`. Each field's help is `field(metadata={"help": ...})`.
    """
    hints = typing.get_type_hints(cls)
    parser = argparse.ArgumentParser(
        description=description or (cls.__doc__ or ""),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        flag = "--" + f.name.replace("_", "-")
        tp, optional = _scalar(hints[f.name])
        default = f.default if f.default is not dataclasses.MISSING else None
        help_text = f.metadata.get("help", " ")
        if tp is bool:
            parser.add_argument(
                flag, dest=f.name, default=default, action=argparse.BooleanOptionalAction,
                help=help_text,
            )  # fmt: skip
            continue
        convert = _converter(tp, optional, flag)
        parser.add_argument(flag, dest=f.name, type=convert, default=default, help=help_text)
    return cls(**vars(parser.parse_args(argv)))


def _converter(tp: Any, optional: bool, flag: str) -> Any:
    def convert(text: str) -> Any:
        if optional and text.lower() in ("none", "null", ""):
            return None
        try:
            return tp(text)
        except ValueError:
            kind = getattr(tp, "__name__", str(tp))
            extra = " or 'none'" if optional else ""
            raise argparse.ArgumentTypeError(
                f"{flag} expects a {kind}{extra}, got {text!r}"
            ) from None

    convert.__name__ = getattr(tp, "__name__", "value")
    return convert
