"""The records under one folder, read from disk on demand.

`discover(root)` finds what gemkit wrote under a folder (JSONL files and `datasets` exports)
and groups them into collections: the episodes of a folder, its QA records (kept and
rejected), its task tuples. A collection is indexed lazily, once: per record, a byte offset
(or a row number, for Arrow) and the few values the list filters on, kept in flat arrays
(`ColumnIndex`, under 100 bytes a record), never the records. A page reads only the records
it shows. Files that grow (a run still writing) are indexed from where the index stopped.

Everything here reads; nothing opens a file for writing. Paths come only from walking the
folder; a record or a request never names a file that is opened without a check that it
lies under the folder.
"""

from __future__ import annotations

import errno
import json
import mmap
import os
import sqlite3
import stat
import threading
from array import array
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from gemkit.errors import GemkitError
from gemkit.view.records import KINDS, Column, Kind, sniff_kind

#: a line longer than this is listed as too large, not parsed (parsing holds ~10x its size)
MAX_RECORD_BYTES = 64 * 1024 * 1024
#: how much of a file's first line is read to tell its kind
SNIFF_BYTES = 4 * 1024 * 1024
#: how deep, and over how many entries, discovery looks
MAX_DEPTH = 6
MAX_ENTRIES = 20_000
#: most records a page may show
MAX_PER_PAGE = 500
#: bytes a search lowers and scans at a time
SEARCH_CHUNK = 8 * 1024 * 1024
#: a search is a literal; longer text is refused
MAX_SEARCH_CHARS = 200


class ViewError(GemkitError):
    """Something the viewer cannot show; the message says what and why."""


# -- sources --------------------------------------------------------------------------------


@dataclass
class Scanned:
    """One record found by a scan: where it is, its parsed fields or why it cannot be read."""

    pos: int
    size: int
    line: int
    raw: dict[str, Any] | None
    error: str | None = None


class Rebuilt(Exception):
    """A file shrank or was replaced: its index must be built again."""


def too_large(size: int, line: int) -> str:
    """The message for a record the viewer does not parse."""
    limit = MAX_RECORD_BYTES // 2**20
    return f"line {line} is {size / 2**20:.0f} MB, over the viewer's {limit} MB limit for a record"


def parse_line(data: bytes, line: int) -> tuple[dict[str, Any] | None, str | None]:
    """A JSONL line as a dict, or a one-line message saying why it is not one."""
    if len(data) > MAX_RECORD_BYTES:
        return None, too_large(len(data), line)
    try:
        value = json.loads(data)
    except UnicodeDecodeError:
        return None, f"line {line} is not UTF-8 text"
    except json.JSONDecodeError as e:
        return None, f"line {line} is not valid JSON ({e.msg} at column {e.colno})"
    except (ValueError, RecursionError) as e:  # nesting deeper than the parser allows
        return None, f"line {line} is not valid JSON ({type(e).__name__})"
    if not isinstance(value, dict):
        return None, f"line {line} is JSON but not an object (a {type(value).__name__})"
    return value, None


