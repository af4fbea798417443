"""Local search: a SQLite FTS5 index over a JSONL corpus, an HTTP server, and its client."""

from gemkit.search.index import SearchIndex, SearchIndexError, fts_query

__all__ = ["SearchIndex", "SearchIndexError", "fts_query"]
