"""The documents and databases beside the records: a QA run's corpus, a task's SQLite file."""

from __future__ import annotations

import sqlite3
import threading
from array import array
from pathlib import Path
from typing import Any

import numpy as np

from gemkit.view.files import ViewError, inside, parse_line
from gemkit.view.sources import JsonlSource, Rebuilt


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
