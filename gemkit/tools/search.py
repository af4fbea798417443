"""`search` and `access` tools over a local index (in process) or a search server (over HTTP)."""

from __future__ import annotations

import asyncio
import copy
import os
from typing import Any, Protocol

from pydantic import BaseModel, Field

from gemkit.errors import GemkitError
from gemkit.search.client import SearchClient, SearchServiceError
from gemkit.search.index import SearchIndex
from gemkit.tools.base import Tool, ToolResult

#: where `SearchTool()` / `AccessTool()` without arguments look for their backend
URL_ENV = "GEMKIT_SEARCH_URL"
CORPUS_ENV = "GEMKIT_SEARCH_CORPUS"


class SearchBackend(Protocol):
    """What the tools need from an index or a server."""

    async def search(self, query: str, topk: int) -> list[dict[str, Any]]:
        """The `topk` best docs for `query`, best first."""
        ...

    async def access(self, url_or_id: str) -> dict[str, Any] | None:
        """The full doc at `url_or_id`, or None."""
        ...

    async def close(self) -> None:
        """Release connections."""
        ...


class LocalBackend:
    """A `SearchIndex` queried in a worker thread, so a large corpus never stalls the loop."""

    def __init__(self, index: SearchIndex):
        self.index = index

    async def search(self, query: str, topk: int) -> list[dict[str, Any]]:
        """The docs for `query`, best first."""
        return await asyncio.to_thread(self.index.search, query, topk)

    async def access(self, url_or_id: str) -> dict[str, Any] | None:
        """The full doc at `url_or_id`, or None."""
        return await asyncio.to_thread(self.index.access, url_or_id)

    async def close(self) -> None:
        """Nothing to release: the index file stays for reuse."""


def make_backend(
    corpus: str | os.PathLike[str] | None = None,
    *,
    index: SearchIndex | None = None,
    url: str | None = None,
    backend: SearchBackend | None = None,
    timeout: float = 10.0,
    retries: int = 3,
    cache_dir: str | os.PathLike[str] | None = None,
) -> SearchBackend:
    """A backend from exactly one of corpus / index / url / backend (or the environment)."""
    given = [x for x in (corpus, index, url, backend) if x is not None]
    if len(given) > 1:
        raise GemkitError("give one of corpus=, index=, url= or backend=, not several")
    if backend is not None:
        return backend
    if not given:
        url, corpus = os.environ.get(URL_ENV), os.environ.get(CORPUS_ENV)
        if not (url or corpus):
            raise GemkitError(
                "the search tool needs a corpus or a server: pass corpus='docs.jsonl' or "
                f"url='http://127.0.0.1:8000' (or set {URL_ENV} / {CORPUS_ENV})"
            )
    if url:
        return SearchClient(url, timeout=timeout, retries=retries)
    if index is None:
        index = SearchIndex.open(corpus, cache_dir=cache_dir)  # type: ignore[arg-type]
    return LocalBackend(index)


def format_results(query: str, docs: list[dict[str, Any]], snippet_chars: int = 400) -> str:
    """Search results as numbered text: title, where to access it, and a snippet."""
    if not docs:
        return f"No results for {query!r}. Try other keywords."
    lines = []
    for i, d in enumerate(docs, 1):
        where = d.get("url") or d.get("id")
        snippet = (d.get("snippet") or d.get("text") or "").strip().replace("\n", " ")
        if len(snippet) > snippet_chars:
            snippet = snippet[:snippet_chars].rstrip() + " …"
        lines.append(f"{i}. {d.get('title') or '(untitled)'} [{where}]\n   {snippet}")
    return "\n".join(lines)


class SearchArgs(BaseModel):
    """Arguments of the search tool."""

    query: str = Field(description="keywords or a question to look up")
    topk: int | None = Field(
        default=None, ge=1, le=20, description="how many results to return (default 3)"
    )


class AccessArgs(BaseModel):
    """Arguments of the access tool."""

    url: str = Field(description="the url or id of a document from the search results")