class JsonlSource:
    """One JSONL file: scanned once from where the last scan stopped, read by byte range."""

    def __init__(self, path: Path, rel: str, role: str = ""):
        self.path = path
        self.rel = rel
        self.role = role
        self.end = 0  # bytes indexed: every complete line before this offset
        self.lines = 0
        self.torn = 0  # bytes after the last newline (a run writing, or killed mid-line)
        self._ident: tuple[int, int] | None = None
        # discovery checked where a link leads; a file swapped for a link later is not followed
        self._nofollow = 0 if path.is_symlink() else getattr(os, "O_NOFOLLOW", 0)

    def open(self) -> BinaryIO:
        """The file, for reading (a link that replaced it since discovery is refused, and so
        is anything not a regular file: a FIFO would block the open and the read)."""
        return open_plain(self.path, self.rel, self._nofollow)

    def reset(self) -> None:
        """Forget what was scanned (the next scan starts at the top)."""
        self.end, self.lines, self.torn, self._ident = 0, 0, 0, None

    def scan(self) -> Iterator[Scanned]:
        """The complete lines added since the last scan (raises `Rebuilt` if it shrank)."""
        st = self.path.stat()
        ident = (st.st_dev, st.st_ino)
        if self._ident is not None and (ident != self._ident or st.st_size < self.end):
            raise Rebuilt(self.rel)
        self._ident = ident
        if st.st_size == self.end:
            return
        with self.open() as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            pos = self.end
            while True:
                nl = mm.find(b"\n", pos)
                if nl < 0:
                    break
                self.lines += 1
                size = nl - pos
                if size > 64 or mm[pos:nl].strip():  # blank lines are not records
                    if size > MAX_RECORD_BYTES:
                        raw, error = None, too_large(size, self.lines)
                    else:
                        raw, error = parse_line(mm[pos:nl], self.lines)
                    yield Scanned(pos, size, self.lines, raw, error)
                pos = nl + 1
                self.end = pos
            self.torn = len(mm) - pos

    def read(self, pos: int, size: int) -> bytes:
        """The bytes of one record."""
        with self.open() as f:
            f.seek(pos)
            return f.read(size)

    def search(self, forms: Sequence[bytes]) -> list[int]:
        """Byte offsets of the lines (up to the indexed end) holding any of `forms`, compared
        in lower case (ASCII), one hit per line."""
        if self.end == 0 or not forms:
            return []
        forms = [f.lower() for f in forms if f]
        overlap = max(len(f) for f in forms) - 1
        hits: set[int] = set()
        with self.open() as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            start = 0
            while start < self.end:
                stop = min(self.end, start + SEARCH_CHUNK + overlap)
                chunk = mm[start:stop].lower()  # bytes.lower() and find() run at memory speed
                for form in forms:
                    at = chunk.find(form)
                    while at >= 0:
                        line = mm.rfind(b"\n", 0, start + at) + 1
                        hits.add(line)
                        nl = chunk.find(b"\n", at)
                        at = -1 if nl < 0 else chunk.find(form, nl + 1)
                start += SEARCH_CHUNK
        return sorted(hits)


def open_plain(path: Path, rel: str, nofollow: int | None = None) -> BinaryIO:
    """`path` opened for reading, if it is a regular file; a link is refused unless
    `nofollow` is 0 (discovery checked where it leads). Opened without blocking, so a FIFO
    put in a file's place is refused instead of hanging the viewer."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)
    flags |= getattr(os, "O_NOFOLLOW", 0) if nofollow is None else nofollow
    try:
        fd = os.open(path, flags)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise ViewError(f"{rel} was replaced by a link; it is not followed") from None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ViewError(f"{rel} is not a regular file; it is not read")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def is_plain(path: Path) -> bool:
    """Whether `path` itself (not where a link leads) is a regular file."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def read_plain(path: Path, rel: str, limit: int) -> bytes:
    """The first `limit` bytes of a regular file that is not a link."""
    with open_plain(path, rel) as f:
        return f.read(limit)


def read_tail(path: Path, limit: int = 64 * 1024) -> tuple[bytes, int]:
    """The last `limit` bytes of a side file and its size (a link is followed only if it was
    one at discovery, which checked where it leads; a FIFO or device is refused)."""
    with open_plain(path, path.name, 0 if path.is_symlink() else None) as f:
        size = os.fstat(f.fileno()).st_size
        f.seek(max(0, size - limit))
        return f.read(limit), size


#: how much of a datasets folder's JSON files is read
DATASET_JSON_BYTES = 16 * 1024 * 1024


def dataset_files(folder: Path) -> list[Path]:
    """The Arrow files of a `save_to_disk` folder, each checked to be a regular file in that
    folder (not a link: it could lead anywhere)."""
    rel = f"{folder.name}/state.json"
    try:
        state = json.loads(read_plain(folder / "state.json", rel, DATASET_JSON_BYTES))
        names = [d["filename"] for d in state["_data_files"]]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ViewError(f"{folder.name}/state.json is not a datasets state file ({e})") from e
    out = []
    for name in names:
        p = folder / str(name)
        if not isinstance(name, str) or "/" in name or "\\" in name or name.startswith("."):
            raise ViewError(f"{folder.name}/state.json names {name!r}, not a file in its folder")
        if not is_plain(p) or p.parent != folder:
            raise ViewError(f"{folder.name}/{name} is a link or not a regular file; it is not read")
        out.append(p)
    return out


