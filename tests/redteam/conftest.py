"""Shared by the red-team tests: a real aiohttp app served on a thread of its own, so that a
blocking client (a browser driven by selenium, the official `openai` SDK) can attack it."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from aiohttp import web


class Background:
    """`app` on `host` (a free port) in a thread with its own event loop, as `run_app` would
    serve it (the guard knows the bound address); `passed` counts requests the guard let
    through to the app's handlers.

    ```python
    with Background(app) as srv:
        urllib.request.urlopen(srv.url + "/health")
    ```
    """

    def __init__(self, app: web.Application, host: str = "127.0.0.1"):
        self.app, self.host = app, host
        self.passed: list[str] = []
        self.url = ""
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None

        @web.middleware
        async def count(request: web.Request, handler: Any) -> web.StreamResponse:
            self.passed.append(f"{request.method} {request.path}")
            return await handler(request)

        app.middlewares.append(count)  # innermost: runs only for what the guard let pass
        for m in app.middlewares:  # as `gemkit.serving.run_app` binds the guard
            if hasattr(m, "guard"):
                m.guard.bind(host)

    def _run(self) -> None:
        async def main() -> None:
            self._stop = asyncio.Event()
            runner = web.AppRunner(self.app, access_log=None)
            try:
                await runner.setup()
                site = web.TCPSite(runner, self.host, 0)
                await site.start()
                self.port = runner.addresses[0][1]
                self.url = f"http://{self.host}:{self.port}"
            except BaseException as e:  # noqa: BLE001 - handed to the starting thread
                self._error = e
                self._ready.set()
                return
            self._ready.set()
            try:
                await self._stop.wait()
            finally:
                await runner.cleanup()

        self._loop = asyncio.new_event_loop()
        try:
            self._loop.run_until_complete(main())
        finally:
            self._loop.close()

    def __enter__(self) -> Background:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        assert self._ready.wait(120), "the server did not start"
        if self._error is not None:
            raise self._error
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(60)
