"""An aiohttp server over a `SearchIndex`, speaking the Search-R1 retrieval protocol.

- `POST /retrieve {"queries": [str, ...], "topk": k, "return_scores": bool}` →
  `{"result": [[doc, ...], ...]}`, one list per query, best first. With `return_scores` each
  entry is `{"document": doc, "score": s}` as in Search-R1; otherwise the doc itself (which
  carries its `score` anyway).
- `POST /access {"urls": [str, ...]}` → `{"result": [doc or null, ...]}` (a url or an id).
- `GET /health` → `{"status": "ok", "docs": n}`.

A doc is `{id, title, url, text, snippet, score, contents}`; `contents` is `"Title"\\ntext`, the
field Search-R1 clients read. Bad input gets a 4xx with `{"error": "..."}` saying what is
expected.

The work of one request is bounded (`SearchLimits`: queries, topk, queries x topk, query
length, body size; each a `gemkit serve search` flag) and runs on a small thread pool in
chunks of queries, so requests share the pool fairly, the event loop keeps answering, and a
request whose client went away stops at the next chunk.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gemkit.search.index import SearchIndex
from gemkit.serving import (
    RequestError,
    json_type,
    middlewares,
    preview,
    read_json_object,
    resolve_token,
    run_app,
)

if TYPE_CHECKING:  # aiohttp loads with the server, not with `gemkit serve --help`
    from aiohttp import web

logger = logging.getLogger(__name__)

RETRIEVE_SHAPE = '{"queries": ["..."], "topk": 3}'
ACCESS_SHAPE = '{"urls": ["..."]}'
ENDPOINTS = "POST /retrieve, POST /access, GET /health"


@dataclass(frozen=True)
class SearchLimits:
    """What one request may ask of the server; each field has a `gemkit serve search` flag."""

    max_queries: int = 4096  #: queries (or urls) per request, `--max-queries`
    max_topk: int = 100  #: results per query, `--max-topk`
    max_results: int = 16_384  #: queries x topk per request, `--max-results`
    max_query_chars: int = 4096  #: characters per query or url, `--max-query-chars`
    max_body: int = 2 * 1024 * 1024  #: request body bytes, `--max-body-kb`
    chunk: int = 16  #: queries per unit of work; the server checks for a gone client between
    threads: int = min(4, os.cpu_count() or 1)  #: searches running at once, `--threads`


#: the defaults; the module-level names stay for code that read them
LIMITS = SearchLimits()
MAX_TOPK = LIMITS.max_topk
MAX_QUERIES = LIMITS.max_queries


class BadRequest(RequestError):
    """A request body that does not have the expected shape (answered 400)."""

    def __init__(self, message: str):
        super().__init__(400, message)


def _with_contents(doc: dict[str, Any]) -> dict[str, Any]:
    return {**doc, "contents": f'"{doc["title"]}"\n{doc["text"]}'}


def _str_list(body: dict[str, Any], key: str, shape: str, limits: SearchLimits) -> list[str]:
    value = body.get(key)
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        got = json_type(value) if not isinstance(value, list) else "an array with a non-string"
        raise BadRequest(f"{key!r} must be a list of strings, got {got}; expected {shape}")
    if len(value) > limits.max_queries:
        raise BadRequest(
            f"at most {limits.max_queries} {key} per request, got {len(value)}; send fewer per "
            "request or start the server with a larger --max-queries"
        )
    longest = max(map(len, value), default=0)
    if longest > limits.max_query_chars:
        raise BadRequest(
            f"each of {key!r} may hold at most {limits.max_query_chars} characters, got one of "
            f"{longest}; shorten it or start the server with a larger --max-query-chars"
        )
    return value


def parse_retrieve(
    body: dict[str, Any], default_topk: int, limits: SearchLimits = LIMITS
) -> tuple[list[str], int, bool]:
    """Validate a /retrieve body into `(queries, topk, return_scores)`, or raise BadRequest."""
    if "queries" not in body and "query" in body:
        body = {**body, "queries": body["query"]}
    queries = _str_list(body, "queries", RETRIEVE_SHAPE, limits)
    topk = body.get("topk", default_topk)
    if topk is None:
        topk = default_topk
    if isinstance(topk, bool) or not isinstance(topk, int) or not 1 <= topk <= limits.max_topk:
        raise BadRequest(
            f"'topk' must be an integer from 1 to {limits.max_topk}, got {preview(topk)} "
            "(the server's --max-topk sets the top)"
        )
    if len(queries) * topk > limits.max_results:
        raise BadRequest(
            f"{len(queries)} queries x topk {topk} = {len(queries) * topk:,} results; a request "
            f"may ask for at most {limits.max_results:,}: send fewer queries per request or start "
            "the server with a larger --max-results"
        )
    return_scores = body.get("return_scores", False)
    if not isinstance(return_scores, bool):
        raise BadRequest(f"'return_scores' must be true or false, got {preview(return_scores)}")
    return queries, topk, return_scores


def _client_gone(request: web.Request) -> bool:
    transport = request.transport
    return transport is None or transport.is_closing()


async def _in_chunks(
    request: web.Request,
    pool: concurrent.futures.Executor,
    work: Callable[[list[str]], list[Any]],
    items: list[str],
    chunk: int,
) -> list[Any] | None:
    """`work` over `items` a chunk at a time on `pool`; None once the client has gone."""
    loop = asyncio.get_running_loop()
    out: list[Any] = []
    for start in range(0, len(items), chunk):
        if _client_gone(request):
            logger.debug("client left after %d of %d items; stopped", start, len(items))
            return None
        out.extend(await loop.run_in_executor(pool, work, items[start : start + chunk]))
    return out


def make_app(
    index: SearchIndex,
    *,
    default_topk: int = 3,
    limits: SearchLimits = LIMITS,
    token: str | None = None,
) -> web.Application:
    """The aiohttp application serving `index` within `limits`.

    `token` (default `$GEMKIT_SERVE_TOKEN`) makes every request show
    `Authorization: Bearer <token>`.
    """
    from aiohttp import web

    pools: list[concurrent.futures.ThreadPoolExecutor] = []

    def pool() -> concurrent.futures.ThreadPoolExecutor:
        if not pools:
            pools.append(
                concurrent.futures.ThreadPoolExecutor(limits.threads, thread_name_prefix="search")
            )
        return pools[0]

    async def body_of(request: web.Request, shape: str) -> dict[str, Any]:
        return await read_json_object(
            request, shape=shape, max_body=limits.max_body, limit_flag="--max-body-kb"
        )

    async def retrieve(request: web.Request) -> web.StreamResponse:
        queries, topk, return_scores = parse_retrieve(
            await body_of(request, RETRIEVE_SHAPE), default_topk, limits
        )
        hits = await _in_chunks(
            request, pool(), lambda qs: index.search_many(qs, topk), queries, limits.chunk
        )
        if hits is None:
            return web.Response(status=499, text="client closed the request")
        result = [
            [
                {"document": _with_contents(d), "score": d["score"]}
                if return_scores
                else _with_contents(d)
                for d in docs
            ]
            for docs in hits
        ]
        return web.json_response({"result": result})

    async def access(request: web.Request) -> web.StreamResponse:
        body = await body_of(request, ACCESS_SHAPE)
        if "urls" not in body and "url" in body:
            body = {**body, "urls": body["url"]}
        urls = _str_list(body, "urls", ACCESS_SHAPE, limits)
        docs = await _in_chunks(
            request, pool(), lambda us: [index.access(u) for u in us], urls, limits.chunk
        )
        if docs is None:
            return web.Response(status=499, text="client closed the request")
        return web.json_response(
            {"result": [_with_contents(d) if d is not None else None for d in docs]}
        )

    async def health(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "docs": len(index)})

    async def shutdown(app: web.Application) -> None:
        for p in pools:
            p.shutdown(wait=False, cancel_futures=True)
        pools.clear()

    app = web.Application(
        middlewares=middlewares(ENDPOINTS, resolve_token(token)), client_max_size=limits.max_body
    )
    app.router.add_post("/retrieve", retrieve)
    app.router.add_post("/access", access)
    app.router.add_get("/health", health)
    app.on_cleanup.append(shutdown)
    return app


async def start_server(
    index: SearchIndex,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    default_topk: int = 3,
    limits: SearchLimits = LIMITS,
    token: str | None = None,
) -> tuple[web.AppRunner, int]:
    """Start serving in the running loop; return the runner (call `cleanup()`) and the port."""
    from aiohttp import web

    app = make_app(index, default_topk=default_topk, limits=limits, token=token)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    server = site._server
    sockets = server.sockets if isinstance(server, asyncio.Server) else []
    bound = sockets[0].getsockname()[1] if sockets else port
    return runner, int(bound)


def serve(
    index: SearchIndex,
    host: str = "127.0.0.1",
    port: int = 8000,
    *,
    default_topk: int = 3,
    limits: SearchLimits = LIMITS,
    token: str | None = None,
    on_start: Callable[[], None] | None = None,
    warn: Callable[[str], None] = logger.warning,
) -> None:
    """Serve `index` until interrupted (blocking); `on_start` runs once the port is bound."""
    token = resolve_token(token)
    app = make_app(index, default_topk=default_topk, limits=limits, token=token)
    run_app(app, host, port, token=token, on_start=on_start, warn=warn)