class _BackendTool(Tool):
    def __init__(
        self,
        corpus: str | os.PathLike[str] | None = None,
        *,
        index: SearchIndex | None = None,
        url: str | None = None,
        backend: SearchBackend | None = None,
        timeout: float = 10.0,
        retries: int = 3,
        cache_dir: str | os.PathLike[str] | None = None,
    ):
        self.backend = make_backend(
            corpus,
            index=index,
            url=url,
            backend=backend,
            timeout=timeout,
            retries=retries,
            cache_dir=cache_dir,
        )

    def clone(self) -> Tool:
        """A copy sharing the backend: the index and the HTTP client hold no per-episode state."""
        return copy.copy(self)

    async def close(self) -> None:
        """Close the HTTP session of the running loop, if any."""
        await self.backend.close()


class SearchTool(_BackendTool):
    """Full-text search over a corpus: numbered results with title, url/id and a snippet.

    `SearchTool(corpus="docs.jsonl")` searches in process; `SearchTool(url="http://host:8000")`
    asks a `gemkit serve search` server. `metadata["docs"]` holds the raw documents.
    """

    name = "search"
    description = (
        "Search a document collection. Returns the best matching documents, each with a "
        "title, a url or id to read it in full with the access tool, and a snippet."
    )
    Args = SearchArgs

    def __init__(
        self,
        corpus: str | os.PathLike[str] | None = None,
        *,
        topk: int = 3,
        snippet_chars: int = 400,
        **kwargs: Any,
    ):
        super().__init__(corpus, **kwargs)
        self.topk = topk
        self.snippet_chars = snippet_chars

    async def call(self, args: BaseModel) -> ToolResult:
        """Run the query and format the hits."""
        args = SearchArgs.model_validate(args)
        query = args.query.strip()
        if not query:
            return ToolResult(
                "The search query is empty; give a few keywords, e.g. "
                '{"query": "capital of France"}.',
                is_error=True,
            )
        topk = args.topk or self.topk
        try:
            docs = await self.backend.search(query, topk)
        except SearchServiceError as e:
            return ToolResult(f"Search failed: {e}", is_error=True)
        return ToolResult(
            format_results(query, docs, self.snippet_chars),
            metadata={"query": query, "docs": docs},
        )


class AccessTool(_BackendTool):
    """Read one document in full by the url or id that search returned."""

    name = "access"
    description = "Read the full text of a document, by the url or id shown in search results."
    Args = AccessArgs

    def __init__(
        self, corpus: str | os.PathLike[str] | None = None, *, max_chars: int = 8000, **kwargs: Any
    ):
        super().__init__(corpus, **kwargs)
        self.max_chars = max_chars

    async def call(self, args: BaseModel) -> ToolResult:
        """Fetch the document and return its text (cut at `max_chars`)."""
        args = AccessArgs.model_validate(args)
        key = args.url.strip()
        try:
            doc = await self.backend.access(key) if key else None
        except SearchServiceError as e:
            return ToolResult(f"Access failed: {e}", is_error=True)
        if doc is None:
            return ToolResult(
                f"No document with url or id {key!r}. Use a url or id exactly as shown in "
                "the search results.",
                is_error=True,
            )
        text = doc.get("text") or ""
        if len(text) > self.max_chars:
            text = text[: self.max_chars] + f"\n[… {len(text) - self.max_chars} more characters]"
        header = doc.get("title") or "(untitled)"
        where = doc.get("url") or doc.get("id")
        return ToolResult(f"{header} [{where}]\n\n{text}", metadata={"doc": doc})


def search_tools(corpus: str | os.PathLike[str] | None = None, **kwargs: Any) -> list[Tool]:
    """A `SearchTool` and an `AccessTool` sharing one index or server connection."""
    topk = kwargs.pop("topk", 3)
    search = SearchTool(corpus, topk=topk, **kwargs)
    return [search, AccessTool(backend=search.backend)]
