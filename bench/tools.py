"""Tool throughput: gemkit's sandboxed Python tool vs GEM's `PythonCodeTool`, side by side.

Cases: `calls` calls of `print(sum(range(100)))` (default 200) at concurrency 1 and 8, for
gemkit stateless (fresh state per call, a warm pool of sandboxed workers), gemkit stateful
(one session per concurrent caller) and GEM's tool (one subprocess per call; default
`sandbox_type="none"`, and `"bwrap"` when it works here). Every call's output is checked, so a
broken configuration shows as `failed`, never as a fast number. GEM columns appear when
`gem-llm` is installed. Each rate is the best of `--repeat` runs (default 3) on both sides: on a
small shared VM single runs of the same case vary by ±20%. Run:
`python bench/tools.py [--calls 200] [--repeat 3]`.

Search and MCP throughput: `bench_search()` / `bench_mcp()` below reuse `bench/tools_search.py`
when it is present and skip otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import io
import os
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from gemkit.tools.python import PythonArgs, PythonTool

CODE = "print(sum(range(100)))"
EXPECTED = "4950"
CONCURRENCY = (1, 8)

try:  # GEM prints on import; keep the table clean
    with contextlib.redirect_stdout(io.StringIO()):
        from gem.tools.python_code_tool import PythonCodeTool  # type: ignore[import-not-found]
except ImportError:
    PythonCodeTool = None


class Failed(Exception):
    """A case whose output was wrong (the configuration does not work here)."""


def check(text: str) -> None:
    """Raise `Failed` unless the call printed the expected result."""
    if EXPECTED not in text:
        raise Failed(text.strip().splitlines()[-1][:120] if text.strip() else "no output")


# -- gemkit ------------------------------------------------------------------------------------


async def _gemkit_rate(stateful: bool, calls: int, concurrency: int) -> float:
    # stateful: one tool (= one session) per concurrent caller, as one per episode in training
    tools = [PythonTool(stateful=stateful) for _ in range(concurrency)]
    if not stateful:
        tools = tools[:1] * concurrency  # stateless tools share one pool anyway
        tools[0].sandbox.warm(concurrency + 1)
    for t in set(tools):
        check((await t.call(PythonArgs(code=CODE))).text)  # warm: start the sandbox
    per_caller = calls // concurrency

    async def caller(tool: PythonTool) -> None:
        for _ in range(per_caller):
            check((await tool.call(PythonArgs(code=CODE))).text)

    t0 = time.perf_counter()
    await asyncio.gather(*(caller(t) for t in tools))
    elapsed = time.perf_counter() - t0
    for t in set(tools):
        await t.close()
    return per_caller * concurrency / elapsed


def bench_gemkit(stateful: bool, calls: int, concurrency: int) -> float:
    """Calls per second of gemkit's python tool (warm workers)."""
    return asyncio.run(_gemkit_rate(stateful, calls, concurrency))


def bench_gemkit_cold() -> float:
    """Seconds for the first call of a fresh stateful tool (sandbox start included)."""

    async def run() -> float:
        tool = PythonTool(stateful=True)
        t0 = time.perf_counter()
        check((await tool.call(PythonArgs(code=CODE))).text)
        elapsed = time.perf_counter() - t0
        await tool.close()
        return elapsed

    return asyncio.run(run())


# -- GEM ---------------------------------------------------------------------------------------


@contextlib.contextmanager
def _gem_environment():
    # GEM runs `python` from PATH and makes its temp dirs in the current directory
    old_cwd, old_path = os.getcwd(), os.environ.get("PATH", "")
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)
        os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{old_path}"
        try:
            yield
        finally:
            os.chdir(old_cwd)
            os.environ["PATH"] = old_path


def bench_gem(sandbox_type: str, calls: int, concurrency: int) -> float:
    """Calls per second of GEM's `PythonCodeTool` (threads for concurrency: it is sync)."""
    assert PythonCodeTool is not None
    tool = PythonCodeTool(sandbox_type=sandbox_type)
    action = f"<python>{CODE}</python>"

    def one(_: int) -> None:
        _, _, observation, _ = tool.execute_action(action)
        check(observation)

    with _gem_environment():
        one(0)
        t0 = time.perf_counter()
        with ThreadPoolExecutor(concurrency) as pool:
            list(pool.map(one, range(calls)))
        return calls / (time.perf_counter() - t0)


# -- hooks for the search and MCP tools ----------------------------------------------------------


def _tools_search_module() -> Any | None:
    path = Path(__file__).with_name("tools_search.py")
    if not path.is_file():
        return None
    spec = importlib.util.spec_from_file_location("bench_tools_search", path)
    if spec is None or spec.loader is None:
        return None
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except ImportError:
        return None
    return module


