"""Small SVG charts drawn on the server: bars, histograms, lines and dots (no script, no fetch).

Each function takes plain numbers and labels and returns inline SVG `Markup`; every label is
escaped, so an env id or a category from a record is text in the chart, never markup.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Sequence

import numpy as np

from gemkit.view.markup import Markup, fmt, join

WIDTH = 640
#: the series colours (colour-blind safe, Okabe-Ito)
COLOURS = ("#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#f0e442")


def _svg(height: int, title: str, body: Markup) -> Markup:
    return fmt(
        '<figure class="plot"><svg viewBox="0 0 {w} {h}" width="100%" role="img" '
        'aria-label="{title}" xmlns="http://www.w3.org/2000/svg">'
        '<text x="8" y="18" class="plot-title">{title}</text>{body}</svg></figure>',
        w=WIDTH,
        h=height,
        title=title,
        body=body,
    )


def _n(value: float) -> str:
    """A compact number for an axis or a bar."""
    if value == 0:
        return "0"
    if abs(value) >= 1e5 or abs(value) < 1e-2:
        return f"{value:.2g}"
    if float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:.3g}"


def empty(title: str, why: str) -> Markup:
    """A chart frame that says why there is nothing to draw."""
    return _svg(60, title, fmt('<text x="8" y="44" class="plot-note">{why}</text>', why=why))


def bars(
    title: str,
    labels: Sequence[str],
    values: Sequence[float],
    *,
    notes: Sequence[str] | None = None,
    max_value: float | None = None,
    percent: bool = False,
) -> Markup:
    """Horizontal bars, one per label (labels on the left, value at the bar's end)."""
    if not labels:
        return empty(title, "no values")
    row, top, left = 22, 30, min(300, 16 + 7 * max(len(str(x)) for x in labels))
    top_value = max_value if max_value is not None else max([*values, 0.0]) or 1.0
    span = WIDTH - left - 90
    parts = []
    for i, (label, value) in enumerate(zip(labels, values, strict=True)):
        y = top + i * row
        w = 0 if not math.isfinite(value) else max(0.0, value / top_value * span)
        shown = "–" if not math.isfinite(value) else (f"{value:.0%}" if percent else _n(value))
        note = f" {notes[i]}" if notes else ""
        parts.append(
            fmt(
                '<text x="{lx}" y="{ty}" class="plot-label" text-anchor="end">{label}</text>'
                '<rect x="{x}" y="{y}" width="{w}" height="{h}" fill="{c}"><title>{label}: '
                "{shown}{note}</title></rect>"
                '<text x="{vx}" y="{ty}" class="plot-value">{shown}{note}</text>',
                lx=left - 6,
                ty=y + 14,
                label=str(label)[:48],
                x=left,
                y=y + 2,
                w=f"{w:.1f}",
                h=row - 6,
                c=COLOURS[0],
                shown=shown,
                note=note,
                vx=f"{left + w + 4:.1f}",
            )
        )
    return _svg(top + len(labels) * row + 8, title, join(parts))


def _bins(v: np.ndarray) -> tuple[np.ndarray, np.ndarray, bool]:
    """Counts and edges: one bin per whole number over a short range, else up to 30 bins;
    one bin when the values are too close or too far apart for float bins."""
    lo, hi = float(v.min()), float(v.max())
    whole = bool(np.all(v == np.round(v))) and max(abs(lo), abs(hi)) < 2**50
    try:
        with np.errstate(all="ignore"):  # a range past float's reach is caught below
            if whole and hi - lo <= 40:
                edges = np.arange(lo - 0.5, hi + 1.5)
            else:
                bins = min(30, max(5, int(math.sqrt(len(v)))))
                edges = np.histogram_bin_edges(v, bins=bins)
            counts, edges = np.histogram(v, bins=edges)
        if len(counts):
            return counts, edges, whole
    except (ValueError, OverflowError):
        pass
    return np.array([len(v)]), np.array([lo, hi]), False


def histogram(title: str, values: Sequence[float], *, unit: str = "") -> Markup:
    """A histogram of counts (integer bins when the values are whole numbers)."""
    v = np.asarray([x for x in values if math.isfinite(x)], dtype=float)
    if not len(v):
        return empty(title, "no values")
    counts, edges, whole = _bins(v)
    height, top, bottom, left = 210, 40, 34, 44
    plot_w, plot_h = WIDTH - left - 12, height - top - bottom
    peak = max(1, int(counts.max()))
    bw = plot_w / len(counts)
    parts = [
        fmt(
            '<line x1="{x}" y1="{y0}" x2="{x}" y2="{y1}" class="plot-axis"/>'
            '<text x="{tx}" y="{ty}" class="plot-label" text-anchor="end">{peak}</text>'
            '<text x="{tx}" y="{y1}" class="plot-label" text-anchor="end">0</text>',
            x=left,
            y0=top,
            y1=top + plot_h,
            tx=left - 4,
            ty=top + 10,
            peak=peak,
        )
    ]
    for i, c in enumerate(counts):
        h = c / peak * plot_h
        mid = (edges[i] + edges[i + 1]) / 2
        label = _n(mid) if whole else f"{_n(edges[i])}–{_n(edges[i + 1])}"
        parts.append(
            fmt(
                '<rect x="{x}" y="{y}" width="{w}" height="{h}" fill="{col}">'
                "<title>{label}{unit}: {c}</title></rect>{count}",
                x=f"{left + i * bw + 1:.1f}",
                y=f"{top + plot_h - h:.1f}",
                w=f"{max(1.0, bw - 2):.1f}",
                h=f"{h:.1f}",
                col=COLOURS[1],
                label=label,
                unit=unit,
                c=int(c),
                count=fmt(
                    '<text x="{x}" y="{y}" class="plot-value" text-anchor="middle">{c}</text>',
                    x=f"{left + (i + 0.5) * bw:.1f}",
                    y=f"{top + plot_h - h - 3:.1f}",
                    c=f"{int(c):,}",
                )
                if c and len(counts) <= 24
                else Markup(""),
            )
        )
    step = max(1, len(counts) // 10)
    for i in range(0, len(counts), step):
        mid = (edges[i] + edges[i + 1]) / 2
        parts.append(
            fmt(
                '<text x="{x}" y="{y}" class="plot-label" text-anchor="middle">{t}</text>',
                x=f"{left + (i + 0.5) * bw:.1f}",
                y=top + plot_h + 14,
                t=_n(mid),
            )
        )
    parts.append(
        fmt(
            '<text x="{x}" y="{y}" class="plot-note" text-anchor="middle">{n} records{u}</text>',
            x=left + plot_w / 2,
            y=height - 4,
            n=f"{len(v):,}",
            u=f" ({unit.strip()})" if unit else "",
        )
    )
    return _svg(height, title, join(parts))


def lines(
    title: str,
    series: Sequence[tuple[str, Sequence[float], Sequence[float]]],
    *,
    x_label: str,
    y_label: str,
    y_max: float | None = None,
    x_is_time: bool = False,
    plot_h: int = 150,
) -> Markup:
    """Line chart of (name, xs, ys) series; the legend sits under the x axis."""
    series = [(n, list(xs), list(ys)) for n, xs, ys in series if len(xs)]
    if not series:
        return empty(title, "no values")
    xs_all = [x for _, xs, _ in series for x in xs]
    ys_all = [y for _, _, ys in series for y in ys if math.isfinite(y)]
    x0, x1 = min(xs_all), max(xs_all)
    y0, y1 = 0.0, y_max if y_max is not None else (max(ys_all, default=1.0) or 1.0)
    x1 = x1 if x1 > x0 else x0 + 1
    per_row = 2
    legend_rows = 0 if len(series) == 1 else -(-len(series) // per_row)
    top, left, right = 46, 50, 14
    plot_w = WIDTH - left - right
    axis_y = top + plot_h
    height = axis_y + 44 + 18 * legend_rows

    def px(x: float) -> float:
        return left + (x - x0) / (x1 - x0) * plot_w

    def py(y: float) -> float:
        return top + plot_h - (min(y, y1) - y0) / (y1 - y0) * plot_h

    parts = [
        fmt(
            '<line x1="{l}" y1="{b}" x2="{r}" y2="{b}" class="plot-axis"/>'
            '<line x1="{l}" y1="{t}" x2="{l}" y2="{b}" class="plot-axis"/>'
            '<line x1="{l}" y1="{t}" x2="{r}" y2="{t}" class="plot-grid"/>'
            '<text x="{lx}" y="{ty}" class="plot-label" text-anchor="end">{ytop}</text>'
            '<text x="{lx}" y="{b}" class="plot-label" text-anchor="end">0</text>'
            '<text x="{cx}" y="{xy}" class="plot-note" text-anchor="middle">{xl}</text>'
            '<text x="8" y="36" class="plot-note">{yll}</text>',
            l=left,
            r=left + plot_w,
            t=top,
            b=axis_y,
            lx=left - 4,
            ty=top + 4,
            ytop=_n(y1),
            cx=left + plot_w / 2,
            xy=axis_y + 30,
            xl=x_label,
            yll=f"↑ {y_label}",
        )
    ]
    for edge, anchor in ((x0, "start"), (x1, "end")):
        parts.append(
            fmt(
                '<text x="{x}" y="{y}" class="plot-label" text-anchor="{a}">{t}</text>',
                x=f"{px(edge):.1f}",
                y=axis_y + 14,
                a=anchor,
                t=_clock(edge) if x_is_time else _n(edge),
            )
        )
    col_w = plot_w / per_row
    for i, (name, xs, ys) in enumerate(series):
        colour = COLOURS[i % len(COLOURS)]
        step = max(1, len(xs) // 2000)  # a line of 2,000 points looks the same as 100,000
        points = " ".join(
            f"{px(x):.1f},{py(y):.1f}"
            for x, y in list(zip(xs, ys, strict=True))[::step]
            if math.isfinite(y)
        )
        parts.append(
            fmt(
                '<polyline points="{p}" fill="none" stroke="{c}" stroke-width="2" '
                'stroke-linejoin="round"><title>{name}</title></polyline>',
                p=points,
                c=colour,
                name=str(name)[:60],
            )
        )
        if legend_rows:
            lx = left + (i % per_row) * col_w
            ly = axis_y + 58 + 18 * (i // per_row)
            parts.append(
                fmt(
                    '<rect x="{x}" y="{y}" width="10" height="10" fill="{c}"/>'
                    '<text x="{tx}" y="{ty}" class="plot-label">{name}</text>',
                    x=f"{lx:.1f}",
                    y=ly - 9,
                    c=colour,
                    tx=f"{lx + 14:.1f}",
                    ty=ly,
                    name=str(name)[:44],
                )
            )
    return _svg(height, title, join(parts))


def _clock(seconds: float) -> str:
    return dt.datetime.fromtimestamp(seconds).strftime("%m-%d %H:%M:%S")


def dots(
    title: str,
    groups: Sequence[tuple[str, Sequence[float]]],
    *,
    log: bool = False,
    y_label: str = "",
) -> Markup:
    """One column of dots per group with its median as a bar (a log scale for fractions)."""
    groups = [(g, [v for v in vs if math.isfinite(v) and (v > 0 or not log)]) for g, vs in groups]
    groups = [(g, vs) for g, vs in groups if vs]
    if not groups:
        return empty(title, "no values")
    tf = (lambda v: math.log10(v)) if log else (lambda v: v)
    all_v = [tf(v) for _, vs in groups for v in vs]
    lo, hi = min(all_v), max(all_v)
    if log:
        lo, hi = math.floor(lo), max(math.ceil(hi), math.floor(lo) + 1)
    else:
        lo, hi = min(0.0, lo), hi if hi > lo else lo + 1
    height, top, bottom, left = 230, 44, 34, 56
    plot_w, plot_h = WIDTH - left - 12, height - top - bottom
    col_w = plot_w / len(groups)

    def py(v: float) -> float:
        return top + plot_h - (tf(v) - lo) / (hi - lo) * plot_h

    parts = [
        fmt(
            '<line x1="{l}" y1="{t}" x2="{l}" y2="{b}" class="plot-axis"/>',
            l=left,
            t=top,
            b=top + plot_h,
        )
    ]
    ticks = range(int(lo), int(hi) + 1) if log else (lo, hi)
    for t in ticks:
        y = top + plot_h - (t - lo) / (hi - lo) * plot_h
        parts.append(
            fmt(
                '<text x="{x}" y="{y}" class="plot-label" text-anchor="end">{t}</text>'
                '<line x1="{l}" y1="{y}" x2="{r}" y2="{y}" class="plot-grid"/>',
                x=left - 4,
                y=f"{y + 4:.1f}",
                t=f"1e{t}" if log else _n(t),
                l=left,
                r=left + plot_w,
            )
        )
    for i, (name, vs) in enumerate(groups):
        cx = left + (i + 0.5) * col_w
        med = float(np.median(vs))
        parts.append(
            fmt(
                '<line x1="{a}" y1="{y}" x2="{b}" y2="{y}" stroke="{c}" stroke-width="3">'
                "<title>{name}: median {m} of {n}</title></line>"
                '<text x="{cx}" y="{ly}" class="plot-label" text-anchor="middle">{name}</text>',
                a=f"{cx - col_w * 0.3:.1f}",
                b=f"{cx + col_w * 0.3:.1f}",
                y=f"{py(med):.1f}",
                c=COLOURS[5],
                name=str(name)[:20],
                m=_n(med),
                n=len(vs),
                cx=f"{cx:.1f}",
                ly=top + plot_h + 14,
            )
        )
        step = max(1, len(vs) // 400)
        for j, v in enumerate(vs[::step]):
            jitter = ((j * 0.618) % 1 - 0.5) * col_w * 0.4
            parts.append(
                fmt(
                    '<circle cx="{x}" cy="{y}" r="3" fill="{c}" fill-opacity="0.6">'
                    "<title>{v}</title></circle>",
                    x=f"{cx + jitter:.1f}",
                    y=f"{py(v):.1f}",
                    c=COLOURS[0],
                    v=_n(v),
                )
            )
    if y_label:
        parts.append(fmt('<text x="8" y="36" class="plot-note">↑ {t}</text>', t=y_label))
    return _svg(height, title, join(parts))


__all__ = ["bars", "dots", "empty", "histogram", "lines"]
