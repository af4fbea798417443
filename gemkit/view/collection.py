"""A collection: records of one kind from one or more sources, indexed once, read on demand."""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np

from gemkit.view.files import MAX_RECORD_BYTES, ViewError, parse_line, too_large
from gemkit.view.index import ColumnIndex
from gemkit.view.query import Page, Query
from gemkit.view.records import Kind
from gemkit.view.sources import ArrowSource, JsonlSource, Rebuilt, Source


def _natural(label: str) -> tuple[int, float, str]:
    try:
        return (0, float(label), label)
    except ValueError:
        return (1, 0.0, label)


class Collection:
    """The records of one kind in one folder (several files), indexed on first use."""

    def __init__(self, key: str, kind: Kind, folder: Path, rel: str, sources: list[Source]):
        self.key = key
        self.kind = kind
        self.folder = folder
        self.rel = rel
        self.sources = sources
        self.lock = threading.RLock()
        self.index = ColumnIndex(kind.columns)
        self.parsed = 0  # records parsed to build the index
        self.reads = 0  # records read for pages
        self.problem: str | None = None
        self._searches: OrderedDict[tuple[str, int], np.ndarray] = OrderedDict()

    @property
    def files(self) -> list[str]:
        """The sources' paths, relative to the viewer's folder."""
        return [s.rel for s in self.sources]

    def add_source(self, source: Source) -> None:
        """A file that appeared after discovery."""
        with self.lock:
            if source.rel not in self.files:
                self.sources.append(source)

    def refresh(self) -> None:
        """Index what was added since the last call (everything, the first time)."""
        with self.lock:
            try:
                self._scan()
            except Rebuilt:
                for s in self.sources:
                    if isinstance(s, JsonlSource):
                        s.reset()
                self.index = ColumnIndex(self.kind.columns)
                self._searches.clear()
                self._scan()

    def _scan(self) -> None:
        self.problem = None
        for i, source in enumerate(self.sources):
            try:
                scans = (
                    source.scan(self.kind.fields)
                    if isinstance(source, ArrowSource)
                    else source.scan()
                )
                for rec in scans:
                    values = None
                    if rec.raw is not None:
                        self.parsed += 1
                        try:
                            raw = (
                                self.kind.arrow(rec.raw)
                                if isinstance(source, ArrowSource)
                                else rec.raw
                            )
                            values = self.kind.columns_of(raw)
                        except Exception as e:  # noqa: BLE001 - a reader bug must not hide the file
                            rec.error = f"line {rec.line}: cannot be read ({type(e).__name__})"
                    self.index.add(i, rec, values)
            except FileNotFoundError:
                self.problem = f"{source.rel} was removed while the viewer runs"
            except (OSError, ViewError) as e:
                self.problem = f"{source.rel}: {e}"

    def record(self, row: int) -> tuple[dict[str, Any] | None, str | None]:
        """The raw record at index row `row`, or why it cannot be shown."""
        with self.lock:
            if not 0 <= row < len(self.index):
                raise ViewError(f"{self.key} has no record {row}; it has {len(self.index)}")
            source = self.sources[self.index.src[row]]
            pos, size, line = self.index.pos[row], self.index.size[row], self.index.line[row]
        self.reads += 1
        if isinstance(source, ArrowSource):
            return self.kind.arrow(source.row(pos)), None
        if size > MAX_RECORD_BYTES:
            return None, too_large(size, line)
        try:
            data = source.read(pos, size)
        except ViewError as e:
            return None, str(e)
        except OSError as e:
            return None, f"{source.rel} cannot be read ({e.strerror or e})"
        return parse_line(data, line)

    def where(self, row: int) -> str:
        """`file:line` of a record."""
        source = self.sources[self.index.src[row]]
        if isinstance(source, ArrowSource):
            return f"{source.rel} row {self.index.pos[row]}"
        return f"{source.rel}:{self.index.line[row]}"

    def search(self, text: str) -> np.ndarray:
        """A mask of the records whose text holds `text` (any case), cached per text."""
        n = len(self.index)
        key = (text.lower(), n)
        if key in self._searches:
            self._searches.move_to_end(key)
            return self._searches[key]
        arrays = self.index.arrays()
        mask = np.zeros(n, dtype=bool)
        forms = search_forms(text)
        for i, source in enumerate(self.sources):
            sel = np.flatnonzero(arrays["src"] == i)
            if not len(sel):
                continue
            if isinstance(source, ArrowSource):
                rows = np.asarray(source.search(text), dtype=np.int64)
                mask[sel[np.isin(arrays["pos"][sel], rows)]] = True
                continue
            hits = np.asarray(source.search(forms), dtype=np.int64)
            if not len(hits):
                continue
            starts = arrays["pos"][sel]
            k = np.searchsorted(starts, hits, side="right") - 1
            ok = k >= 0
            inside = hits[ok] < starts[k[ok]] + arrays["size"][sel][k[ok]]
            mask[sel[k[ok][inside]]] = True
        self._searches[key] = mask
        while len(self._searches) > 8:
            self._searches.popitem(last=False)
        return mask

    def ordered(self, q: Query, *, unreadable: str | None = None) -> np.ndarray:
        """Every index row that matches `q`, in its sort order (`unreadable`: yes/no)."""
        with self.lock:
            arrays = self.index.arrays()
            mask = np.ones(len(self.index), dtype=bool)
            if unreadable in ("yes", "no"):
                mask &= arrays["bad"] == int(unreadable == "yes")
            for name, labels in q.cats.items():
                if name == "file":
                    codes = [i for i, f in enumerate(self.files) if f in labels]
                    mask &= np.isin(arrays["src"], codes)
                else:
                    codes = [self.index.code(name, label) for label in labels]
                    mask &= np.isin(arrays[f"v:{name}"], [c for c in codes if c >= 0])
            for name, value in q.bools.items():
                mask &= arrays[f"v:{name}"] == int(value)
            for name, (lo, hi) in q.ranges.items():
                values = arrays[f"v:{name}"]
                with np.errstate(invalid="ignore"):
                    if lo is not None:
                        mask &= values >= lo
                    if hi is not None:
                        mask &= values <= hi
            if q.text:
                mask &= self.search(q.text)
            rows = np.flatnonzero(mask)
            if q.sort:
                rows = rows[self._order(q.sort, rows, arrays, q.desc)]
            return rows

    def query(self, q: Query, *, unreadable: str | None = None) -> Page:
        """Filter, search, sort and cut one page (rows are index positions)."""
        rows = self.ordered(q, unreadable=unreadable)
        pages = max(1, -(-len(rows) // q.per))
        page = min(q.page, pages)
        cut = rows[(page - 1) * q.per : page * q.per]
        return Page([int(r) for r in cut], len(rows), len(self.index), page, pages)

    def _order(self, name: str, rows: np.ndarray, arrays: dict, desc: bool) -> np.ndarray:
        """A stable order of `rows` by one column; missing values last either way."""
        if name == "file":
            keys = arrays["src"][rows].astype(float)
            missing = np.zeros(len(rows), dtype=bool)
        else:
            col = self.index.columns[name]
            values = arrays[f"v:{name}"][rows]
            if col.type == "cat":
                labels = self.index.labels[name]
                rank = np.empty(len(labels) + 1, dtype=float)
                order = sorted(range(len(labels)), key=lambda i: _natural(labels[i]))
                rank[np.array(order, dtype=int)] = np.arange(len(labels))
                missing = values < 0
                keys = rank[np.where(missing, len(labels), values)]
            elif col.type == "bool":
                missing = values < 0
                keys = values.astype(float)
            else:
                missing = np.isnan(values)
                keys = values
        keys = np.where(missing, 0.0, -keys if desc else keys)
        return np.lexsort((keys, missing))


def search_forms(text: str) -> list[bytes]:
    """The byte forms a literal takes in a JSONL file: as is, and JSON-escaped two ways."""
    forms = {
        text.encode("utf-8", "replace"),
        json.dumps(text)[1:-1].encode("ascii"),
        json.dumps(text, ensure_ascii=False)[1:-1].encode("utf-8", "replace"),
    }
    return sorted(f for f in forms if f)