def bench_search(n_docs: int = 2_000, n_queries: int = 500) -> list[tuple[str, str]]:
    """HOOK (search tool): rows from bench/tools_search.py, or none when it is missing."""
    mod = _tools_search_module()
    if mod is None:
        return []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        corpus = mod.synthetic_corpus(folder / "corpus.jsonl", n_docs)
        mod.bench_index_build(corpus, folder)
        index = mod.SearchIndex.open(corpus, index_path=folder / "build.sqlite")
        qs = mod.queries(n_queries)
        return [
            ("search, in process", f"{mod.bench_search_inprocess(index, qs):,.0f} queries/s"),
            (
                "search over HTTP, 8 in flight",
                f"{mod.bench_search_http(index, qs, 8):,.0f} queries/s",
            ),
        ]


def bench_mcp(n_calls: int = 200) -> list[tuple[str, str]]:
    """HOOK (MCP tool): rows from bench/tools_search.py, or none when it is missing."""
    mod = _tools_search_module()
    if mod is None:
        return []
    return [
        ("MCP stdio, 1 in flight", f"{mod.bench_mcp_stdio(n_calls, 1):,.0f} calls/s"),
        ("MCP stdio, 8 in flight", f"{mod.bench_mcp_stdio(n_calls, 8):,.0f} calls/s"),
    ]


# -- table -------------------------------------------------------------------------------------


def measure(fn: Callable[[], float], repeat: int = 1) -> float | str:
    """The best rate of `repeat` runs, or a short reason when the case fails here."""
    try:
        return max(fn() for _ in range(repeat))
    except Failed as e:
        return f"failed: {e}"
    except Exception as e:  # a peer's broken configuration must not stop the table
        return f"failed: {type(e).__name__}: {e}"[:100]


NOTES: dict[str, str] = {}


def fmt(value: float | str | None) -> str:
    """A rate as text; a failure becomes a footnote mark."""
    if value is None:
        return "-"
    if isinstance(value, str):
        mark = NOTES.setdefault(value, f"failed [{len(NOTES) + 1}]")
        return mark
    return f"{value:,.0f}"


def main() -> None:
    """Run every case and print the table."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument(
        "--repeat", type=int, default=3, help="best of this many runs per case, for both sides"
    )
    parser.add_argument("--no-extras", action="store_true", help="skip search and MCP rows")
    args = parser.parse_args()
    console = Console()

    table = Table(title=f"python tool, calls/s ({args.calls} x {CODE!r})")
    table.add_column("case")
    table.add_column("concurrency", justify="right")
    table.add_column("gemkit", justify="right")
    table.add_column("GEM none", justify="right")
    table.add_column("GEM bwrap", justify="right")
    table.add_column("gemkit / GEM none", justify="right")
    for concurrency in CONCURRENCY:
        gem_none = gem_bwrap = None
        if PythonCodeTool is not None:
            gem_none = measure(lambda c=concurrency: bench_gem("none", args.calls, c), args.repeat)
            gem_bwrap = measure(lambda c=concurrency: bench_gem("bwrap", args.calls, c))
        for stateful in (False, True):
            ours = measure(
                lambda s=stateful, c=concurrency: bench_gemkit(s, args.calls, c), args.repeat
            )
            ratio = (
                f"{ours / gem_none:.1f}x"
                if isinstance(ours, float) and isinstance(gem_none, float)
                else "-"
            )
            table.add_row(
                "stateful" if stateful else "stateless",
                str(concurrency),
                fmt(ours),
                fmt(gem_none),
                fmt(gem_bwrap),
                ratio,
            )
    console.print(table)
    for reason, mark in NOTES.items():
        console.print(f"{mark}: {reason}", markup=False)
    cold = measure(bench_gemkit_cold)
    if isinstance(cold, float):
        console.print(f"gemkit first call of a new session (sandbox start): {cold * 1e3:.0f} ms")

    if not args.no_extras:
        rows = [*measure_rows(bench_search), *measure_rows(bench_mcp)]
        if rows:
            extra = Table(title="search and MCP tools")
            extra.add_column("case")
            extra.add_column("result", justify="right")
            for name, value in rows:
                extra.add_row(name, value)
            console.print(extra)


def measure_rows(fn: Callable[[], list[tuple[str, str]]]) -> list[tuple[str, str]]:
    """Rows of a hook, or one row saying why it could not run."""
    try:
        return fn()
    except Exception as e:
        return [(fn.__name__, f"skipped: {type(e).__name__}: {e}"[:100])]


if __name__ == "__main__":
    main()
