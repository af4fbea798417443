"""`gemkit demo` (what `make demo` runs) is deterministic: the same bytes and the same figures
on every run, and a second run in the same folder changes nothing."""

from __future__ import annotations

import json
import re
from pathlib import Path

from gemkit.cli import main as cli

#: a log with wall-clock stamps, and a search cache named by the folder's path
NOT_COMPARED = ("progress.log", ".index")
#: printed figures that measure this machine's speed, not the demo's results
TIMING = re.compile(r"per minute|\d+:\d\d:\d\d")


def snapshot(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not set(p.relative_to(folder).parts) & set(NOT_COMPARED)
    }


def printed(out: str) -> list[str]:
    return [line for line in out.splitlines() if not TIMING.search(line)]


def test_the_demo_writes_the_same_bytes_and_prints_the_same_figures_every_run(
    tmp_path, capsys, monkeypatch
):
    from gemkit.cli.console import console

    monkeypatch.setattr(console, "width", 1000)  # keep rich from folding the printed lines
    shown = []
    for name in ("first", "second"):  # the same relative --out, so the same printed paths
        (tmp_path / name).mkdir()
        monkeypatch.chdir(tmp_path / name)
        assert cli(["demo", "--out", "demo-out", "-n", "2"]) == 0
        shown.append(printed(capsys.readouterr().out))
    first, second = tmp_path / "first" / "demo-out", tmp_path / "second" / "demo-out"
    assert snapshot(first) == snapshot(second)
    assert shown[0] == shown[1]
    calls = [line for line in shown[0] if "baseline agent made" in line]
    assert len(calls) == 2, "a line per toolworld episode (their tool calls differed run to run)"
    assert any("failed:" in line for line in calls), "the demo saves a failed, tool-using episode"
    assert shown[0][-1].strip() == "gemkit view demo-out", "it ends by pointing at the viewer"
    before = snapshot(first)
    monkeypatch.chdir(tmp_path / "first")
    assert cli(["demo", "--out", "demo-out", "-n", "2"]) == 0, "again: every part is done"
    assert snapshot(first) == before
    assert calls[0] in printed(capsys.readouterr().out)
    episodes = (first / "toolworld" / "episodes.jsonl").read_text().splitlines()
    assert [json.loads(e)["success"] for e in episodes] == [False, True]
    assert json.loads(episodes[0])["tool_calls"] > 0
