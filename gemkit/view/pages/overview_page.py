"""The first page: what the folder holds, collection by collection."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from gemkit.view.catalog import Catalog
from gemkit.view.collection import Collection
from gemkit.view.files import ViewError, read_tail
from gemkit.view.markup import Markup, fmt, join
from gemkit.view.pages.parts import kv, layout, message, num, pre, section, url
from gemkit.view.sources import JsonlSource

#: how much of the end of a log a page reads
SIDE_TAIL_BYTES = 64 * 1024


def _size(path: Path) -> str:
    try:
        n: float = path.stat().st_size if path.is_file() else 0
    except OSError:
        return "?"
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return "?"


def collection_notes(coll: Collection) -> list[Markup]:
    """Problems of a collection: unreadable lines, a torn last line, a file that went away."""
    notes = []
    if coll.problem:
        notes.append(message(coll.problem, "error"))
    bad = int(np.count_nonzero(coll.index.arrays()["bad"]))
    if bad:
        link = url("/list", (), c=coll.key, **{"f.unreadable": "yes"})
        notes.append(
            fmt(
                '<div class="msg error">{n} unreadable line(s) (not JSON records); '
                '<a href="{u}">list them</a></div>',
                n=f"{bad:,}",
                u=link,
            )
        )
    for s in coll.sources:
        if s.torn:
            notes.append(
                message(
                    f"{s.rel}: the last line is incomplete ({s.torn:,} bytes without a newline): "
                    "a run still writing, or one killed mid-line; it is not shown",
                    "warn",
                )
            )
    return notes


def _side_files(paths: Sequence[Path]) -> Markup:
    parts = []
    for p in paths:
        whole = p.name in ("summary.json", "run.json")  # JSON: its tail would not parse
        try:
            data, size = read_tail(p, 2**20 if whole else SIDE_TAIL_BYTES)
        except ViewError as e:
            parts.append(message(str(e), "error"))
            continue
        except OSError as e:
            parts.append(message(f"{p.name}: cannot be read ({e.strerror})", "error"))
            continue
        if whole and size > 2**20:
            parts.append(message(f"{p.name} is over 1 MB; not shown", "info"))
            continue
        if len(data) < size:  # a tail: drop the first, cut line
            data = data.partition(b"\n")[2]
        text = data.decode("utf-8", errors="replace")
        if p.name == "summary.json":
            parts.append(section("summary.json (per env id)", _summary_table(text)))
        elif p.name == "run.json":
            try:
                settings = json.loads(text)
            except ValueError:
                settings = None
            body = kv(settings) if isinstance(settings, dict) else pre(text)
            parts.append(section("run.json (settings)", body, open_=False))
        else:
            tail = "\n".join(text.splitlines()[-12:])
            parts.append(section(f"{p.name} (last lines)", pre(tail), open_=False))
    return join(parts)


def _summary_table(text: str) -> Markup:
    try:
        data = json.loads(text)
    except ValueError:
        return message("summary.json is not valid JSON", "error")
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        return pre(text)
    keys = list(dict.fromkeys(k for v in data.values() for k in v))
    head = join(fmt("<th>{k}</th>", k=k.replace("_", " ")) for k in keys)
    rows = join(
        fmt(
            "<tr><th>{env}</th>{cells}</tr>",
            env=env,
            cells=join(
                fmt("<td>{v}</td>", v=f"{x:.1%}" if k == "success_rate" and _isnum(x) else num(x))
                for k in keys
                for x in [v.get(k)]
            ),
        )
        for env, v in data.items()
    )
    return fmt(
        '<div class="scroll"><table class="grid"><tr><th>env</th>{h}</tr>{r}</table></div>',
        h=head,
        r=rows,
    )


def _isnum(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def overview(cat: Catalog) -> Markup:
    """What the folder holds: each collection with its files, counts and problems."""
    root = str(cat.allowed)
    if not cat.collections:
        skipped = join(fmt("<li>{s}</li>", s=s) for s in cat.skipped)
        body = fmt(
            "<h1>Nothing to show</h1>{m}<p>The viewer reads what gemkit writes: a "
            "<code>gemkit eval</code> results folder (<code>episodes.jsonl</code>, "
            "<code>errors.jsonl</code>, <code>summary.json</code>), a "
            "<code>gemkit run --out</code> file, a <code>gemkit synth qa</code> or "
            "<code>gemkit synth tasks</code> folder, or a <code>datasets</code> folder they "
            "saved. Point <code>gemkit view</code> at one of those.</p>{s}",
            m=message(
                f"{root} holds no gemkit records (no episodes, QA records or task tuples).", "error"
            ),
            s=fmt("<h2>Files seen</h2><ul>{s}</ul>", s=skipped) if cat.skipped else Markup(""),
        )
        return layout("nothing to show", body, root=root)
    cards = []
    for coll in cat.collections.values():
        coll.refresh()
        files = join(
            fmt(
                "<li><code>{f}</code> <span class='muted'>{s}{role}</span></li>",
                f=s.rel or s.path.name,
                s=_size(s.path) if isinstance(s, JsonlSource) else "datasets folder",
                role=f" · {s.role}" if s.role else "",
            )
            for s in coll.sources
        )
        cards.append(
            fmt(
                '<section class="card"><h2><a href="{u}">{title}</a> <span class="muted">'
                "{folder}</span></h2><p class='count'>{n} records</p><ul class='files'>{files}"
                '</ul>{notes}<p><a class="button" href="{u}">list</a> '
                '<a class="button" href="{p}">plots</a></p></section>',
                u=url("/list", c=coll.key),
                p=url("/plots", c=coll.key),
                title=coll.kind.title,
                folder=coll.rel or "(top folder)",
                n=f"{len(coll.index):,}",
                files=files,
                notes=join(collection_notes(coll)),
            )
        )
    side = join(
        fmt("<h2>{f}</h2>{b}", f=rel or ".", b=_side_files(paths))
        for rel, paths in sorted(cat.side.items())
    )
    skipped = (
        section("files not shown", join(fmt("<p>{s}</p>", s=s) for s in cat.skipped), open_=False)
        if cat.skipped
        else Markup("")
    )
    body = fmt(
        '<h1>Records</h1><div class="cards">{c}</div>{side}{skipped}',
        c=join(cards),
        side=side,
        skipped=skipped,
    )
    return layout("records", body, root=root)
