"""One record's page: the kind's view, with links to the previous and next in the list."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from gemkit.view.catalog import Catalog
from gemkit.view.collection import Collection
from gemkit.view.markup import Markup, fmt, join
from gemkit.view.pages.episode_page import episode_view
from gemkit.view.pages.parts import crumbs, items, layout, message, url
from gemkit.view.pages.qa_page import corpus_for, qa_view
from gemkit.view.pages.task_page import task_view
from gemkit.view.query import parse_query
from gemkit.view.records import read_turn_rows


def record_page(
    cat: Catalog,
    coll: Collection,
    row: int,
    params: Mapping[str, Any],
    *,
    task_check: Mapping[str, Any] | None = None,
) -> Markup:
    """One record: its kind's page, with links to the previous and next in the list."""
    coll.refresh()
    raw, error = coll.record(row)
    keep = [(k, v) for k, v in items(params) if k not in ("r", "tp", "turn")]
    query, _ = parse_query(coll.kind, params, coll.files if len(coll.sources) > 1 else ())
    order = coll.ordered(query, unreadable=params.get("f.unreadable") or None)
    at = np.flatnonzero(order == row)
    nav = []
    if len(at):
        i = int(at[0])
        for label, j, rel in (("‹ previous", i - 1, "prev"), ("next ›", i + 1, "next")):
            if 0 <= j < len(order):
                nav.append(
                    fmt(
                        '<a href="{u}" rel="{r}" data-key="{r}">{t}</a>',
                        u=url("/record", keep, r=int(order[j])),
                        r=rel,
                        t=label,
                    )
                )
        nav.append(
            fmt(
                '<span class="muted">{a} of {n} in this list</span>',
                a=f"{i + 1:,}",
                n=f"{len(order):,}",
            )
        )
    head = fmt(
        '<div class="recnav"><span class="where">{w}</span> {nav} '
        '<a href="{raw}" class="button small">raw JSON</a></div>',
        w=coll.where(row),
        nav=join(nav, " "),
        raw=url("/raw", c=coll.key, r=row),
    )
    if error or raw is None:
        body = fmt("{h}<h1>Unreadable record</h1>{m}", h=head, m=message(error or "?", "error"))
        return layout("unreadable record", body, root=str(cat.allowed), crumbs=crumbs(coll, params))
    if coll.kind.name == "episodes":
        title, inner = episode_view(coll.kind.read(raw), params)
    elif coll.kind.name == "turns":
        title, inner = episode_view(read_turn_rows(_episode_rows(coll, row)), params)
    elif coll.kind.name == "qa":
        title, inner = qa_view(coll.kind.read(raw), corpus_for(cat, coll))
    else:
        title, inner = task_view(cat, coll, coll.kind.read(raw), task_check)
    body = fmt("{h}{b}", h=head, b=inner)
    return layout(title, body, root=str(cat.allowed), crumbs=crumbs(coll, params))


def _episode_rows(coll: Collection, row: int) -> list[dict[str, Any]]:
    """Every turn row of the episode `row` belongs to (same env id and episode number)."""
    arrays = coll.index.arrays()
    env, ep = arrays["v:env_id"][row], arrays["v:episode"][row]
    same = (arrays["v:env_id"] == env) & (arrays["v:episode"] == ep)
    rows = []
    for r in np.flatnonzero(same)[:10_000]:
        raw, _ = coll.record(int(r))
        if raw is not None:
            rows.append(raw)
    return rows
