"""Runs: records on disk as they are made, resumable after kill -9, exported as a dataset."""

from __future__ import annotations

import json
import re
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
    for key in (
        "id",
        "question",
        "answer",
        "answer_aliases",
        "supporting_facts",
        "edits",
        "n_inject",
        "n_fuzz",
        "verification",
        "seed",
        "corpus",
    ):
        assert key in r
    assert r["n_inject"] >= 2 and r["n_fuzz"] >= 1
    v = r["verification"]
    assert (
        v["quality"]["passed"] and v["uniqueness"]["passed"] and v["uniqueness"]["candidates"] == 1
    )
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


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--llm", "http://x/v1"], "--llm needs --model"),
        (["--seeds", "s.jsonl"], "need a model"),
        (["--corpus", "wiki.jsonl"], "need a model"),
        (
            ["--corpus", "wiki.jsonl", "--llm", "http://x/v1", "--model", "m"],
            "--corpus needs --seeds",
        ),
        (["--seeds", "missing.jsonl", "--llm", "http://x/v1", "--model", "m"], "does not exist"),
    ],
)
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


# -- the summary, duplicates and splits ---------------------------------------------------------


def test_the_summary_accounts_for_every_work_item_and_keeps_edits_apart(tmp_path, capsys):
    assert main(["synth", "qa", "-n", "3", "--out", str(tmp_path), *ARGS]) == 0
    shown = capsys.readouterr().out
    items = int(re.search(r"│ work items\s+│\s+(\d+)", shown).group(1))
    kept = int(re.search(r"│ kept\s+│\s+(\d+)", shown).group(1))
    rejected = [int(n) for n in re.findall(r"│ rejected at \w+\s+│\s+(\d+)", shown)]
    assert "rejected at shortcut" in shown  # the stage the old table left out
    assert kept + sum(rejected) == items and kept == 3
    # edits sit in their own table, not among the work items
    work_table = shown.split("kept records")[0]
    assert "edits" not in work_table.replace("rejected at edits", "")
    assert "accepted injections" in shown.split("edits (a work item tries many)")[1]
    assert "published" not in shown
    assert "kept per minute" not in shown  # 3 records: too few for a rate


def test_a_rate_per_minute_needs_a_hundred_new_records():
    from gemkit.synth.qa.run import RunStats

    stats = RunStats(kept=99, seconds=30.0)
    assert stats.kept_per_minute() is None
    stats.kept = 100
    assert stats.kept_per_minute() == 200.0
    assert RunStats(kept=150, resumed=100, seconds=30.0).kept_per_minute() is None


def test_a_question_asked_twice_is_kept_once(tmp_path, monkeypatch):
    """Two work items that end in the same question (normalised): the second is a duplicate."""
    from gemkit.synth.qa import run as qa_run

    real = qa_run.Synthesizer.amake

    async def twice(self, k):
        out = await real(self, k // 2)  # items 2j and 2j + 1 grow the same question
        return {**out, "k": k, "id": self.record_id(k)}

    monkeypatch.setattr(qa_run.Synthesizer, "amake", twice)
    stats = run(tmp_path, RunConfig(n=3, **CONFIG), export=False)
    records = read_records(tmp_path)
    questions = [r["question"].lower() for r in records]
    assert len(records) == 3 and len(set(questions)) == 3
    dups = [json.loads(x) for x in (tmp_path / "rejected.jsonl").read_text().splitlines()]
    dups = [d for d in dups if d["rejected_stage"] == "duplicate"]
    assert len(dups) >= 2 and stats.rejected["duplicate"] == len(dups)
    by_id = {r["id"]: r for r in records}
    for d in dups:
        first = by_id[d["reason"].removeprefix("the same question as record ")]
        assert first["question"] == d["question"] and first["k"] == d["k"] - 1
    assert stats.kept + sum(stats.rejected.values()) == stats.items


def test_the_export_keeps_one_copy_of_a_question_an_older_run_wrote_twice(clean_run, tmp_path):
    import datasets

    from gemkit.synth.qa.run import export_dataset

    out, _ = clean_run
    lines = (out / "qa.jsonl").read_text().splitlines()
    copy = json.loads(lines[0])
    copy.update(k=999, id="qa-2-0000999", question=copy["question"].upper().replace("?", " ?"))
    (tmp_path / "qa.jsonl").write_text("\n".join([*lines, json.dumps(copy)]) + "\n")
    ds = datasets.load_from_disk(str(export_dataset(tmp_path)))
    ids = [i for split in ds.values() for i in split["id"]]
    assert len(ids) == len(lines) and "qa-2-0000999" not in ids


def test_the_env_plays_one_side_of_the_split_the_export_wrote(clean_run):
    import datasets

    import gemkit

    out, _ = clean_run
    ds = datasets.load_from_disk(str(out / "dataset"))
    for side in ("train", "test"):
        if not ds[side].num_rows:
            with pytest.raises(GemkitError, match=f"the {side} split of this set is empty"):
                gemkit.make("qa:Synth-v0", path=str(out), split=side)
            continue
        env = gemkit.make("qa:Synth-v0", path=str(out), split=side)
        questions = set()
        for i in range(ds[side].num_rows):
            obs, _ = env.reset(options={"index": i})
            questions.add(next(q for q in ds[side]["question"] if q in obs))
        assert questions == set(ds[side]["question"])
    with pytest.raises(GemkitError, match="split must be one of train, test"):
        gemkit.make("qa:Synth-v0", path=str(out), split="validation")
