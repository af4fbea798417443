"""Search and MCP tool throughput: index build, queries/s (in process, HTTP), MCP calls/s.

A synthetic corpus (Zipf-distributed words plus 30% stopwords, seeded) stands in for real text.
Run: `python bench/tools_search.py [--docs 10000] [--queries 1000] [--calls 300]`.
Each `bench_*` function returns a number so `bench/tools.py` can reuse it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from gemkit.search import SearchIndex
from gemkit.search.client import SearchClient
from gemkit.search.server import start_server

MCP_SERVER = Path(__file__).resolve().parents[1] / "tests" / "data" / "mcp_server.py"
STOP = "the of and a to in is was for on as with by at from that which it".split()


def _word_probs(vocab: int) -> np.ndarray:
    # Zipf with exponent 1, shifted by 50 ranks: the top English ranks are stopwords,
    # drawn separately, so the commonest content word is in about a fifth of the docs.
    p = 1.0 / (np.arange(vocab) + 50.0)
    return p / p.sum()


def synthetic_corpus(path: Path, n_docs: int, seed: int = 0, vocab: int = 50_000) -> Path:
    """Write `n_docs` docs of 124 words (30% stopwords; title 4 words) to `path`."""
    rng = np.random.default_rng(seed)
    words = np.array([f"w{i}" for i in range(vocab)] + STOP)
    content = rng.choice(vocab, size=(n_docs, 124), p=_word_probs(vocab))
    stops = rng.integers(vocab, vocab + len(STOP), size=(n_docs, 124))
    pick = np.where(rng.random((n_docs, 124)) < 0.3, stops, content)
    with path.open("w", encoding="utf-8") as f:
        for i in range(n_docs):
            toks = words[pick[i]]
            doc = {
                "id": f"doc{i}",
                "title": " ".join(toks[:4]),
                "text": " ".join(toks[4:]),
                "url": f"https://example.org/{i}",
            }
            f.write(json.dumps(doc) + "\n")
    return path


def queries(n: int, seed: int = 1, vocab: int = 50_000) -> list[str]:
    """Question-like queries: stopwords around 2-4 content words drawn like the corpus words."""
    rng = np.random.default_rng(seed)
    probs = _word_probs(vocab)
    out = []
    for _ in range(n):
        content = rng.choice(vocab, size=int(rng.integers(2, 5)), p=probs)
        out.append("what is the " + " ".join(f"w{k}" for k in content) + " of it?")
    return out


def free_port() -> int:
    """A TCP port nobody listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def bench_index_build(corpus: Path, cache: Path) -> float:
    """Seconds to build the index of `corpus` from scratch."""
    t0 = time.perf_counter()
    SearchIndex.open(corpus, index_path=cache / "build.sqlite")
    return time.perf_counter() - t0


def bench_index_reopen(corpus: Path, cache: Path) -> float:
    """Seconds to open an index that is already built (the reuse path)."""
    t0 = time.perf_counter()
    index = SearchIndex.open(corpus, index_path=cache / "build.sqlite")
    assert not index.rebuilt
    return time.perf_counter() - t0


def bench_search_inprocess(index: SearchIndex, qs: list[str], topk: int = 3) -> float:
    """Queries per second, one after another in this thread."""
    t0 = time.perf_counter()
    for q in qs:
        index.search(q, topk)
    return len(qs) / (time.perf_counter() - t0)


def bench_search_http(index: SearchIndex, qs: list[str], concurrency: int = 1) -> float:
    """Queries per second through a local server, one query per request, `concurrency` in flight."""

    async def run() -> float:
        runner, port = await start_server(index, "127.0.0.1", free_port())
        client = SearchClient(f"http://127.0.0.1:{port}")
        try:
            await client.search(qs[0], 3)  # warm the connection
            sem = asyncio.Semaphore(concurrency)

            async def one(q: str) -> None:
                async with sem:
                    await client.search(q, 3)

            t0 = time.perf_counter()
            await asyncio.gather(*(one(q) for q in qs))
            return len(qs) / (time.perf_counter() - t0)
        finally:
            await client.close()
            await runner.cleanup()

    return asyncio.run(run())


def _mcp_rate(spec: object, n_calls: int, concurrency: int) -> float:
    from gemkit.tools.mcp import MCPToolset

    async def run() -> float:
        toolset = MCPToolset.from_spec(spec)
        try:
            add = {t.name: t for t in await toolset.tools()}["add"]
            await add.call({"a": 0, "b": 0})
            sem = asyncio.Semaphore(concurrency)

            async def one(i: int) -> None:
                async with sem:
                    result = await add.call({"a": i, "b": 1})
                    assert result.text == str(i + 1), result.text

            t0 = time.perf_counter()
            await asyncio.gather(*(one(i) for i in range(n_calls)))
            return n_calls / (time.perf_counter() - t0)
        finally:
            await toolset.close()

    return asyncio.run(run())


def bench_mcp_stdio(n_calls: int = 300, concurrency: int = 1) -> float:
    """MCP tool calls per second to the test server over stdio (one session)."""
    return _mcp_rate([sys.executable, str(MCP_SERVER)], n_calls, concurrency)


def bench_mcp_http(n_calls: int = 300, concurrency: int = 1) -> float:
    """MCP tool calls per second to the test server over streamable HTTP (one session)."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, str(MCP_SERVER), "--http", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("the MCP test server did not start") from None
                time.sleep(0.1)
        return _mcp_rate(f"http://127.0.0.1:{port}/mcp", n_calls, concurrency)
    finally:
        proc.terminate()
        proc.wait(10)


def main() -> None:
    """Run every case and print a table."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--docs", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=1_000)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--no-mcp", action="store_true", help="skip the MCP cases")
    args = parser.parse_args()

    rows: list[tuple[str, str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        corpus = synthetic_corpus(folder / "corpus.jsonl", args.docs)
        rows.append(
            (f"index build, {args.docs:,} docs", f"{bench_index_build(corpus, folder):.2f} s")
        )
        rows.append(("index reopen (reuse)", f"{bench_index_reopen(corpus, folder) * 1e3:.1f} ms"))
        index = SearchIndex.open(corpus, index_path=folder / "build.sqlite")
        qs = queries(args.queries)
        rows.append(("search in process", f"{bench_search_inprocess(index, qs):,.0f} queries/s"))
        rows.append(
            ("search over HTTP, 1 in flight", f"{bench_search_http(index, qs, 1):,.0f} queries/s")
        )
        rows.append(
            ("search over HTTP, 16 in flight", f"{bench_search_http(index, qs, 16):,.0f} queries/s")
        )
    if not args.no_mcp:
        rows.append(("MCP stdio, 1 in flight", f"{bench_mcp_stdio(args.calls, 1):,.0f} calls/s"))
        rows.append(("MCP stdio, 16 in flight", f"{bench_mcp_stdio(args.calls, 16):,.0f} calls/s"))
        rows.append(("MCP HTTP, 1 in flight", f"{bench_mcp_http(args.calls, 1):,.0f} calls/s"))
        rows.append(("MCP HTTP, 16 in flight", f"{bench_mcp_http(args.calls, 16):,.0f} calls/s"))
    width = max(len(name) for name, _ in rows)
    print(f"{'case':<{width}}  result")
    for name, value in rows:
        print(f"{name:<{width}}  {value}")


if __name__ == "__main__":
    main()
