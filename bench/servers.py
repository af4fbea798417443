"""HTTP server throughput: env-server steps/s (toy:Copy-v0) and search-server requests/s.

Each server runs in its own process on 127.0.0.1; `--clients` concurrent aiohttp clients
(keep-alive) send requests for `--seconds` each. Run: `python bench/servers.py [--clients 8]`.
Prints requests/s per row; compare runs on one machine only (the numbers are its own).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import socket
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tools_search import queries, synthetic_corpus  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve_env(port: int) -> None:
    from aiohttp import web

    from gemkit.integrations.http_env import EnvServer

    web.run_app(EnvServer("toy:Copy-v0").app(), host="127.0.0.1", port=port, print=None)


def _serve_search(port: int, corpus: str, cache: str) -> None:
    from aiohttp import web

    from gemkit.search import SearchIndex
    from gemkit.search.server import make_app

    index = SearchIndex.open(corpus, cache_dir=cache)
    web.run_app(make_app(index), host="127.0.0.1", port=port, access_log=None, print=None)


async def _wait_up(url: str) -> None:
    async with aiohttp.ClientSession() as s:
        for _ in range(600):
            try:
                async with s.get(url + "/health") as r:
                    if r.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
    raise RuntimeError(f"{url} did not start")


async def _rate(url: str, clients: int, seconds: float, one: object) -> float:
    """Requests/s of `clients` loops each running `one(session)` until `seconds` pass."""
    done = 0
    stop = time.perf_counter() + seconds

    async def loop(session: aiohttp.ClientSession, k: int) -> None:
        nonlocal done
        state: dict = {"k": k}
        while time.perf_counter() < stop:
            await one(session, url, state)  # type: ignore[operator]
            done += 1

    start = time.perf_counter()
    async with aiohttp.ClientSession() as session:
        await asyncio.gather(*(loop(session, k) for k in range(clients)))
    return done / (time.perf_counter() - start)


async def _env_step(session: aiohttp.ClientSession, url: str, state: dict) -> None:
    if "sid" not in state or state.get("left", 0) == 0:
        body = {"seed": state["k"], "session_id": state.get("sid")}  # one session per client
        async with session.post(url + "/reset", data=json.dumps(body)) as r:
            state["sid"] = (await r.json())["session_id"]
        state["left"] = 3
    body = json.dumps({"session_id": state["sid"], "action": "apple"})
    async with session.post(url + "/step", data=body) as r:
        assert r.status == 200, await r.text()
        await r.read()
    state["left"] -= 1


def _search_one(qs: list[str]):
    async def one(session: aiohttp.ClientSession, url: str, state: dict) -> None:
        state["i"] = state.get("i", state["k"]) + 1
        body = json.dumps({"queries": [qs[state["i"] % len(qs)]], "topk": 3})
        async with session.post(url + "/retrieve", data=body) as r:
            assert r.status == 200, await r.text()
            await r.read()

    return one


def _run(target, args: tuple, url_port: int, clients: int, seconds: float, one) -> float:
    proc = multiprocessing.get_context("spawn").Process(target=target, args=args, daemon=True)
    proc.start()
    try:
        url = f"http://127.0.0.1:{url_port}"
        asyncio.run(_wait_up(url))
        return asyncio.run(_rate(url, clients, seconds, one))
    finally:
        proc.terminate()
        proc.join(10)


def main() -> None:
    """Print requests/s for an env step and a one-query search."""
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--docs", type=int, default=10_000)
    a = p.parse_args()

    port = _free_port()
    env_rate = _run(_serve_env, (port,), port, a.clients, a.seconds, _env_step)
    print(f"env server  toy:Copy-v0 /step (+/reset per 3) {env_rate:8.0f} requests/s")

    with tempfile.TemporaryDirectory() as tmp:
        corpus = synthetic_corpus(Path(tmp) / "corpus.jsonl", a.docs)
        port = _free_port()
        args = (port, str(corpus), str(Path(tmp) / "cache"))
        rate = _run(_serve_search, args, port, a.clients, a.seconds, _search_one(queries(1000)))
    print(f"search      /retrieve 1 query topk 3  {rate:8.0f} requests/s ({a.docs} docs)")


if __name__ == "__main__":
    main()
