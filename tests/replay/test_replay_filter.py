"""`gemkit filter` against a real small model's recorded replies (runs in CI, offline).

`filter-qa-exchanges.jsonl` holds what Qwen2.5-Coder-0.5B (llama.cpp) replied to every
request `gemkit filter` made on the small QA folder below, with `recording_proxy.py` in front
of it; the folder is rebuilt here with the same command, so every request meets its own
recorded reply. On trip tasks the filter meets the replies the same model gave `gemkit eval`
on toolworld (`eval-e4*`): the filter now plays eval's episode shape, so those are replies to
requests of the same kind. That model never calls a tool on these prompts: the filter must
say it cannot judge difficulty then, and exit 1, rather than pass off "never solved" as a
verdict.
"""

from __future__ import annotations

import json
from pathlib import Path

from gemkit.cli import main as cli
from gemkit.testing import ReplayOpenAIServer

FIXTURES = Path(__file__).resolve().parents[1] / "data" / "real-model"
#: the commands the recorded folders were made with (see the recording's README entry)
QA = ["synth", "qa", "-n", "3", "--world-size", "400", "--seed", "1", "--min-inject", "1",
      "--min-fuzz", "1"]  # fmt: skip
TRIPS = ["synth", "tasks", "-n", "2", "--max-level", "1", "--k", "0", "--random-k", "0",
         "--seed", "0", "--no-export"]  # fmt: skip
FILTER = ["--model", "qwen", "--k", "2", "--max-tokens", "200", "--concurrency", "2"]


def _filter(data: Path, out: Path, recordings: list[Path], steps: str, capsys) -> tuple:
    with ReplayOpenAIServer(recordings) as srv:
        code = cli(["filter", str(data), "--out", str(out), "--llm", srv.base_url, *FILTER,
                    "--max-steps", steps])  # fmt: skip
        coverage = srv.replay.coverage()
        bodies = [r.body for r in srv.chat_requests]
    return code, coverage, bodies, " ".join(capsys.readouterr().out.split())


def _says_it_cannot_judge(code: int, shown: str, out: Path, items: int) -> None:
    verdicts = [json.loads(x) for x in (out / "verdicts.jsonl").read_text().splitlines()]
    assert len(verdicts) == items and not any(v["kept"] for v in verdicts)
    assert code == 1
    assert f"no tool-using attempt solved any of the {items} items with qwen" in shown
    assert "cannot judge difficulty" in shown
    assert json.loads((out / "summary.json").read_text())["judged"] is False


def test_filter_on_qa_against_its_own_recorded_replies(tmp_path, capsys):
    assert cli([*QA, "--out", str(tmp_path / "data")]) == 0
    capsys.readouterr()
    recording = [FIXTURES / "filter-qa-exchanges.jsonl"]
    code, coverage, bodies, shown = _filter(
        tmp_path / "data", tmp_path / "f", recording, "6", capsys
    )
    # every request is one the recording holds: the same episode shape, prompt for prompt
    assert coverage["nearest"] == 0 and coverage["exact"] == len(bodies) == 12, coverage
    assert all("tools" not in b for b in bodies)  # text mode: the tools once, in the prompt
    _says_it_cannot_judge(code, shown, tmp_path / "f", 3)


def test_filter_on_trips_against_the_replies_eval_got_on_toolworld(tmp_path, capsys):
    assert cli([*TRIPS, "--out", str(tmp_path / "data")]) == 0
    capsys.readouterr()
    recordings = sorted(FIXTURES.glob("eval-e4*.jsonl"))
    code, coverage, bodies, shown = _filter(
        tmp_path / "data", tmp_path / "f", recordings, "4", capsys
    )
    assert coverage["recordings_used"] >= 4 and len(bodies) >= 8, coverage
    assert all("tools" not in b for b in bodies)
    _says_it_cannot_judge(code, shown, tmp_path / "f", 2)
