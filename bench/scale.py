"""Terminal scaling: Docker command round trips per second and container start time.

Cases, each checked (a broken setup shows as `failed`, never as a fast number):

- `docker exec true` through the Docker SDK in one running container (the engine's floor);
- a `bash` command through gemkit's Docker terminal (`echo ok`: output captured in the
  container, cut, status parsed), at concurrency 1 and 4 (one container per caller);
- the same command through the bwrap backend (one fresh sandbox per command);
- container start: a gemkit terminal container made, started and ready, mean of `--starts`
  (default 10), and `docker run --rm true` through the SDK beside it.

Ray vector-env throughput lives in `bench/scale_ray.py`. Run: `python bench/scale.py`.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from rich.console import Console
from rich.table import Table

from gemkit.envs.terminal.bwrap import BwrapTerminal, bwrap_available
from gemkit.envs.terminal.docker import DockerTerminal, docker_available
from gemkit.envs.terminal.images import IMAGES, build_images, docker_client


class Failed(Exception):
    """A case whose output was wrong (the configuration does not work here)."""


def rate(calls: int, concurrency: int, make: Callable[[], Callable[[], None]]) -> float:
    """Calls per second of `calls` calls spread over `concurrency` callers (set up untimed)."""
    callers = [make() for _ in range(concurrency)]
    per = calls // concurrency
    start = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(lambda call: [call() for _ in range(per)], callers))
    return per * concurrency / (time.perf_counter() - start)


def bench_exec(calls: int) -> float:
    """Raw `docker exec true` round trips per second through the SDK."""
    t = DockerTerminal()
    t.start()
    container = t.client.containers.get(t.container_id)
    try:
        if container.exec_run(["true"]).exit_code != 0:
            raise Failed("exec of true failed")
        start = time.perf_counter()
        for _ in range(calls):
            container.exec_run(["true"])
        return calls / (time.perf_counter() - start)
    finally:
        t.close()


def bench_terminal(kind: str, calls: int, concurrency: int) -> float:
    """gemkit terminal commands per second (`echo ok`, checked) on `kind`."""
    terminals = []

    def make() -> Callable[[], None]:
        t = DockerTerminal() if kind == "docker" else BwrapTerminal()
        t.start()
        terminals.append(t)

        def call() -> None:
            r = t.run("echo ok", timeout=10)
            if r.output != "ok\n":
                raise Failed(r.output[:120])

        return call

    try:
        return rate(calls, concurrency, make)
    finally:
        for t in terminals:
            t.close()


def bench_start(starts: int) -> tuple[float, float]:
    """Mean seconds to start a gemkit terminal container, and `docker run --rm true`."""
    gemkit_times, run_times = [], []
    t = DockerTerminal()
    client = docker_client()
    for _ in range(starts):
        begin = time.perf_counter()
        t.start({"hello.txt": "hi\n"})
        gemkit_times.append(time.perf_counter() - begin)
        if t.run("cat hello.txt").output != "hi\n":
            raise Failed("the started container lacks its files")
        t.close()
        begin = time.perf_counter()
        client.containers.run(IMAGES["busybox"], ["true"], remove=True, network_mode="none")
        run_times.append(time.perf_counter() - begin)
    return statistics.mean(gemkit_times), statistics.mean(run_times)


def main() -> None:
    """Run every case that works here and print one table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=100, help="commands per rate case")
    parser.add_argument("--starts", type=int, default=10, help="container starts to average")
    args = parser.parse_args()
    console = Console(width=110)
    table = Table(title="Terminal backends")
    table.add_column("case")
    table.add_column("result", justify="right")
    why_docker = docker_available()
    if why_docker is None:
        build_images()
        cases: list[tuple[str, Callable[[], str]]] = [
            ("docker exec `true` (SDK), round trips/s", lambda: f"{bench_exec(args.calls):.1f}"),
            (
                "gemkit docker command, calls/s, 1 container",
                lambda: f"{bench_terminal('docker', args.calls, 1):.1f}",
            ),
            (
                "gemkit docker command, calls/s, 4 containers",
                lambda: f"{bench_terminal('docker', args.calls, 4):.1f}",
            ),
        ]

        def starts() -> str:
            ours, plain = bench_start(args.starts)
            return f"{ours:.3f} s (docker run --rm true: {plain:.3f} s)"

        cases.append((f"container start, mean of {args.starts}", starts))
    else:
        cases = [("docker", lambda: f"skipped: {why_docker}")]
    why_bwrap = bwrap_available()
    if why_bwrap is None:
        cases += [
            (
                "gemkit bwrap command, calls/s, 1 sandbox",
                lambda: f"{bench_terminal('bwrap', args.calls, 1):.1f}",
            ),
            (
                "gemkit bwrap command, calls/s, 4 sandboxes",
                lambda: f"{bench_terminal('bwrap', args.calls, 4):.1f}",
            ),
        ]
    else:
        cases.append(("bwrap", lambda: f"skipped: {why_bwrap}"))
    for name, run in cases:
        try:
            result = run()
        except Failed as e:
            result = f"failed: {e}"
        table.add_row(name, result)
    console.print(table)
    # the Ray half (vector throughput at 1 and 2 workers against the async vector) has its
    # own flags; run it as part of the same report when Ray is installed
    if importlib.util.find_spec("ray") is not None:
        subprocess.run([sys.executable, str(Path(__file__).with_name("scale_ray.py"))], check=False)
    else:
        console.print("Ray half skipped: install gemkit[ray]")


if __name__ == "__main__":
    main()