class ArrowSource:
    """The rows of a `datasets` folder, memory-mapped (nothing is loaded until read)."""

    def __init__(self, folder: Path, rel: str):
        self.path = folder
        self.rel = rel
        self.role = ""
        self.torn = 0
        self._tables: list[Any] | None = None
        self._done = False

    def tables(self) -> list[Any]:
        """The Arrow tables, opened once."""
        if self._tables is None:
            import pyarrow as pa  # only a datasets folder needs pyarrow

            tables = []
            for p in dataset_files(self.path):
                try:
                    with open_plain(p, f"{self.rel}/{p.name}") as f:
                        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
                    tables.append(pa.ipc.open_stream(pa.py_buffer(mm)).read_all())
                except (OSError, ValueError, pa.ArrowInvalid) as e:
                    raise ViewError(
                        f"{self.rel}: {p.name} is not a readable Arrow file ({e})"
                    ) from e
            self._tables = tables
        return self._tables

    def schema(self) -> list[str]:
        """Column names."""
        tables = self.tables()
        return list(tables[0].schema.names) if tables else []

    def scan(self, fields: Sequence[str] = ()) -> Iterator[Scanned]:
        """Every row, once (a saved dataset does not grow), with only `fields` read."""
        if self._done:
            return
        row = 0
        for table in self.tables():
            names = [f for f in fields if f in table.schema.names]
            for batch in table.select(names).to_batches(max_chunksize=4096):
                for raw in batch.to_pylist():
                    yield Scanned(row, 1, row + 1, raw)
                    row += 1
        self._done = True

    def row(self, row: int) -> dict[str, Any]:
        """One whole row."""
        for table in self.tables():
            if row < table.num_rows:
                return table.slice(row, 1).to_pylist()[0]
            row -= table.num_rows
        raise ViewError(f"{self.rel} has no row {row}")

    def search(self, text: str) -> list[int]:
        """Rows where a text column contains `text` (case-insensitive)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        rows: list[int] = []
        start = 0
        for table in self.tables():
            hit = None
            for name in table.schema.names:
                col = table[name]
                if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
                    m = pc.match_substring(col, text, ignore_case=True).fill_null(False)
                    hit = m if hit is None else pc.or_(hit, m)
            if hit is not None:
                rows += [start + i for i in np.flatnonzero(hit.to_numpy(zero_copy_only=False))]
            start += table.num_rows
        return rows


Source = JsonlSource | ArrowSource


# -- the column index -----------------------------------------------------------------------


class ColumnIndex:
    """Per record: where it is and its list values, in flat typed arrays (no records kept).

    `cat` values are codes into a label list, `num` values floats (NaN when missing), `bool`
    values -1/0/1.
    """

    def __init__(self, columns: Sequence[Column]):
        self.columns = {c.name: c for c in columns}
        self.src = array("h")
        self.pos = array("q")
        self.size = array("q")
        self.line = array("q")
        self.bad = array("b")
        self.values = {
            c.name: array({"cat": "i", "num": "d", "bool": "b"}[c.type]) for c in columns
        }
        self.labels: dict[str, list[str]] = {c.name: [] for c in columns if c.type == "cat"}
        self._codes: dict[str, dict[str, int]] = {name: {} for name in self.labels}
        self._arrays: dict[str, np.ndarray] = {}
        self._arrays_len = -1

    def __len__(self) -> int:
        return len(self.pos)

    def code(self, name: str, label: str) -> int:
        """The code of a label of a `cat` column (-1: unseen)."""
        return self._codes[name].get(label, -1)

    def add(self, src: int, rec: Scanned, values: Mapping[str, Any] | None) -> None:
        """Append one record."""
        self.src.append(src)
        self.pos.append(rec.pos)
        self.size.append(rec.size)
        self.line.append(rec.line)
        self.bad.append(values is None)
        values = values or {}
        for name, col in self.columns.items():
            v = values.get(name)
            if col.type == "num":
                self.values[name].append(float("nan") if v is None else float(v))
            elif col.type == "bool":
                self.values[name].append(-1 if v is None else int(bool(v)))
            elif v is None:
                self.values[name].append(-1)
            else:
                codes = self._codes[name]
                label = str(v)[:200]
                if label not in codes:
                    codes[label] = len(codes)
                    self.labels[name].append(label)
                self.values[name].append(codes[label])

    def arrays(self) -> dict[str, np.ndarray]:
        """Numpy copies of every array (rebuilt only after the index grew)."""
        if self._arrays_len != len(self):
            out = {k: np.array(getattr(self, k)) for k in ("src", "pos", "size", "line", "bad")}
            out.update({f"v:{k}": np.array(v) for k, v in self.values.items()})
            self._arrays, self._arrays_len = out, len(self)
        return self._arrays

    @property
    def nbytes(self) -> int:
        """Bytes held by the index arrays (labels aside)."""
        arrays = [self.src, self.pos, self.size, self.line, self.bad, *self.values.values()]
        return sum(a.itemsize * len(a) for a in arrays)


# -- queries --------------------------------------------------------------------------------


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


def _natural(label: str) -> tuple[int, float, str]:
    try:
        return (0, float(label), label)
    except ValueError:
        return (1, 0.0, label)


# -- collections ----------------------------------------------------------------------------


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


# -- documents and databases next to the records ----------------------------------------------


class Corpus:
    """`corpus.jsonl` documents by id, through a sorted array of id hashes and offsets."""

    def __init__(self, source: JsonlSource):
        self.source = source
        self.lock = threading.Lock()
        self._hash = np.zeros(0, dtype=np.int64)
        self._at = np.zeros((0, 2), dtype=np.int64)

    def _build(self) -> None:
        hashes, at = array("q"), array("q")
        for rec in self.source.scan():
            if rec.raw is not None and "id" in rec.raw:
                hashes.append(hash(str(rec.raw["id"])))
                at.extend((rec.pos, rec.size))
        if hashes:
            h = np.concatenate([self._hash, np.array(hashes)])
            a = np.concatenate([self._at, np.array(at).reshape(-1, 2)])
            order = np.argsort(h, kind="stable")
            self._hash, self._at = h[order], a[order]

    def get(self, doc_id: str) -> dict[str, Any] | None:
        """The document with this id, or None."""
        with self.lock:
            try:
                self._build()
            except Rebuilt:
                self.source.reset()
                self._hash = np.zeros(0, dtype=np.int64)
                self._at = np.zeros((0, 2), dtype=np.int64)
                self._build()
            h = hash(str(doc_id))
            i = int(np.searchsorted(self._hash, h))
            while i < len(self._hash) and self._hash[i] == h:
                raw, _ = parse_line(self.source.read(*self._at[i]), 0)
                if raw is not None and str(raw.get("id")) == str(doc_id):
                    return raw
                i += 1
        return None


def inside(root: Path, path: Path) -> bool:
    """Whether `path`, links resolved, lies under `root`."""
    try:
        return path.resolve().is_relative_to(root.resolve())
    except (OSError, RuntimeError):  # a link loop
        return False


def find_database(allowed: Path, folder: Path, rel: str) -> tuple[Path | None, str]:
    """The database a task record names, looked up next to it (or one folder up, for a
    `datasets` export) and only under `allowed`; else None and why."""
    candidates = [base / rel for base in (folder, folder.parent)]
    under = [p for p in candidates if inside(allowed, p)]
    for p in under:
        if p.is_file():
            return p, ""
    if not under:
        return None, f"the database path {rel!r} leads outside the viewer's folder; not opened"
    return None, f"the database {rel} is not in this folder (deleted or moved)"


def database_summary(path: Path, sample: int = 5) -> dict[str, Any]:
    """Tables of a SQLite file opened read-only: columns, row count and the first rows."""
    uri = f"{path.resolve().as_uri()}?mode=ro&immutable=1"
    try:
        conn = sqlite3.connect(uri, uri=True)
    except sqlite3.Error as e:
        raise ViewError(f"cannot open the database {path.name}: {e}") from e
    try:
        names = [
            r[0]
            for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type='table' ORDER BY name"
            ).fetchall()
        ]
        tables = []
        for name in names[:50]:
            q = '"' + str(name).replace('"', '""') + '"'
            cols = [r[1] for r in conn.execute(f"PRAGMA table_info({q})").fetchall()]
            count = conn.execute(f"SELECT count(*) FROM {q}").fetchone()[0]
            rows = conn.execute(f"SELECT * FROM {q} LIMIT {int(sample)}").fetchall()
            tables.append({"name": name, "columns": cols, "rows": count, "sample": rows})
        return {"tables": tables, "more_tables": max(0, len(names) - 50)}
    except sqlite3.Error as e:
        raise ViewError(f"cannot read the database {path.name}: {e}") from e
    finally:
        conn.close()


# -- discovery ------------------------------------------------------------------------------


@dataclass
class Catalog:
    """What a folder holds: collections, side files (summaries, settings, logs), problems."""

    root: Path
    allowed: Path  # what the viewer may open: the folder, or the one file it was given
    collections: dict[str, Collection] = field(default_factory=dict)
    corpora: dict[str, Corpus] = field(default_factory=dict)  # folder rel -> corpus
    side: dict[str, list[Path]] = field(default_factory=dict)  # folder rel -> side files
    skipped: list[str] = field(default_factory=list)  # files seen, not shown, and why

    def collection(self, key: str) -> Collection:
        """A collection by key; an unknown key names the known ones."""
        if key not in self.collections:
            known = ", ".join(self.collections) or "none"
            raise ViewError(f"no record collection {key[:80]!r} here; known: {known}")
        return self.collections[key]


#: kept records first, then the others, rejected ones and failed episodes last
ROLE_ORDER = {"kept": 0, "": 1, "rejected": 2, "errors": 3}
#: files shown beside the records of their folder: figures, the run's manifest, logs, and the
#: work items a model server failed (`synth qa`'s failed.jsonl, run again on resume)
SIDE_FILES = ("summary.json", "run.json", "progress.log", "failed.jsonl")


def _first_keys(path: Path) -> list[str] | None:
    try:
        with open_plain(path, path.name, 0) as f:  # discovery checked where a link leads
            line = f.readline(SNIFF_BYTES)
    except (OSError, ViewError):
        return None
    raw, _ = parse_line(line, 1) if line.endswith(b"\n") or len(line) < SNIFF_BYTES else (None, "")
    return list(raw) if raw else None


def _dataset_kind(folder: Path) -> str | None:
    try:
        info = json.loads(
            read_plain(folder / "dataset_info.json", "dataset_info.json", DATASET_JSON_BYTES)
        )
        return sniff_kind(list((info.get("features") or {}).keys()))
    except (OSError, ValueError, AttributeError, ViewError):
        return None


def _classify(names: set[str]) -> dict[str, tuple[str, str] | None]:
    """File name -> (kind, role) for the names that say what they hold."""
    out: dict[str, tuple[str, str] | None] = {}
    qa_dir = "qa.jsonl" in names
    tasks_dir = "tasks.jsonl" in names
    for n in names:
        if n == "qa.jsonl":
            out[n] = ("qa", "kept")
        elif n == "tasks.jsonl":
            out[n] = ("tasks", "kept")
        elif n == "rejected.jsonl" and (qa_dir or tasks_dir):
            out[n] = ("qa" if qa_dir else "tasks", "rejected")
        elif n == "errors.jsonl":
            out[n] = ("episodes", "errors")
        elif n.startswith("episodes") and n.endswith(".jsonl"):
            out[n] = ("episodes", "")
    return out


#: the export folders `gemkit synth qa` and `gemkit synth tasks` write inside their run folders
EXPORT_NAMES = ("dataset", "datasets")


def _export_of_its_run(folder: Path, kind: str) -> bool:
    """Whether a datasets folder is a run's export (or one split of it, `dataset/train`), next
    to the JSONL records it was made from."""
    if folder.name not in EXPORT_NAMES and is_plain(folder.parent / "dataset_dict.json"):
        folder = folder.parent  # a split of a DatasetDict export
    if folder.name not in EXPORT_NAMES:
        return False
    try:
        beside = {p.name for p in folder.parent.iterdir() if p.is_file()}
    except OSError:
        return False
    return any(k == kind for k, _ in filter(None, _classify(beside).values()))


def discover(path: Path, catalog: Catalog | None = None) -> Catalog:
    """Find the record files under `path` (a folder, or one JSONL file); keep known indexes."""
    path = Path(path)
    if not path.exists():
        raise ViewError(f"{path} does not exist; pass a folder or file written by gemkit")
    path = path.resolve()
    cat = catalog or Catalog(path.parent if path.is_file() else path, allowed=path)
    cat.skipped = []
    found: dict[str, tuple[Kind, Path, str, list[Source]]] = {}

    def add(kind: str, folder: Path, source: Source) -> None:
        rel = _rel(cat.root, folder)
        key = f"{rel}/{kind}" if rel else kind
        found.setdefault(key, (KINDS[kind], folder, rel, []))[3].append(source)

    if path.is_file():
        kind, role = _classify({path.name}).get(path.name) or (None, "")
        kind = kind or sniff_kind(_first_keys(path) or [])
        if not path.name.endswith(".jsonl") or kind is None:
            raise ViewError(
                f"{path.name} holds no gemkit records: expected a JSONL file of episodes, "
                "QA records or task tuples, or a folder written by gemkit"
            )
        add(kind, path.parent, JsonlSource(path, path.name, role))
    else:
        _walk(cat, add)
    for key, (kind, folder, rel, sources) in found.items():
        sources.sort(key=lambda s: (ROLE_ORDER.get(s.role, 1), s.rel))
        if key in cat.collections:
            for s in sources:
                cat.collections[key].add_source(s)
        else:
            cat.collections[key] = Collection(key, kind, folder, rel, sources)
    return cat


def _rel(root: Path, p: Path) -> str:
    return p.relative_to(root).as_posix() if p != root else ""


def _walk(cat: Catalog, add: Any) -> None:
    root = cat.root
    entries = 0
    for folder, dirs, files in os.walk(root, followlinks=False):
        here = Path(folder)
        rel = _rel(root, here)
        entries += len(dirs) + len(files)
        if entries > MAX_ENTRIES:
            cat.skipped.append(f"stopped looking after {MAX_ENTRIES:,} files and folders")
            break
        depth = len(here.relative_to(root).parts)
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and depth < MAX_DEPTH)
        if "state.json" in files and "dataset_info.json" in files:
            links = [n for n in ("state.json", "dataset_info.json") if not is_plain(here / n)]
            kind = None if links else _dataset_kind(here)
            if links:
                cat.skipped.append(
                    f"{rel}/: {' and '.join(links)} is a link or not a regular file; not read"
                )
            elif kind is None:
                cat.skipped.append(f"{rel}/: a datasets folder of records not known here")
            elif here != root and _export_of_its_run(here, kind):
                pass  # the run's own export: the same records as its JSONL, listed once
            elif here != root and is_plain(here.parent / "dataset_dict.json"):
                add(kind, here.parent, ArrowSource(here, rel))  # a split: one collection for all
            else:
                add(kind, here, ArrowSource(here, rel))
            dirs[:] = []
            continue
        names = set(files)
        known = _classify(names)
        for n in sorted(names):
            p = here / n
            prel = _rel(root, p)
            if p.is_symlink() and not inside(root, p):
                cat.skipped.append(f"{prel}: a link to a file outside the folder")
                continue
            if not p.is_file():  # a FIFO (opening it blocks), a socket, a device, a dangling link
                if n.endswith(".jsonl") or n in SIDE_FILES:
                    cat.skipped.append(f"{prel}: not a regular file; not read")
                continue
            if n in SIDE_FILES:
                if p not in cat.side.setdefault(rel, []):
                    cat.side[rel].append(p)
                continue
            if not n.endswith(".jsonl"):
                continue
            if n == "corpus.jsonl":
                if rel not in cat.corpora:
                    cat.corpora[rel] = Corpus(JsonlSource(p, prel))
                continue
            kind_role = known.get(n)
            if kind_role is None:
                kind = sniff_kind(_first_keys(p) or [])
                if kind is None:
                    cat.skipped.append(f"{prel}: not episodes, QA records or task tuples")
                    continue
                kind_role = (kind, "")
            add(kind_role[0], here, JsonlSource(p, prel, kind_role[1]))
