"""A collection's charts, drawn from its column index alone (no record is read)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

import numpy as np

from gemkit.view import plots
from gemkit.view.catalog import Catalog
from gemkit.view.collection import Collection
from gemkit.view.files import ViewError, read_tail
from gemkit.view.markup import Markup, fmt, join
from gemkit.view.pages.parts import crumbs, layout, url

#: how much of the end of progress.log the chart reads (a page never reads a whole log)
PROGRESS_TAIL_BYTES = 4 * 2**20


def _mean(values: np.ndarray) -> float:
    """The mean of the known values (NaN when none is known)."""
    known = values[np.isfinite(values)]
    return float(known.mean()) if len(known) else float("nan")


def _by_label(coll: Collection, name: str) -> list[tuple[str, np.ndarray]]:
    arrays = coll.index.arrays()
    codes = arrays[f"v:{name}"]
    labels = coll.index.labels[name]
    order = sorted(range(len(labels)), key=lambda i: labels[i])
    return [(labels[i], np.flatnonzero(codes == i)) for i in order]


def _progress_log(cat: Catalog, coll: Collection) -> list[tuple[float, str]]:
    events = []
    for p in cat.side.get(coll.rel, []):
        if p.name != "progress.log":
            continue
        try:
            data, size = read_tail(p, PROGRESS_TAIL_BYTES)
        except (OSError, ViewError):
            continue
        if len(data) < size:  # a tail: drop the first, cut line
            data = data.partition(b"\n")[2]
        for line in data.decode("utf-8", errors="replace").splitlines():
            stamp, _, rest = line.partition(" ")
            try:
                t = dt.datetime.fromisoformat(stamp).timestamp()
            except ValueError:
                continue
            if ": kept" in rest:
                events.append((t, "kept"))
            elif ": rejected" in rest:
                events.append((t, "rejected"))
    return events


def plots_page(cat: Catalog, coll: Collection) -> Markup:
    """Charts of a collection, drawn from its column index (no record is read)."""
    coll.refresh()
    arrays = coll.index.arrays()
    charts: list[Markup] = []
    name = coll.kind.name
    if name in ("episodes", "turns"):
        groups = _by_label(coll, "env_id")
        if name == "episodes":
            rates, notes = [], []
            for _, rows in groups:
                s = arrays["v:success"][rows]
                known = s[s >= 0]
                rates.append(float(known.mean()) if len(known) else float("nan"))
                notes.append(f"(n={len(rows):,})")
            charts.append(
                plots.bars(
                    "success rate by env",
                    [g for g, _ in groups],
                    rates,
                    notes=notes,
                    max_value=1.0,
                    percent=True,
                )
            )
        rewards = [_mean(arrays["v:reward"][rows]) for _, rows in groups]
        charts.append(plots.bars("mean reward by env", [g for g, _ in groups], rewards))
        if name == "episodes":
            charts.append(plots.histogram("turns per episode", list(arrays["v:turns"])))
            charts.append(plots.histogram("tool calls per episode", list(arrays["v:tool_calls"])))
            series: list[tuple[str, Sequence[float], Sequence[float]]] = []
            for label, rows in groups:
                s = arrays["v:success"][rows].astype(float)
                s[s < 0] = 0
                series.append(
                    (
                        label,
                        list(range(1, len(rows) + 1)),
                        list(np.cumsum(s) / np.arange(1, len(rows) + 1)),
                    )
                )
            charts.append(
                plots.lines(
                    "progress: success rate as episodes finished",
                    series,
                    x_label="episodes finished (file order)",
                    y_label="success rate",
                    y_max=1.0,
                )
            )
        else:
            charts.append(plots.histogram("reward per turn", list(arrays["v:reward"])))
    elif name == "qa":
        groups = _by_label(coll, "stage")
        charts.append(
            plots.bars(
                "records by stage (kept, or where rejected)",
                [g for g, _ in groups],
                [float(len(r)) for _, r in groups],
            )
        )
        charts.append(plots.histogram("injects per record", list(arrays["v:n_inject"])))
        charts.append(
            plots.histogram("closed-book solvers correct", list(arrays["v:closed_book_correct"]))
        )
        k = arrays["v:k"]
        ok = np.isfinite(k)
        if ok.any():
            order = np.argsort(k[ok], kind="stable")
            kept_code = coll.index.code("stage", "kept")
            kept = (arrays["v:stage"][ok] == kept_code)[order].astype(float)
            charts.append(
                plots.lines(
                    "progress: records kept as seeds were tried",
                    [("kept", list(k[ok][order] + 1), list(np.cumsum(kept)))],
                    x_label="seeds tried",
                    y_label="kept",
                )
            )
    elif name == "tasks":
        groups = _by_label(coll, "level")
        groups.sort(key=lambda g: float(g[0]) if g[0].lstrip("-").isdigit() else 0.0)
        charts.append(
            plots.dots(
                "valid fraction by level (log scale)",
                [(f"level {g}", list(arrays["v:valid_fraction"][r])) for g, r in groups],
                log=True,
                y_label="valid answers / all answers",
            )
        )
        charts.append(
            plots.bars(
                "kept tasks by level",
                [f"level {g}" for g, _ in groups],
                [float(len(r)) for _, r in groups],
            )
        )
        charts.append(plots.histogram("pass@k passes", list(arrays["v:passes"])))
        events = _progress_log(cat, coll)
        if events:
            series = []
            for what in ("kept", "rejected"):
                ts = [t for t, w in events if w == what]
                series.append((what, ts, list(range(1, len(ts) + 1))))
            charts.append(
                plots.lines(
                    "progress over time (progress.log)",
                    series,
                    x_label="time",
                    y_label="tasks",
                    x_is_time=True,
                )
            )
    body = fmt(
        '<h1>{t} <span class="muted">{f}</span> <a class="button small" href="{u}">list</a></h1>'
        '<p class="muted">{n} records</p><div class="plots">{c}</div>',
        t=f"plots: {coll.kind.title}",
        f=coll.rel,
        u=url("/list", c=coll.key),
        n=f"{len(coll.index):,}",
        c=join(charts),
    )
    return layout(f"plots: {coll.kind.title}", body, root=str(cat.allowed), crumbs=crumbs(coll))
