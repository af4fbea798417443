"""Shared by the red-team tests: a real aiohttp app served on a thread of its own, so that a
blocking client (a browser driven by selenium, the official `openai` SDK) can attack it."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from gemkit.serving import AppThread


class Background(AppThread):
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
        self.port = 0

        @web.middleware
        async def count(request: web.Request, handler: Any) -> web.StreamResponse:
            self.passed.append(f"{request.method} {request.path}")
            return await handler(request)

        app.middlewares.append(count)  # innermost: runs only for what the guard let pass
        for m in app.middlewares:  # as `gemkit.serving.run_app` binds the guard
            if hasattr(m, "guard"):
                m.guard.bind(host)

        async def serve() -> tuple[web.AppRunner, str]:
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            await web.TCPSite(runner, host, 0).start()
            self.port = runner.addresses[0][1]
            return runner, f"http://{host}:{self.port}"

        super().__init__(serve, name="redteam-server", timeout=120)

    def __enter__(self) -> Background:
        super().__enter__()
        return self
