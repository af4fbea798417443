"""The viewer's web server: read-only pages over one folder, for a browser on this machine.

- Only GET and HEAD; nothing a request says is a path: collections are looked up by key,
  records by index row, static files by a fixed list of names.
- The guard every gemkit server shares (`gemkit.serving.Guard`): bound to 127.0.0.1 by
  default, a request whose Host header is not a loopback name or the bound address is
  refused, so a web page cannot reach the viewer through DNS rebinding; and a request another
  site's page makes (an `<img>`, a form, a fetch) is refused: one marked
  `Sec-Fetch-Site: cross-site` or `same-site`, or whose `Origin` is not the viewer's own.
  Such a page cannot make the viewer run verifiers or search whole files on its behalf.
- Every page is built from escaped parts and sent with a Content-Security-Policy that allows
  no inline script, so model-written text cannot run in the page.
- Any failure is a page with a one-line message; the traceback goes to the log only.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from aiohttp import web

from gemkit.serving import AppThread, Guard
from gemkit.view import pages
from gemkit.view.catalog import Catalog, discover
from gemkit.view.files import ViewError
from gemkit.view.markup import Markup
from gemkit.view.pages import TaskCheck
from gemkit.view.records import task_record
from gemkit.view.side_data import find_database

log = logging.getLogger(__name__)

STATIC = Path(__file__).parent / "data"
#: the only files /static/ serves, and their types
STATIC_FILES = {"viewer.css": "text/css", "viewer.js": "text/javascript"}
HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}
#: the app's `Viewer` (for tests and embedding)
VIEWER: web.AppKey[Viewer] = web.AppKey("viewer")
#: verifier runs at a time (each runs model-written code in the sandbox)
CHECK_SLOTS = 2
#: how long a page waits for a free verifier slot
CHECK_WAIT_S = 60.0


class Viewer:
    """What the pages need: the folder's catalog (rediscovered on the overview) and caches."""

    def __init__(self, path: str | Path, *, task_check: TaskCheck | None = None):
        self.path = Path(path)
        self.task_check = task_check
        self.lock = threading.Lock()
        self.catalog: Catalog = discover(self.path)
        self._checks: OrderedDict[tuple[str, int, int], Mapping[str, Any]] = OrderedDict()
        self._checks_lock = threading.Lock()  # pages are built on worker threads
        self._check_slots = threading.BoundedSemaphore(CHECK_SLOTS)

    def rediscover(self) -> Catalog:
        """Look for files that appeared since the last look (indexes are kept)."""
        with self.lock:
            self.catalog = discover(self.path, self.catalog)
            return self.catalog

    def check_task(self, key: str, row: int) -> Mapping[str, Any] | None:
        """The task checker's verdict on a task record's reference answer (cached)."""
        if self.task_check is None:
            return {"note": "no task checker: the verdict is computed by `gemkit view`"}
        coll = self.catalog.collection(key)
        cache_key = (key, row, len(coll.index))
        with self._checks_lock:
            if cache_key in self._checks:
                return self._checks[cache_key]
        raw, error = coll.record(row)
        if raw is None or error or "task" not in raw and "prompt" not in raw:
            return None
        rel = raw.get("database")
        db = None
        note = ""
        if isinstance(rel, str) and rel:
            db, note = find_database(self.catalog.allowed, coll.folder, rel)
        if not self._check_slots.acquire(timeout=CHECK_WAIT_S):
            return {"note": "the verifier is busy with other records; reload the page to retry"}
        try:
            with self._checks_lock:  # another page may have checked it while this one waited
                if cache_key in self._checks:
                    return self._checks[cache_key]
            result = dict(self.task_check(task_record(raw), db))
        except Exception as e:  # noqa: BLE001 - a checker failure is shown, not raised
            log.exception("task checker failed on %s row %d", key, row)
            result = {"note": f"the verifier could not be run: {type(e).__name__}: {e}"}
        finally:
            self._check_slots.release()
        if note and not result.get("verdict"):
            result["note"] = f"{result.get('note') or ''} ({note})".strip()
        with self._checks_lock:
            self._checks[cache_key] = result
            while len(self._checks) > 64:
                self._checks.popitem(last=False)
        return result


def _page(body: str, status: int = 200) -> web.Response:
    data = body.encode("utf-8", "replace")  # a lone surrogate in a record is not an error
    return web.Response(body=data, status=status, content_type="text/html", charset="utf-8")


def _row(request: web.Request) -> int:
    raw = request.query.get("r", "")
    try:
        return int(raw)
    except ValueError:
        raise ViewError(f"r must be a record number, got {raw[:40]!r}") from None


