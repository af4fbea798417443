"""A local full-text index over a JSONL corpus: SQLite FTS5 with BM25 ranking, cached on disk.

Each corpus line is a JSON object `{"id", "title", "text", "url"?}` (the Search-R1 shape
`{"id", "contents": "\\"Title\\"\\ntext"}` is accepted too). The index is built once into a
SQLite file keyed by the corpus path, and reused while the corpus keeps its size and mtime (or
its content hash, with `content_hash=True`); a changed corpus is rebuilt on the next open.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import sqlite3
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gemkit.cache import cache_dir
from gemkit.errors import GemkitError

logger = logging.getLogger(__name__)

#: bump when the table layout changes, so old cache files are rebuilt
SCHEMA_VERSION = "2"
#: BM25 column weights (title, text): a query word in the title counts this much more
TITLE_WEIGHT = 5.0
#: longest query the sanitizer keeps, in tokens (bounds the cost of an OR over many terms)
MAX_QUERY_TOKENS = 64
#: a query word is what FTS5's unicode61 tokenizer calls a token: a run of letters and digits
_TOKEN_RE = re.compile(r"[^\W_]+", re.UNICODE)
#: a word in more than this fraction of documents is dropped from a query that has rarer words
#: (BM25 gives it little weight, yet scoring it means scoring a large part of the corpus)
MAX_DF = 0.2
#: ...but only when it is in more than this many documents: scoring fewer is cheap anyway, and
#: small corpora keep exact BM25 ranking
MIN_PRUNE_DF = 2000
TOKENIZER = "porter unicode61 remove_diacritics 2"
#: English function words dropped from queries: BM25 gives them almost no weight, yet each one
#: matches most documents and would make every query score the whole corpus
STOPWORDS = frozenset(
    "a an and are as at be been but by can did do does for from had has have he her his how i "
    "if in into is it its me my no not of on or our she so than that the their them then there "
    "these they this those to was we were what when where which who whom why will with would you "
    "your".split()
)


class SearchIndexError(GemkitError):
    """A corpus that cannot be read or indexed; the message names the file and line."""


def default_cache_dir() -> Path:
    """Where index files live unless told otherwise: `$GEMKIT_CACHE_DIR/search` or ~/.cache."""
    return cache_dir("search")


def query_words(text: str, max_tokens: int = MAX_QUERY_TOKENS) -> list[str]:
    """The distinct lowercase words of `text`, stopwords dropped unless nothing else is left."""
    words = list(dict.fromkeys(t.lower() for t in _TOKEN_RE.findall(text or "")))
    return ([w for w in words if w not in STOPWORDS] or words)[:max_tokens]


def fts_query(text: str | list[str], max_tokens: int = MAX_QUERY_TOKENS) -> str:
    """Turn any user text into a safe FTS5 MATCH expression (quoted words joined by OR).

    FTS5 syntax (`"`, `*`, `NEAR`, `AND`, parentheses, `col:`) is never interpreted: every word
    becomes a quoted string, so the expression cannot fail to parse. Stopwords are dropped
    unless the query has nothing else. Returns "" when the text holds no word at all.
    """
    words = query_words(text, max_tokens) if isinstance(text, str) else text
    return " OR ".join(f'"{w}"' for w in words)


def _corpus_docs(path: Path) -> Iterator[tuple[str, str, str, str]]:
    """Yield `(id, title, text, url)` per corpus line, or raise naming the bad line."""
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise SearchIndexError(
                    f"{path}:{lineno}: not valid JSON ({e.msg}); expected one object per line "
                    'like {"id": "d1", "title": "...", "text": "...", "url": "..."}'
                ) from None
            if not isinstance(rec, dict):
                raise SearchIndexError(
                    f"{path}:{lineno}: expected a JSON object with id/title/text, got "
                    f"{type(rec).__name__}"
                )
            title, text = rec.get("title"), rec.get("text")
            if text is None and isinstance(rec.get("contents"), str):
                # Search-R1 corpora put the quoted title on the first line of `contents`.
                first, _, rest = rec["contents"].partition("\n")
                title, text = (title or first.strip().strip('"')), rest
            if title is None and text is None:
                raise SearchIndexError(
                    f"{path}:{lineno}: the object has neither 'title' nor 'text' "
                    f"(keys: {sorted(rec)}); expected at least one of them"
                )
            doc_id = rec.get("id", rec.get("_id", lineno - 1))
            yield str(doc_id), str(title or ""), str(text or ""), str(rec.get("url") or "")


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _corpus_key(path: Path, content_hash: bool) -> dict[str, str]:
    """What must match for a cached index to be reused."""
    st = path.stat()
    key = {"schema": SCHEMA_VERSION, "corpus": str(path), "size": str(st.st_size)}
    if content_hash:
        key["sha256"] = _file_sha256(path)
    else:
        key["mtime_ns"] = str(st.st_mtime_ns)
    return key


def _read_meta(db: Path) -> dict[str, str] | None:
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            return dict(con.execute("SELECT key, value FROM meta").fetchall())
        finally:
            con.close()
    except sqlite3.Error:
        return None


def build_index(corpus: Path, db: Path, key: dict[str, str]) -> int:
    """Index `corpus` into a fresh SQLite file at `db` (atomically replaced); return the doc count."""
    db.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=db.name + ".", suffix=".tmp", dir=db.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    start = time.perf_counter()
    try:
        con = sqlite3.connect(tmp)
        try:
            # A throwaway file until the rename: durability settings would only slow the build.
            con.executescript(
                f"""
                PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF;
                CREATE TABLE docs(rowid INTEGER PRIMARY KEY, id TEXT, title TEXT, text TEXT,
                                  url TEXT);
                CREATE VIRTUAL TABLE fts USING fts5(
                    title, text, content='docs', content_rowid='rowid',
                    tokenize='{TOKENIZER}');
                CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT);
                """
            )
            with con:
                con.executemany(
                    "INSERT INTO docs(id, title, text, url) VALUES (?, ?, ?, ?)",
                    _corpus_docs(corpus),
                )
                con.execute("INSERT INTO fts(fts) VALUES('rebuild')")
                con.execute("CREATE INDEX docs_id ON docs(id)")
                con.execute("CREATE INDEX docs_url ON docs(url)")
                # Document frequency per (stemmed) term, to drop near-stopwords from queries.
                con.execute("CREATE VIRTUAL TABLE temp.vocab USING fts5vocab(main, fts, 'row')")
                con.execute("CREATE TABLE df(term TEXT PRIMARY KEY, n INTEGER) WITHOUT ROWID")
                con.execute("INSERT INTO df SELECT term, doc FROM temp.vocab")
                n = con.execute("SELECT count(*) FROM docs").fetchone()[0]
                meta = {**key, "docs": str(n), "built_at": str(time.time())}
                con.executemany("INSERT INTO meta VALUES (?, ?)", meta.items())
        finally:
            con.close()
        os.replace(tmp, db)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    logger.info("indexed %d docs from %s in %.2fs", n, corpus, time.perf_counter() - start)
    return n


class SearchIndex:
    """A BM25 full-text index over a JSONL corpus, read through one SQLite connection per thread.

    `SearchIndex.open("corpus.jsonl")` builds the index on first use and reuses the file after;
    `rebuilt` tells whether this open had to (re)build it. Query words found in more than
    `max_df` of the documents are dropped when the query has a rarer word (1.0 keeps all).
    """

    def __init__(
        self, db_path: str | os.PathLike[str], *, rebuilt: bool = False, max_df: float = MAX_DF
    ):
        self.db_path = Path(db_path)
        self.rebuilt = rebuilt
        meta = _read_meta(self.db_path)
        if meta is None:
            raise SearchIndexError(f"{self.db_path} is not a gemkit search index")
        self.meta = meta
        self.max_df = max_df
        self._local = threading.local()
        self._stems: dict[str, str] = {}

    @classmethod
    def open(
        cls,
        corpus: str | os.PathLike[str],
        *,
        cache_dir: str | os.PathLike[str] | None = None,
        index_path: str | os.PathLike[str] | None = None,
        content_hash: bool = False,
        max_df: float = MAX_DF,
    ) -> SearchIndex:
        """Open the index of `corpus`, building it when missing or when the corpus changed."""
        path = Path(corpus).expanduser().resolve()
        if not path.is_file():
            raise SearchIndexError(
                f"corpus {str(corpus)!r} does not exist; expected a JSONL file with one "
                '{"id", "title", "text", "url"} object per line'
            )
        if index_path is None:
            digest = hashlib.sha1(str(path).encode()).hexdigest()[:12]
            folder = Path(cache_dir) if cache_dir is not None else default_cache_dir()
            index_path = folder / f"{path.stem}-{digest}.sqlite"
        db = Path(index_path)
        key = _corpus_key(path, content_hash)
        meta = _read_meta(db) if db.exists() else None
        stale = meta is None or any(meta.get(k) != v for k, v in key.items())
        if stale:
            build_index(path, db, key)
        return cls(db, rebuilt=stale, max_df=max_df)

    @property
    def _con(self) -> sqlite3.Connection:
        con = getattr(self._local, "con", None)
        if con is None:
            con = sqlite3.connect(f"file:{self.db_path}?mode=ro", uri=True)
            con.row_factory = sqlite3.Row
            # A scratch FTS5 table with the index's tokenizer: the way to learn a word's stem.
            con.execute(f"CREATE VIRTUAL TABLE temp.stem USING fts5(x, tokenize='{TOKENIZER}')")
            con.execute("CREATE VIRTUAL TABLE temp.stem_v USING fts5vocab(temp, stem, 'instance')")
            self._local.con = con
        return con

    def __len__(self) -> int:
        return int(self.meta.get("docs", 0))

    def search(self, query: str, topk: int = 5) -> list[dict[str, Any]]:
        """The `topk` best documents for `query`, best first: `{id, title, url, text, snippet, score}`.

        Any text is a valid query; one with no word in it returns no documents.
        """
        match = fts_query(self._prune(query_words(query)))
        if not match or topk <= 0:
            return []
        con = self._con
        # Rank first, then fetch text and snippets for the winners only: snippet() and the
        # docs lookup cost far more than bm25() and would otherwise run for every match.
        top = con.execute(
            "SELECT rowid, bm25(fts, ?, 1.0) FROM fts WHERE fts MATCH ? ORDER BY 2 LIMIT ?",
            (TITLE_WEIGHT, match, int(topk)),
        ).fetchall()
        if not top:
            return []
        # One lookup per winner: FTS5 serves `rowid = ?` directly, while `rowid IN (...)`
        # would make it walk every match.
        out = []
        for rowid, rank in top:
            r = con.execute(
                """
                SELECT d.id, d.title, d.url, d.text, snippet(fts, 1, '', '', ' … ', 48)
                FROM fts JOIN docs d ON d.rowid = fts.rowid
                WHERE fts MATCH ? AND fts.rowid = ?
                """,
                (match, rowid),
            ).fetchone()
            out.append(
                {
                    "id": r[0],
                    "title": r[1],
                    "url": r[2] or None,
                    "text": r[3],
                    "snippet": r[4],
                    # bm25() is lower-is-better; flip it so a larger score is a better match.
                    "score": round(-rank, 6),
                }
            )
        return out

    def _stem(self, words: list[str]) -> dict[str, str]:
        """Each word's stem under the index's tokenizer ("" for none), cached across queries."""
        result: dict[str, str] = {}
        missing = []
        for w in words:
            stem = self._stems.get(w)
            if stem is None:
                missing.append(w)
            else:
                result[w] = stem
        if missing:
            stems = self._tokenize(" ".join(missing))
            if len(stems) != len(missing):  # the tokenizer split some word differently
                stems = [(self._tokenize(w) or [""])[0] for w in missing]
            if len(self._stems) > 100_000:
                self._stems = {}
            for w, stem in zip(missing, stems, strict=True):
                result[w] = self._stems[w] = stem
        return result

    def _tokenize(self, text: str) -> list[str]:
        """The index tokenizer's terms for `text`, in order."""
        con = self._con
        con.execute("DELETE FROM temp.stem")
        con.execute("INSERT INTO temp.stem(rowid, x) VALUES (1, ?)", (text,))
        rows = con.execute("SELECT term FROM temp.stem_v ORDER BY offset").fetchall()
        return [r[0] for r in rows]

    def _prune(self, words: list[str]) -> list[str]:
        """Drop words in more than `max_df` (and `MIN_PRUNE_DF`) docs when a rarer word is left."""
        if len(words) < 2 or self.max_df >= 1 or len(self) <= MIN_PRUNE_DF:
            return words
        stems = self._stem(words)
        terms = sorted({t for t in stems.values() if t})
        marks = ",".join("?" * len(terms))
        df = dict(self._con.execute(f"SELECT term, n FROM df WHERE term IN ({marks})", terms))
        limit = max(self.max_df * len(self), MIN_PRUNE_DF)
        counts = {w: df.get(stems[w], 0) for w in words}
        kept = [w for w in words if 0 < counts[w] <= limit]
        if kept:
            return kept
        present = [w for w in words if counts[w] > 0]
        return [min(present, key=counts.__getitem__)] if present else []

    def search_many(self, queries: list[str], topk: int = 5) -> list[list[dict[str, Any]]]:
        """`search` for each query, in order."""
        return [self.search(q, topk) for q in queries]

    def access(self, url_or_id: str) -> dict[str, Any] | None:
        """The full document whose url or id is `url_or_id`, or None."""
        key = str(url_or_id).strip()
        row = self._con.execute(
            "SELECT id, title, url, text FROM docs WHERE url = ? OR id = ? LIMIT 1", (key, key)
        ).fetchone()
        if row is None:
            return None
        return {
            "id": row["id"],
            "title": row["title"],
            "url": row["url"] or None,
            "text": row["text"],
        }

    def close(self) -> None:
        """Close this thread's connection (other threads close theirs when they exit)."""
        con = getattr(self._local, "con", None)
        if con is not None:
            con.close()
            self._local.con = None
