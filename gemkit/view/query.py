"""A list page's query (filters, sort, search, page) parsed from a request, and the page it gives."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gemkit.view.records import Column, Kind

#: most records a page may show
MAX_PER_PAGE = 500
#: a search is a literal; longer text is refused
MAX_SEARCH_CHARS = 200


@dataclass
class Query:
    """Filters, search, sort and page of a list request."""

    cats: dict[str, list[str]] = field(default_factory=dict)
    bools: dict[str, bool] = field(default_factory=dict)
    ranges: dict[str, tuple[float | None, float | None]] = field(default_factory=dict)
    text: str = ""
    sort: str | None = None
    desc: bool = False
    page: int = 1
    per: int = 50


@dataclass
class Page:
    """One page of a query: the index rows to show and the counts."""

    rows: list[int]
    matched: int
    total: int
    page: int
    pages: int


def _number(text: str, what: str, problems: list[str]) -> float | None:
    text = text.strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        problems.append(f"{what} must be a number, got {text[:40]!r}")
        return None
    if value != value:  # NaN compares false with everything
        problems.append(f"{what} must be a number, got {text[:40]!r}")
        return None
    return value


def parse_query(
    kind: Kind, params: Mapping[str, Any], files: Sequence[str] = ()
) -> tuple[Query, list[str]]:
    """A `Query` from request parameters (`f.NAME`, `min.NAME`, `max.NAME`, `q`, `sort`,
    `desc`, `page`, `per`), and one message per parameter that made no sense."""
    problems: list[str] = []
    q = Query()
    getall = getattr(params, "getall", None)

    def values(key: str) -> list[str]:
        got = getall(key, []) if getall else ([params[key]] if key in params else [])
        return [str(v) for v in got if str(v) != ""]

    columns = {c.name: c for c in kind.columns}
    if files:
        columns["file"] = Column("file", "file", "cat")
    for name, col in columns.items():
        if col.type == "cat" and values(f"f.{name}"):
            q.cats[name] = values(f"f.{name}")
        elif col.type == "bool" and values(f"f.{name}"):
            v = values(f"f.{name}")[0]
            if v in ("yes", "no"):
                q.bools[name] = v == "yes"
            else:
                problems.append(f"{col.label} must be 'yes' or 'no', got {v[:40]!r}")
        elif col.type == "num":
            lo = _number((values(f"min.{name}") or [""])[0], f"min {col.label}", problems)
            hi = _number((values(f"max.{name}") or [""])[0], f"max {col.label}", problems)
            if lo is not None or hi is not None:
                q.ranges[name] = (lo, hi)
    q.text = (values("q") or [""])[0]
    if len(q.text) > MAX_SEARCH_CHARS:
        problems.append(f"the search text is cut to {MAX_SEARCH_CHARS} characters")
        q.text = q.text[:MAX_SEARCH_CHARS]
    sort = (values("sort") or [""])[0]
    if sort and sort not in columns:
        names = ", ".join(columns)
        problems.append(f"cannot sort by {sort[:40]!r}; sort by one of: {names}")
    elif sort:
        q.sort = sort
    q.desc = (values("desc") or ["0"])[0] in ("1", "yes", "true")
    for key, lo, hi in (("page", 1, 10**12), ("per", 1, MAX_PER_PAGE)):
        raw = (values(key) or [""])[0]
        if not raw:
            continue
        try:
            setattr(q, key, min(hi, max(lo, int(raw))))
        except ValueError:
            problems.append(f"{key} must be a whole number, got {raw[:40]!r}")
    return q, problems
