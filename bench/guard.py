"""What the shared server guard (`gemkit.serving.Guard`) costs per request.

Two measures, side by side in one run:

- `Guard.check` alone on a request as a client sends it (Host, Content-Type, no browser
  headers), without and with a token: microseconds per call;
- a trivial JSON route served on 127.0.0.1 with the guard and without it (only the JSON error
  middleware, as the servers had before), `--clients` keep-alive clients for `--seconds`
  each, rounds alternated: requests/s and the ratio.

Run: `python bench/guard.py [--clients 8] [--seconds 3] [--rounds 3]`. Compare numbers of one
run only (the machine's load moves them); print `uptime` with them.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import multiprocessing
import socket
import statistics
import time
import timeit

import aiohttp


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _app(guarded: bool):
    from aiohttp import web

    from gemkit.serving import error_middleware, middlewares

    async def echo(request: web.Request) -> web.Response:
        return web.json_response(await request.json())

    mws = middlewares("POST /x", None) if guarded else [error_middleware("POST /x")]
    app = web.Application(middlewares=mws)
    app.router.add_post("/x", echo)
    return app


def _serve(port: int, guarded: bool) -> None:
    from aiohttp import web

    web.run_app(_app(guarded), host="127.0.0.1", port=port, access_log=None, print=None)


async def _load(url: str, clients: int, seconds: float) -> float:
    body = b'{"session_id": "abc", "action": "\\\\boxed{10}"}'
    headers = {"Content-Type": "application/json"}
    done = 0
    stop = time.perf_counter() + seconds

    async def client(s: aiohttp.ClientSession) -> None:
        nonlocal done
        while time.perf_counter() < stop:
            async with s.post(url + "/x", data=body, headers=headers) as r:
                assert r.status == 200, await r.text()
                await r.read()
            done += 1

    async with aiohttp.ClientSession() as s:
        for _ in range(100):  # up yet?
            try:
                async with s.post(url + "/x", data=body, headers=headers) as r:
                    if r.status == 200:
                        break
            except aiohttp.ClientError:
                await asyncio.sleep(0.1)
        start = time.perf_counter()
        await asyncio.gather(*(client(s) for _ in range(clients)))
        return done / (time.perf_counter() - start)


def check_cost() -> dict[str, float]:
    """Microseconds per `Guard.check` on a plain client request."""
    from aiohttp.test_utils import make_mocked_request

    from gemkit.serving import Guard

    headers = {"Host": "127.0.0.1:8010", "Content-Type": "application/json"}
    out = {}
    for label, guard, extra in (
        ("no token", Guard(), {}),
        ("token", Guard(token="s3cret"), {"Authorization": "Bearer s3cret"}),
    ):
        request = make_mocked_request("POST", "/x", headers={**headers, **extra})
        assert guard.check(request) is None
        n = 20000
        call = functools.partial(guard.check, request)
        seconds = min(timeit.repeat(call, number=n, repeat=5))
        out[label] = seconds / n * 1e6
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    for label, us in check_cost().items():
        print(f"Guard.check ({label}): {us:.2f} us per request")
    ctx = multiprocessing.get_context("spawn")
    rates: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(args.rounds):
        for guarded in (False, True):
            port = _free_port()
            proc = ctx.Process(target=_serve, args=(port, guarded), daemon=True)
            proc.start()
            try:
                rate = asyncio.run(_load(f"http://127.0.0.1:{port}", args.clients, args.seconds))
            finally:
                proc.terminate()
                proc.join()
            rates[guarded].append(rate)
    before, after = statistics.median(rates[False]), statistics.median(rates[True])
    print(f"JSON route without the guard: {before:,.0f} requests/s (median of {args.rounds})")
    print(f"JSON route with the guard:    {after:,.0f} requests/s")
    ratios = [b / a for a, b in zip(rates[False], rates[True], strict=True)]
    print(f"per round, with/without: {' '.join(f'{r:.2f}' for r in ratios)}")
    print(f"median ratio with/without: {statistics.median(ratios):.3f}")


if __name__ == "__main__":
    main()
