"""An aiohttp server over a `SearchIndex`, speaking the Search-R1 retrieval protocol.

- `POST /retrieve {"queries": [str, ...], "topk": k, "return_scores": bool}` →
  `{"result": [[doc, ...], ...]}`, one list per query, best first. With `return_scores` each
  entry is `{"document": doc, "score": s}` as in Search-R1; otherwise the doc itself (which
  carries its `score` anyway).
- `POST /access {"urls": [str, ...]}` → `{"result": [doc or null, ...]}` (a url or an id).
- `GET /health` → `{"status": "ok", "docs": n}`.

A doc is `{id, title, url, text, snippet, score, contents}`; `contents` is `"Title"\\ntext`, the
field Search-R1 clients read. Bad input gets a 400 with `{"error": "..."}` saying what is expected.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from aiohttp import web

from gemkit.search.index import SearchIndex

logger = logging.getLogger(__name__)

MAX_TOPK = 100
MAX_QUERIES = 4096
RETRIEVE_SHAPE = '{"queries": ["..."], "topk": 3}'
ACCESS_SHAPE = '{"urls": ["..."]}'


class BadRequest(ValueError):
    """A request body that does not have the expected shape."""


def _with_contents(doc: dict[str, Any]) -> dict[str, Any]:
    return {**doc, "contents": f'"{doc["title"]}"\n{doc["text"]}'}


async def _json_body(request: web.Request, shape: str) -> dict[str, Any]:
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise BadRequest(f"the body is not valid JSON; expected {shape}") from None
    if not isinstance(body, dict):
        raise BadRequest(f"expected a JSON object {shape}, got {type(body).__name__}")
    return body


def _str_list(body: dict[str, Any], key: str, shape: str) -> list[str]:
    value = body.get(key)
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise BadRequest(f"{key!r} must be a list of strings; expected {shape}")
    if len(value) > MAX_QUERIES:
        raise BadRequest(f"at most {MAX_QUERIES} {key} per request, got {len(value)}")
    return value


def parse_retrieve(body: dict[str, Any], default_topk: int) -> tuple[list[str], int, bool]:
    """Validate a /retrieve body into `(queries, topk, return_scores)`, or raise BadRequest."""
    if "queries" not in body and "query" in body:
        body = {**body, "queries": body["query"]}
    queries = _str_list(body, "queries", RETRIEVE_SHAPE)
    topk = body.get("topk", default_topk)
    if topk is None:
        topk = default_topk
    if isinstance(topk, bool) or not isinstance(topk, int) or not 1 <= topk <= MAX_TOPK:
        raise BadRequest(f"'topk' must be an integer from 1 to {MAX_TOPK}, got {topk!r}")
    return_scores = body.get("return_scores", False)
    if not isinstance(return_scores, bool):
        raise BadRequest(f"'return_scores' must be true or false, got {return_scores!r}")
    return queries, topk, return_scores


def make_app(index: SearchIndex, *, default_topk: int = 3) -> web.Application:
    """The aiohttp application serving `index`."""

    async def retrieve(request: web.Request) -> web.Response:
        queries, topk, return_scores = parse_retrieve(
            await _json_body(request, RETRIEVE_SHAPE), default_topk
        )
        # SQLite work off the event loop, so one slow query does not stall other clients.
        hits = await asyncio.to_thread(index.search_many, queries, topk)
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

    async def access(request: web.Request) -> web.Response:
        body = await _json_body(request, ACCESS_SHAPE)
        if "urls" not in body and "url" in body:
            body = {**body, "urls": body["url"]}
        urls = _str_list(body, "urls", ACCESS_SHAPE)
        docs = await asyncio.to_thread(lambda: [index.access(u) for u in urls])
        return web.json_response(
            {"result": [_with_contents(d) if d is not None else None for d in docs]}
        )

    async def health(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "docs": len(index)})

    @web.middleware
    async def json_errors(request: web.Request, handler: Any) -> web.StreamResponse:
        try:
            return await handler(request)
        except BadRequest as e:
            return web.json_response({"error": str(e)}, status=400)
        except web.HTTPException as e:
            if e.status < 400:
                raise
            hint = "endpoints: POST /retrieve, POST /access, GET /health"
            return web.json_response({"error": f"{e.reason}; {hint}"}, status=e.status)

    app = web.Application(middlewares=[json_errors], client_max_size=16 * 1024**2)
    app.router.add_post("/retrieve", retrieve)
    app.router.add_post("/access", access)
    app.router.add_get("/health", health)
    return app


async def start_server(
    index: SearchIndex, host: str = "127.0.0.1", port: int = 0, *, default_topk: int = 3
) -> tuple[web.AppRunner, int]:
    """Start serving in the running loop; return the runner (call `cleanup()`) and the port."""
    runner = web.AppRunner(make_app(index, default_topk=default_topk), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    sockets = site._server.sockets if site._server else []  # type: ignore[union-attr]
    bound = sockets[0].getsockname()[1] if sockets else port
    return runner, int(bound)


def serve(
    index: SearchIndex, host: str = "127.0.0.1", port: int = 8000, *, default_topk: int = 3
) -> None:
    """Serve `index` until interrupted (blocking)."""
    web.run_app(
        make_app(index, default_topk=default_topk),
        host=host,
        port=port,
        access_log=None,
        print=None,
    )
