"""Where a collection's records come from: a JSONL file or a `datasets` export, scanned and read."""

from __future__ import annotations

import json
import mmap
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from gemkit.view.files import (
    DATASET_JSON_BYTES,
    MAX_RECORD_BYTES,
    ViewError,
    is_plain,
    open_plain,
    parse_line,
    read_plain,
    too_large,
)

#: bytes a search lowers and scans at a time
SEARCH_CHUNK = 8 * 1024 * 1024


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
                    error: str | None
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
                rows += [start + int(i) for i in np.flatnonzero(hit.to_numpy(zero_copy_only=False))]
            start += table.num_rows
        return rows


Source = JsonlSource | ArrowSource
