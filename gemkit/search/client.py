"""An aiohttp client of the search server, with a timeout and retries on connection errors/5xx."""

from __future__ import annotations

import asyncio
import logging
import weakref
from typing import Any

import aiohttp

from gemkit.errors import GemkitError
from gemkit.serving import auth_headers, resolve_token

logger = logging.getLogger(__name__)


class SearchServiceError(GemkitError):
    """The search server could not be reached or answered with an error."""


def normalize_doc(entry: Any) -> dict[str, Any]:
    """A doc from any Search-R1 style server as `{id, title, url, text, score, ...}`."""
    doc = entry.get("document", entry) if isinstance(entry, dict) else entry
    doc = dict(doc) if isinstance(doc, dict) else {"contents": str(doc)}
    if isinstance(entry, dict) and "document" in entry:
        doc.setdefault("score", entry.get("score"))
    if "text" not in doc and isinstance(doc.get("contents"), str):
        first, _, rest = doc["contents"].partition("\n")
        doc.setdefault("title", first.strip().strip('"'))
        doc["text"] = rest
    doc.setdefault("title", "")
    doc.setdefault("text", "")
    doc.setdefault("url", None)
    return doc


class SearchClient:
    """Talks to a `gemkit serve search` server (or any Search-R1 style `/retrieve` server).

    One aiohttp session per event loop is kept and reused, so the client works from any loop
    (a sync `step` that runs `asyncio.run`, several vector workers) without reconnecting per call.
    `token` (default `$GEMKIT_SERVE_TOKEN`) is sent as `Authorization: Bearer <token>`.
    """

    def __init__(
        self,
        url: str,
        *,
        timeout: float = 10.0,
        retries: int = 3,
        backoff: float = 0.2,
        token: str | None = None,
    ):
        self.url = url.rstrip("/")
        self.token = resolve_token(token)
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self._sessions: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, aiohttp.ClientSession]
        self._sessions = weakref.WeakKeyDictionary()

    def _session(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        session = self._sessions.get(loop)
        if session is None or session.closed:
            session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.timeout), headers=auth_headers(self.token)
            )
            self._sessions[loop] = session
        return session

    async def _post(self, path: str, body: dict[str, Any]) -> Any:
        """POST `body`, retrying with exponential backoff on connection errors, timeouts and 5xx."""
        url = self.url + path
        last = ""
        for attempt in range(self.retries + 1):
            if attempt:
                await asyncio.sleep(self.backoff * 2 ** (attempt - 1))
            try:
                async with self._session().post(url, json=body) as resp:
                    if resp.status >= 500:
                        last = f"HTTP {resp.status}: {(await resp.text())[:200]}"
                        continue
                    payload = await resp.json(content_type=None)
                    if resp.status >= 400:
                        message = payload.get("error") if isinstance(payload, dict) else payload
                        raise SearchServiceError(f"{url} rejected the request: {message}")
                    if not isinstance(payload, dict) or "result" not in payload:
                        raise SearchServiceError(f"{url} answered without a 'result' field")
                    return payload["result"]
            except (aiohttp.ClientConnectionError, asyncio.TimeoutError) as e:
                last = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
                logger.debug("search request to %s failed (attempt %d): %s", url, attempt + 1, last)
            except (aiohttp.ContentTypeError, ValueError) as e:
                raise SearchServiceError(f"{url} did not answer with JSON: {e}") from None
        raise SearchServiceError(
            f"search server {self.url} unavailable after {self.retries + 1} attempts ({last})"
        )

    async def retrieve(self, queries: list[str], topk: int) -> list[list[dict[str, Any]]]:
        """One list of docs per query, best first."""
        result = await self._post("/retrieve", {"queries": queries, "topk": topk})
        return [[normalize_doc(d) for d in docs] for docs in result]

    async def search(self, query: str, topk: int) -> list[dict[str, Any]]:
        """The docs for one query."""
        return (await self.retrieve([query], topk))[0]

    async def access(self, url_or_id: str) -> dict[str, Any] | None:
        """The full document at `url_or_id`, or None."""
        doc = (await self._post("/access", {"urls": [url_or_id]}))[0]
        return normalize_doc(doc) if doc is not None else None

    async def close(self) -> None:
        """Close the session of the running loop (others close with their loops)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        session = self._sessions.pop(loop, None)
        if session is not None:
            await session.close()
