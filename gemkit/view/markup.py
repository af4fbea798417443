"""HTML built only from escaped parts: every value from a record is text until escaped here.

The viewer shows model-written text, so no page is ever built by pasting a value into HTML.
`fmt(template, **values)` escapes each value unless it is `Markup` (HTML this module built);
templates are literals in the viewer's code, never data.
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from typing import Any


class Markup(str):
    """A string that is already safe HTML (built by `escape`, `fmt` or `join`)."""

    __slots__ = ()


def escape(value: Any) -> Markup:
    """`value` as HTML text (quotes too, so it is safe in attributes); Markup passes through."""
    if isinstance(value, Markup):
        return value
    return Markup(html.escape("" if value is None else str(value), quote=True))


def fmt(template: str, /, **values: Any) -> Markup:
    """Fill a literal `{name}` template with escaped values."""
    return Markup(template.format(**{k: escape(v) for k, v in values.items()}))


def join(parts: Iterable[Any], sep: str = "") -> Markup:
    """Concatenate parts, escaping the ones that are not Markup."""
    return Markup(sep.join(escape(p) for p in parts))


def attrs(**values: Any) -> Markup:
    """` name="value"` pairs for a tag (`class_` for `class`); None and False are left out."""
    out = []
    for name, value in values.items():
        if value is None or value is False:
            continue
        key = name.rstrip("_").replace("_", "-")
        out.append(f' {key}="{escape("" if value is True else value)}"')
    return Markup("".join(out))
