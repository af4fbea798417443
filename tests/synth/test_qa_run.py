"""Runs: records on disk as they are made, resumable after kill -9, exported as a dataset."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gemkit.cli import main
from gemkit.errors import GemkitError
from gemkit.synth.qa.run import STAGES, RunConfig, read_records, run

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


def test_the_dataset_folder_loads_with_datasets_as_train_and_test(clean_run):
    import datasets

    out, _ = clean_run
    ds = datasets.load_from_disk(str(out / "dataset"))
    assert isinstance(ds, datasets.DatasetDict) and list(ds) == ["train", "test"]
    assert ds["train"].num_rows + ds["test"].num_rows == 6
    by_question = {r["question"]: r for r in read_records(out)}
    for split in ds.values():
        for row in split:
            assert row["answer"] == by_question[row["question"]]["answer"]
    assert not set(ds["train"]["answer"]) & set(ds["test"]["answer"])


def test_the_same_settings_make_the_same_records_with_two_workers(clean_run, tmp_path):
    out, _ = clean_run
    run(tmp_path, RunConfig(n=6, **CONFIG), workers=2, export=False)
    assert read_records(tmp_path) == read_records(out)


# killed and resumed runs (byte-equal to an uninterrupted run): tests/runstore/test_kill_resume.py


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
    assert f"records: {tmp_path / 'qa.jsonl'}" in shown.replace("\n", "")



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
    assert all(x["rejected_stage"] in STAGES for x in lines)