def make_app(
    path: str | Path, *, task_check: TaskCheck | None = None, host: str = "127.0.0.1"
) -> web.Application:
    """The viewer's aiohttp application over `path` (a folder or one JSONL file), to be
    served on `host` (a Host header may name it, a loopback name or the connection's address)."""
    viewer = Viewer(path, task_check=task_check)
    root = str(viewer.catalog.allowed)
    gate = Guard()  # no token: a browser cannot send one
    gate.bind(host)

    async def in_thread(fn: Callable[[], Any]) -> Any:
        return await asyncio.get_running_loop().run_in_executor(None, fn)

    @web.middleware
    async def guard(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        try:
            if request.method not in ("GET", "HEAD"):
                resp: web.StreamResponse = _page(
                    pages.error_page(405, "the viewer is read-only: only GET requests", root=root),
                    405,
                )
                resp.headers["Allow"] = "GET, HEAD"
            elif refused := gate.check(request):
                resp = _page(
                    pages.error_page(refused.status, refused.message, root=root), refused.status
                )
            else:
                resp = await handler(request)
        except web.HTTPException as e:
            text = "no such page" if e.status == 404 else e.reason
            resp = _page(pages.error_page(e.status, text, root=root), e.status)
        except ViewError as e:
            resp = _page(pages.error_page(404, str(e), root=root), 404)
        except Exception as e:  # noqa: BLE001 - a page, never a traceback, for any failure
            log.exception("viewer page %s failed", request.path_qs)
            line = str(e).splitlines()[0][:200] if str(e) else ""
            text = f"the viewer failed on this page ({type(e).__name__}: {line}); see its log"
            resp = _page(pages.error_page(500, text, root=root), 500)
        resp.headers.update(HEADERS)
        return resp

    async def overview(request: web.Request) -> web.Response:
        def build() -> Markup:
            return pages.overview(viewer.rediscover())

        return _page(await in_thread(build))

    async def listing(request: web.Request) -> web.Response:
        coll = viewer.catalog.collection(request.query.get("c", ""))
        return _page(await in_thread(lambda: pages.list_page(viewer.catalog, coll, request.query)))

    async def record(request: web.Request) -> web.Response:
        coll = viewer.catalog.collection(request.query.get("c", ""))
        row = _row(request)

        def build() -> Markup:
            coll.refresh()
            check = viewer.check_task(coll.key, row) if coll.kind.name == "tasks" else None
            return pages.record_page(viewer.catalog, coll, row, request.query, task_check=check)

        return _page(await in_thread(build))

    async def raw(request: web.Request) -> web.Response:
        coll = viewer.catalog.collection(request.query.get("c", ""))
        row = _row(request)

        def build() -> bytes:
            coll.refresh()
            record, error = coll.record(row)
            if record is None:
                raise ViewError(error or "unreadable record")
            return json.dumps(record, ensure_ascii=True, indent=1, default=str).encode("ascii")

        body = await in_thread(build)
        return web.Response(body=body, content_type="application/json", charset="utf-8")

    async def plots(request: web.Request) -> web.Response:
        coll = viewer.catalog.collection(request.query.get("c", ""))
        return _page(await in_thread(lambda: pages.plots_page(viewer.catalog, coll)))

    async def static(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in STATIC_FILES:
            raise web.HTTPNotFound()
        body = (STATIC / name).read_bytes()
        return web.Response(body=body, content_type=STATIC_FILES[name], charset="utf-8")

    async def favicon(request: web.Request) -> web.Response:
        return web.Response(status=204)

    app = web.Application(middlewares=[guard])
    app[VIEWER] = viewer
    app.router.add_get("/", overview)
    app.router.add_get("/list", listing)
    app.router.add_get("/record", record)
    app.router.add_get("/raw", raw)
    app.router.add_get("/plots", plots)
    app.router.add_get("/static/{name}", static)
    app.router.add_get("/favicon.ico", favicon)
    return app


async def start(
    path: str | Path,
    *,
    host: str = "127.0.0.1",
    port: int = 8765,
    task_check: TaskCheck | None = None,
) -> tuple[web.AppRunner, str]:
    """Start serving; returns the runner (to `cleanup()`) and the address to open."""
    app = make_app(path, task_check=task_check, host=host)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    try:
        await site.start()
    except OSError as e:
        await runner.cleanup()
        why = e.strerror or str(e)
        raise ViewError(
            f"cannot listen on {host}:{port} ({why}); pass another --port, or --port 0 for a "
            "free one"
        ) from None
    bound = runner.addresses[0][1] if runner.addresses else port
    shown = f"[{host}]" if ":" in host else host
    return runner, f"http://{shown}:{bound}/"


class ViewServer(AppThread):
    """The viewer on a background thread: `with ViewServer(path) as v: open(v.url)`."""

    def __init__(
        self,
        path: str | Path,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        task_check: TaskCheck | None = None,
    ):
        self.path, self.host, self.port, self.task_check = path, host, port, task_check

        async def serve() -> tuple[web.AppRunner, str]:
            return await start(path, host=host, port=port, task_check=task_check)

        super().__init__(serve, name="gemkit-view")

    def __enter__(self) -> ViewServer:
        super().__enter__()
        return self
