"""Runs: records on disk as they are made, resumable after kill -9, exported as a dataset."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gemkit.cli import main
from gemkit.errors import GemkitError
from gemkit.synth.qa.run import RunConfig, read_records, run

CONFIG = {"world_size": 400, "seed": 2, "min_inject": 2, "min_fuzz": 1}
ARGS = ["--world-size", "400", "--seed", "2", "--min-inject", "2", "--min-fuzz", "1"]


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("clean")
    stats = run(out, RunConfig(n=6, **CONFIG))
    return out, stats


def ids(out: Path) -> list[str]:
    return [r["id"] for r in read_records(out)]


def test_a_run_keeps_n_verified_records_with_the_full_schema(clean_run):
    out, stats = clean_run
    records = read_records(out)
    assert len(records) == 6 == stats.kept
    r = records[0]
    for key in ("id", "question", "answer", "answer_aliases", "supporting_facts", "edits", "n_inject",
                "n_fuzz", "verification", "seed", "corpus"):
        assert key in r
    assert r["n_inject"] >= 2 and r["n_fuzz"] >= 1
    v = r["verification"]
    assert v["quality"]["passed"] and v["uniqueness"]["passed"] and v["uniqueness"]["candidates"] == 1
    assert v["difficulty"]["closed_book_correct"] == 0 and v["difficulty"]["tool_solver_success"]
    assert v["difficulty"]["tool_calls"] > 0
    assert {e["op"] for e in r["edits"]} == {"inject", "fuzz"}
    assert (out / "corpus.jsonl").exists()


def test_the_dataset_folder_loads_with_datasets(clean_run):
    import datasets

    out, _ = clean_run
    ds = datasets.load_from_disk(str(out / "dataset"))
    assert ds.num_rows == 6
    assert ds[0]["question"] == read_records(out)[0]["question"]


def test_the_same_settings_make_the_same_records_with_two_workers(clean_run, tmp_path):
    out, _ = clean_run
    run(tmp_path, RunConfig(n=6, **CONFIG), workers=2, export=False)
    assert read_records(tmp_path) == read_records(out)


def test_a_run_killed_with_sigkill_resumes_without_loss_or_duplicate(clean_run, tmp_path):
    out, _ = clean_run
    cmd = [sys.executable, "-m", "gemkit", "synth", "qa", "-n", "6", "--out", str(tmp_path), *ARGS]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    qa = tmp_path / "qa.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        if qa.exists() and qa.read_bytes().count(b"\n") >= 2:
            break
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    before = ids(tmp_path)
    assert 2 <= len(before) < 6, "the kill should land mid-run"
    with qa.open("a") as f:  # a write torn by the kill
        f.write('{"id": "qa-2-00000')
    run(tmp_path, RunConfig(n=6, **CONFIG), export=False)
    after = ids(tmp_path)
    assert after[: len(before)] == before
    assert len(after) == len(set(after)) == 6
    assert read_records(tmp_path) == read_records(out)


def test_resuming_with_other_settings_is_refused_with_what_differs(clean_run):
    out, _ = clean_run
    with pytest.raises(GemkitError, match="world_size: 400 there, 500 now"):
        run(out, RunConfig(n=6, **{**CONFIG, "world_size": 500}))


def test_a_larger_n_continues_an_existing_run(clean_run, tmp_path):
    out, _ = clean_run
    run(tmp_path, RunConfig(n=3, **CONFIG), export=False)
    run(tmp_path, RunConfig(n=6, **CONFIG), export=False)
    assert read_records(tmp_path) == read_records(out)


def test_cli_prints_the_stage_table(tmp_path, capsys):
    assert main(["synth", "qa", "-n", "2", "--out", str(tmp_path), *ARGS]) == 0
    shown = capsys.readouterr().out
    assert "kept" in shown and "mean injections" in shown and "closed-book accuracy" in shown
    assert len(read_records(tmp_path)) == 2


@pytest.mark.parametrize("argv, message", [
    (["--llm", "http://x/v1"], "--llm needs --model"),
    (["--seeds", "s.jsonl"], "need a model"),
    (["--corpus", "wiki.jsonl"], "need a model"),
    (["--corpus", "wiki.jsonl", "--llm", "http://x/v1", "--model", "m"], "--corpus needs --seeds"),
    (["--seeds", "missing.jsonl", "--llm", "http://x/v1", "--model", "m"], "does not exist"),
])
def test_cli_explains_bad_options(tmp_path, capsys, argv, message):
    assert main(["synth", "qa", "-n", "1", "--out", str(tmp_path), *argv]) == 2
    assert message in capsys.readouterr().out
    assert not (tmp_path / "run.json").exists()


def test_cli_rejects_a_negative_count(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["synth", "qa", "-n", "-3", "--out", str(tmp_path)])
    assert "expected a number >= 1" in capsys.readouterr().err


def test_rejected_items_are_logged_with_their_stage(clean_run):
    out, stats = clean_run
    lines = [json.loads(x) for x in (out / "rejected.jsonl").read_text().splitlines()]
    assert len(lines) == stats.items - stats.kept
    assert all(x["rejected_stage"] in ("seed", "edits", "quality", "difficulty", "uniqueness", "shortcut") for x in lines)
