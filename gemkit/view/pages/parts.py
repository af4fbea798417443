"""Small page parts: links, text blocks, labels, definition lists, the page layout."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlencode

from gemkit.view.collection import Collection
from gemkit.view.markup import Markup, attrs, escape, fmt, join

#: characters of one text block shown before it is cut (the raw record has all of it)
MAX_TEXT = 50_000


def url(path: str, params: Mapping[str, Any] | Sequence[tuple[str, Any]] = (), **more: Any) -> str:
    """A local URL with its query string (values are encoded, so no value is a path)."""
    items = list(params.items()) if isinstance(params, Mapping) else list(params)
    items = [(k, v) for k, v in items if k not in more] + list(more.items())
    query = urlencode([(k, v) for k, v in items if v is not None and v != ""], doseq=True)
    return f"{path}?{query}" if query else path


def pre(text: Any, cls: str = "") -> Markup:
    """A text block, cut at MAX_TEXT characters with a note."""
    text = "" if text is None else str(text)
    extra = Markup("")
    if len(text) > MAX_TEXT:
        more = len(text) - MAX_TEXT
        text = text[:MAX_TEXT]
        extra = fmt('<p class="note">… {n} more characters (see the raw record)</p>', n=f"{more:,}")
    return fmt("<pre{a}>{t}</pre>{extra}", a=attrs(class_=cls or None), t=text, extra=extra)


def as_json(value: Any) -> str:
    """Pretty JSON of a value (its text when it is too deep or odd to encode)."""
    try:
        return json.dumps(value, indent=1, ensure_ascii=False, default=str)
    except (ValueError, RecursionError, TypeError):
        return str(value)


def num(value: Any, digits: int = 4) -> str:
    """A number as short text ('–' when missing)."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e15:
            return f"{int(value):,}"
        return f"{value:.{digits}g}"
    return str(value)


def badge(text: Any, kind: str = "") -> Markup:
    """A small label."""
    return fmt('<span class="badge {k}">{t}</span>', k=kind, t=text)


def outcome(value: bool | None, yes: str = "success", no: str = "failure") -> Markup:
    """A coloured yes/no/unknown label."""
    if value is None:
        return badge("unknown", "muted")
    return badge(yes, "ok") if value else badge(no, "bad")


def kv(values: Mapping[str, Any], cls: str = "kv") -> Markup:
    """A definition list; nested values as JSON."""
    rows = []
    for k, v in values.items():
        shown = _value(v)
        rows.append(fmt("<dt>{k}</dt><dd>{v}</dd>", k=k, v=shown))
    return fmt('<dl class="{c}">{rows}</dl>', c=cls, rows=join(rows)) if rows else Markup("")


def _scalar(v: Any) -> bool:
    return v is None or isinstance(v, (str, int, float, bool))


def _flat(v: Any) -> bool:
    return _scalar(v) or (isinstance(v, list) and all(_scalar(x) for x in v))


def _value(v: Any) -> Markup:
    """A value in a definition list: scalars as text, flat lists and dicts inline, else JSON."""
    if isinstance(v, list) and all(_scalar(x) for x in v):
        return escape(", ".join(num(x) for x in v) if v else "none")
    if isinstance(v, dict) and v and len(v) <= 16 and all(_flat(x) for x in v.values()):
        return kv(v, "kv inner")
    if isinstance(v, (dict, list)):
        return pre(as_json(v), "json")
    return escape(num(v))


def section(title: str, body: Markup, *, open_: bool = True, cls: str = "") -> Markup:
    """A collapsible section."""
    return fmt(
        '<details class="sec {c}"{o}><summary>{t}</summary>{b}</details>',
        c=cls,
        o=Markup(" open") if open_ else Markup(""),
        t=title,
        b=body,
    )


def message(text: str, kind: str = "warn") -> Markup:
    """A message box (warn, error, info)."""
    return fmt('<div class="msg {k}" role="status">{t}</div>', k=kind, t=text)


def layout(
    title: str, body: Markup, *, root: str, crumbs: Sequence[tuple[str, str]] = ()
) -> Markup:
    """The whole page around a body."""
    trail = join(
        fmt(' <span class="sep">›</span> <a href="{u}">{t}</a>', u=u, t=t) for t, u in crumbs
    )
    return fmt(
        "<!doctype html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        "<title>{title} · gemkit view</title>"
        '<link rel="stylesheet" href="/static/viewer.css">'
        '<script src="/static/viewer.js" defer></script></head>'
        '<body><header class="top"><a class="brand" href="/">gemkit view</a>{trail}'
        '<span class="root" title="{root}">{root}</span></header>'
        '<main id="main">{body}</main></body></html>',
        title=title,
        trail=trail,
        root=root,
        body=body,
    )


def error_page(status: int, text: str, *, root: str = "") -> Markup:
    """A page that says what went wrong (never a traceback)."""
    body = fmt("<h1>{s}</h1>{m}", s=f"{status}", m=message(text, "error"))
    return layout(f"error {status}", body, root=root)


def crumbs(coll: Collection, params: Mapping[str, Any] | None = None) -> list[tuple[str, str]]:
    """The header's link back to the collection's list (with the list's filters)."""
    keep = [(k, v) for k, v in (params or {}).items() if k not in ("r", "tp", "turn")]
    title = f"{coll.kind.title} · {coll.rel}" if coll.rel else coll.kind.title
    return [(title, url("/list", keep, c=coll.key))]


def items(params: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """Every (key, value) of request parameters, repeated keys included."""
    getall = getattr(params, "items", None)
    return list(getall()) if getall else []
