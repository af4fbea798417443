"""kill -9 at several points of each long-running command, then resume: the folder ends
byte-equal to an uninterrupted run's (records, manifest, summary, databases, export)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from gemkit.cli import main as cli
from gemkit.envs.games.guess_the_number import GuessTheNumberExpert
from gemkit.testing.openai_server import ScriptedOpenAIServer

GEMKIT = [sys.executable, "-m", "gemkit"]
#: written with wall-clock stamps (a log, not a result) or a cache named by the folder's path
NOT_COMPARED = ("progress.log", ".index")


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` (but logs and caches) by relative path, with its bytes."""
    out = {}
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder)
        if path.is_file() and rel.parts[0] not in NOT_COMPARED:
            out[rel.as_posix()] = path.read_bytes()
    return out


def lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def kill_when(cmd: list[str], ready: Callable[[], bool]) -> None:
    """Start `cmd` and SIGKILL its whole process group as soon as `ready()` holds.

    The kill points are counted records, not timers: the run is killed after the Nth record
    is on disk, wherever it then is (writing the next one, in the middle of a step, ...).
    """
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    deadline = time.monotonic() + 300  # a guard against a hung run, not a speed bound
    try:
        while proc.poll() is None and time.monotonic() < deadline and not ready():
            time.sleep(0.002)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


def assert_killed_then_resumed_is_byte_equal(
    cmd: list[str], killed: Path, whole: Path, watch: str, points: list[int], total: int
) -> None:
    kill_when(cmd, lambda: (killed / "run.json").exists())  # as early as it can be
    for n in points:
        kill_when(cmd, lambda n=n: lines(killed / watch) >= n)
        got = lines(killed / watch)
        assert n <= got < total, f"the kill after record {n} should land mid-run, found {got}"
    assert cli(cmd[3:]) == 0, "the resumed run finishes"
    assert snapshot(killed) == snapshot(whole)
    # no lock, no temporary of a killed write: only the search index cache may be hidden
    assert {p.name for p in killed.glob(".*")} <= {".index"}


# -- gemkit eval ------------------------------------------------------------------------------


ENV = "game:GuessTheNumber-v0-easy"


async def slow_binary_search(request: dict) -> str:
    await asyncio.sleep(0.02)  # so the run lasts long enough to be killed in the middle
    expert = GuessTheNumberExpert(low=1, high=20)
    action = ""
    for message in request["messages"]:
        if message["role"] == "user":
            action = expert.choose(message["content"])
    return f"Let me think. {action}"


def test_eval_killed_three_times_then_resumed_is_byte_equal_to_one_run(tmp_path):
    with ScriptedOpenAIServer(slow_binary_search) as srv:
        args = ["eval", ENV, "--base-url", srv.base_url, "--model", "m", "-n", "12",
                "--concurrency", "3", "--temperature", "0"]  # fmt: skip
        assert cli([*args, "--out", str(tmp_path / "whole")]) == 0
        cmd = [*GEMKIT, *args, "--out", str(tmp_path / "killed"), "--resume"]
        assert_killed_then_resumed_is_byte_equal(
            cmd, tmp_path / "killed", tmp_path / "whole", "episodes.jsonl", [2, 6], 12
        )


# -- gemkit synth qa --------------------------------------------------------------------------


def test_synth_qa_killed_three_times_then_resumed_is_byte_equal_to_one_run(tmp_path):
    args = ["synth", "qa", "-n", "6", "--world-size", "400", "--seed", "2", "--min-inject", "2",
            "--min-fuzz", "1"]  # fmt: skip
    assert cli([*args, "--out", str(tmp_path / "whole")]) == 0
    cmd = [*GEMKIT, *args, "--out", str(tmp_path / "killed"), "--resume"]
    assert_killed_then_resumed_is_byte_equal(
        cmd, tmp_path / "killed", tmp_path / "whole", "qa.jsonl", [1, 3], 6
    )


# -- gemkit synth tasks -----------------------------------------------------------------------


def test_synth_tasks_killed_three_times_then_resumed_is_byte_equal_to_one_run(tmp_path):
    # no pass@k filter: 4 tasks kept of the 12 ids (a level 1 that random plans rarely pass is
    # one the greedy baseline often fails once too)
    args = ["synth", "tasks", "-n", "4", "--min-level", "1", "--max-level", "3", "--k", "0",
            "--seed", "9", "--no-export"]  # fmt: skip
    assert cli([*args, "--out", str(tmp_path / "whole")]) == 0
    cmd = [*GEMKIT, *args, "--out", str(tmp_path / "killed"), "--resume"]
    assert_killed_then_resumed_is_byte_equal(
        cmd, tmp_path / "killed", tmp_path / "whole", "tasks.jsonl", [1, 2], 4
    )
    db = sorted(p.name for p in (tmp_path / "killed" / "db").iterdir())
    assert len(db) == 4, "one database per kept task: a killed task's half database is gone"
