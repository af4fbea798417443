"""A collection's list: filters, search, sort, and one page of rows read from disk."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from gemkit.view.catalog import Catalog
from gemkit.view.collection import Collection
from gemkit.view.markup import Markup, attrs, escape, fmt, join
from gemkit.view.pages.overview_page import collection_notes
from gemkit.view.pages.parts import badge, crumbs, items, layout, message, num, outcome, url
from gemkit.view.query import parse_query
from gemkit.view.sources import ArrowSource


def _filters(coll: Collection, params: Mapping[str, Any]) -> Markup:
    arrays = coll.index.arrays()
    fields = [fmt('<input type="hidden" name="c" value="{c}">', c=coll.key)]
    fields.append(
        fmt(
            '<label class="field wide">search <input type="search" name="q" value="{q}" '
            'placeholder="text anywhere in the record" maxlength="200"></label>',
            q=params.get("q", ""),
        )
    )
    columns = list(coll.kind.columns)
    choices: list[tuple[str, str, list[str]]] = []
    for col in columns:
        if col.type == "cat":
            labels = coll.index.labels[col.name]
            counts = np.bincount(
                arrays[f"v:{col.name}"][arrays[f"v:{col.name}"] >= 0], minlength=len(labels)
            )
            top = sorted(range(len(labels)), key=lambda i: -counts[i])[:200]
            in_order = sorted(top, key=lambda i: labels[i])
            choices.append((col.name, col.label, [labels[i] for i in in_order]))
    if len(coll.sources) > 1:
        choices.append(("file", "file", coll.files))
    for name, label, options in choices:
        chosen = params.get(f"f.{name}", "")
        opts = join(
            fmt(
                "<option{s}>{o}</option>", o=o, s=Markup(" selected") if o == chosen else Markup("")
            )
            for o in options
        )
        fields.append(
            fmt(
                '<label class="field">{l} <select name="f.{n}" data-autosubmit>'
                '<option value="">any</option>{o}</select></label>',
                l=label,
                n=name,
                o=opts,
            )
        )
    flags = [(c.name, c.label) for c in columns if c.type == "bool"]
    if np.any(arrays["bad"]):
        flags.append(("unreadable", "unreadable"))
    for name, label in flags:
        chosen = params.get(f"f.{name}", "")
        opts = join(
            fmt(
                '<option value="{v}"{s}>{t}</option>',
                v=v,
                t=t,
                s=Markup(" selected") if v == chosen else Markup(""),
            )
            for v, t in (("", "any"), ("yes", "yes"), ("no", "no"))
        )
        fields.append(
            fmt(
                '<label class="field">{l} <select name="f.{n}" data-autosubmit>{o}</select>'
                "</label>",
                l=label,
                n=name,
                o=opts,
            )
        )
    for col in columns:
        if col.type != "num":
            continue
        values = arrays[f"v:{col.name}"]
        finite = values[np.isfinite(values)]
        if not len(finite):
            continue
        fields.append(
            fmt(
                '<fieldset class="field range"><legend>{l}</legend>'
                '<input name="min.{n}" value="{lo}" placeholder="{plo}" inputmode="decimal" '
                'aria-label="min {l}"> – <input name="max.{n}" value="{hi}" placeholder="{phi}" '
                'inputmode="decimal" aria-label="max {l}"></fieldset>',
                l=col.label,
                n=col.name,
                lo=params.get(f"min.{col.name}", ""),
                hi=params.get(f"max.{col.name}", ""),
                plo=f"≥ {num(float(finite.min()))}",
                phi=f"≤ {num(float(finite.max()))}",
            )
        )
    sorts = [("", "file order")] + [(c.name, c.label) for c in columns]
    sort = params.get("sort", "")
    fields.append(
        fmt(
            '<label class="field">sort <select name="sort" data-autosubmit>{o}</select></label>'
            '<label class="field check"><input type="checkbox" name="desc" value="1"{d} '
            "data-autosubmit> descending</label>",
            o=join(
                fmt(
                    '<option value="{v}"{s}>{t}</option>',
                    v=v,
                    t=t,
                    s=Markup(" selected") if v == sort else Markup(""),
                )
                for v, t in sorts
            ),
            d=Markup(" checked") if params.get("desc") == "1" else Markup(""),
        )
    )
    fields.append(
        fmt(
            '<div class="field buttons"><button type="submit">apply</button> '
            '<a href="{u}">reset</a></div>',
            u=url("/list", c=coll.key),
        )
    )
    return fmt('<form class="filters" method="get" action="/list">{f}</form>', f=join(fields))


def _cell(coll: Collection, name: str, row: int, arrays: dict) -> Markup:
    col = coll.index.columns[name]
    v = arrays[f"v:{name}"][row]
    if col.type == "cat":
        return escape(coll.index.labels[name][v] if v >= 0 else "–")
    if col.type == "bool":
        if v < 0:
            return escape("–")
        if name in ("success", "terminated"):
            return outcome(bool(v), "yes", "no")
        return badge("yes", "bad") if v and name == "error" else escape("yes" if v else "no")
    return escape(num(float(v)))


def list_page(cat: Catalog, coll: Collection, params: Mapping[str, Any]) -> Markup:
    """The records of a collection: filters, search, sort, one page of rows."""
    coll.refresh()
    query, problems = parse_query(coll.kind, params, coll.files if len(coll.sources) > 1 else ())
    bad_filter = params.get("f.unreadable", "")
    page = coll.query(query, unreadable=bad_filter or None)
    arrays = coll.index.arrays()
    names = [c.name for c in coll.kind.columns]
    keep = [(k, v) for k, v in items(params) if k not in ("page",)]
    head = join(fmt("<th>{t}</th>", t=c.label) for c in coll.kind.columns)
    rows = []
    for r in page.rows:
        raw, error = coll.record(r)
        preview = (
            fmt('<span class="bad-text">{e}</span>', e=error)
            if error
            else escape(coll.kind.preview(raw or {}))
        )
        rows.append(
            fmt(
                '<tr{cls}><td class="where"><a href="{u}" title="{where}">{short}</a></td>{cells}'
                '<td class="preview">{p}</td></tr>',
                cls=attrs(class_="unreadable" if error else None),
                u=url("/record", keep, r=r),
                where=coll.where(r),
                short=_short_where(coll, r),
                cells=join(fmt("<td>{v}</td>", v=_cell(coll, n, r, arrays)) for n in names),
                p=preview,
            )
        )
    first = (page.page - 1) * query.per + 1 if page.matched else 0
    last = min(page.matched, page.page * query.per)
    counts = fmt(
        '<p class="count" id="count">{a}–{b} of <strong>{m}</strong> matching · {t} in all</p>',
        a=f"{first:,}",
        b=f"{last:,}",
        m=f"{page.matched:,}",
        t=f"{page.total:,}",
    )
    table = (
        fmt(
            '<div class="scroll"><table class="grid records"><thead><tr><th>record</th>{h}'
            "<th>preview</th></tr></thead><tbody>{rows}</tbody></table></div>",
            h=head,
            rows=join(rows),
        )
        if rows
        else message("No record matches these filters.", "info")
    )
    body = fmt(
        '<div class="listing">{form}<div class="results"><h1>{title} <span class="muted">{f}'
        '</span> <a class="button small" href="{p}">plots</a></h1>{probs}{notes}{counts}{table}'
        "{pager}</div></div>",
        form=_filters(coll, params),
        title=coll.kind.title,
        f=coll.rel,
        p=url("/plots", c=coll.key),
        probs=join(message(p, "warn") for p in problems),
        notes=join(collection_notes(coll)),
        counts=counts,
        table=table,
        pager=_pager(page.page, page.pages, keep),
    )
    return layout(coll.kind.title, body, root=str(cat.allowed), crumbs=crumbs(coll))


def _short_where(coll: Collection, row: int) -> str:
    """`line N` (one file) or the end of the file name and the line."""
    line = coll.index.line[row]
    if len(coll.sources) == 1:
        return f"row {line}" if isinstance(coll.sources[0], ArrowSource) else f"line {line}"
    name = Path(coll.sources[coll.index.src[row]].rel).name.removesuffix(".jsonl")
    return f"{'…' + name[-23:] if len(name) > 24 else name}:{line}"


def _pager(page: int, pages: int, keep: Sequence[tuple[str, Any]], key: str = "page") -> Markup:
    if pages <= 1:
        return Markup("")
    links = []
    for label, target in (
        ("« first", 1),
        ("‹ prev", page - 1),
        ("next ›", page + 1),
        ("last »", pages),
    ):
        if 1 <= target <= pages and target != page:
            links.append(
                fmt(
                    '<a href="{u}" rel="{r}">{t}</a>',
                    u=url("/list", keep, **{key: target}),
                    r="next" if "next" in label else "prev" if "prev" in label else "",
                    t=label,
                )
            )
        else:
            links.append(fmt('<span class="muted">{t}</span>', t=label))
    return fmt(
        '<nav class="pager">{a} <span>page {p} of {n}</span> {b}</nav>',
        a=join(links[:2], " "),
        b=join(links[2:], " "),
        p=f"{page:,}",
        n=f"{pages:,}",
    )
