"""A logging proxy in front of a model server: how the `*-exchanges.jsonl` files are made.

    python tests/data/real-model/recording_proxy.py http://127.0.0.1:8093 out.jsonl --port 8765
    gemkit filter DATA --out F --llm http://127.0.0.1:8765/v1 --model qwen ...

Every request is forwarded as it is; each exchange is one JSON line `{t, dt, path, status,
request, response}` (the shape `gemkit.testing.replay` reads). It listens on 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import json
import time

from aiohttp import ClientSession, ClientTimeout, web


def main() -> None:
    """Serve the proxy until interrupted."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("upstream", help="the model server's root, e.g. http://127.0.0.1:8093")
    ap.add_argument("log", help="the JSONL file exchanges are appended to")
    ap.add_argument("--port", type=int, default=8765)
    args = ap.parse_args()
    upstream = args.upstream.rstrip("/")

    async def forward(request: web.Request) -> web.Response:
        body = await request.read()
        start = time.time()
        async with ClientSession(timeout=ClientTimeout(total=3600)) as session:
            async with session.request(
                request.method,
                upstream + request.path_qs,
                data=body or None,
                headers={"Content-Type": request.headers.get("Content-Type", "application/json")},
            ) as reply:
                data = await reply.read()
                status = reply.status
        try:
            sent = json.loads(body) if body else None
            got = json.loads(data) if data else None
        except ValueError:
            sent, got = None, None
        line = {"t": start, "dt": time.time() - start, "path": request.path,
                "status": status, "request": sent, "response": got}  # fmt: skip
        with open(args.log, "a", encoding="utf-8") as f:
            f.write(json.dumps(line, ensure_ascii=False) + "\n")
        return web.Response(body=data, status=status, content_type="application/json")

    app = web.Application(client_max_size=64 * 2**20)
    app.router.add_route("*", "/{tail:.*}", forward)
    web.run_app(app, host="127.0.0.1", port=args.port, print=None)


if __name__ == "__main__":
    main()
