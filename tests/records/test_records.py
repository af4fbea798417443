"""Typed records: one schema per kind for the JSONL writer, the reader and the datasets export."""

from __future__ import annotations

import json

import datasets
import pytest

import gemkit
from gemkit.records.base import JsonText, Record
from gemkit.records.episodes import EpisodeRecord
from gemkit.records.export import features, from_row
from gemkit.records.qa import QARecord
from gemkit.records.tasks import TaskRecord
from gemkit.rollout import Episode, load_jsonl, run_episodes, save_jsonl, to_dataset


def _lines(path):
    return [json.loads(x) for x in path.read_text().splitlines()]


def _json_fields(model: type[Record]) -> set[str]:
    return {
        n for n, f in model.model_fields.items() if any(isinstance(m, JsonText) for m in f.metadata)
    }


def _string_columns(ds: datasets.Dataset) -> set[str]:
    return {n for n, f in ds.features.items() if getattr(f, "dtype", None) == "string"}


@pytest.fixture(scope="module")
def qa_run(tmp_path_factory):
    from gemkit.synth.qa.run import RunConfig, run

    out = tmp_path_factory.mktemp("qa")
    run(out, RunConfig(n=3, world_size=1500, seed=4, min_inject=2, min_fuzz=1))
    return out


@pytest.fixture(scope="module")
def task_run(tmp_path_factory):
    from gemkit.synth.tasks.run import RunConfig, run_synthesis

    out = tmp_path_factory.mktemp("tasks")
    run_synthesis(RunConfig(category="trip_planning", n=2, out=out, k=1, seed=6, max_level=3))
    return out


def test_every_qa_line_is_a_versioned_qa_record(qa_run):
    rows = _lines(qa_run / "qa.jsonl")
    assert rows and all(r["schema_version"] == QARecord.VERSION for r in rows)
    assert [QARecord.parse(r).to_json() for r in rows] == rows


def test_the_qa_export_has_every_field_nested_and_reads_back_as_the_same_records(qa_run):
    # before: the export dropped answer_type, rejected_edits and k, and stored edits,
    # verification and the logical form as JSON strings
    splits = datasets.load_from_disk(str(qa_run / "dataset"))
    ds = datasets.concatenate_datasets([splits["train"], splits["test"]])
    assert list(ds.features) == list(QARecord.model_fields)
    assert ds.features == features(QARecord)
    assert _string_columns(ds) - {
        "id",
        "question",
        "answer",
        "corpus",
        "answer_type",
        "construction",
    } == _json_fields(QARecord)
    assert isinstance(ds[0]["verification"]["difficulty"]["closed_book_tries"], int)
    assert isinstance(ds[0]["edits"], list) and isinstance(ds[0]["edits"][0], dict)
    rows = _lines(qa_run / "qa.jsonl")
    assert sorted((from_row(QARecord, r).to_json() for r in ds), key=lambda r: r["k"]) == rows


def test_the_task_export_has_every_field_nested_and_reads_back_as_the_same_records(task_run):
    ds = datasets.load_from_disk(str(task_run / "dataset"))
    assert ds.features == features(TaskRecord)
    assert _string_columns(ds) - {"id", "category", "database", "model"} == _json_fields(TaskRecord)
    assert isinstance(ds[0]["history"][0]["n_answers"], int)
    raw = _lines(task_run / "tasks.jsonl")[0]["stats"]["pass_at_k"]
    assert ds[0]["stats"]["pass_at_k"] == {"k": 1, "passes": raw["passes"]}
    assert isinstance(ds[0]["stats"]["pass_at_k"]["passes"], int)
    assert [from_row(TaskRecord, r).to_json() for r in ds] == _lines(task_run / "tasks.jsonl")


def test_episodes_round_trip_through_jsonl_and_the_export(tmp_path):
    env_id = "toy:Doors-v0"
    eps = run_episodes(env_id, lambda: gemkit.make_policy("expert", env_id), 3, seed=2)
    path = save_jsonl(eps, tmp_path / "eps.jsonl")
    rows = _lines(path)
    assert all(r["schema_version"] == EpisodeRecord.VERSION for r in rows)
    assert [e.to_dict() for e in load_jsonl(path)] == rows
    ds = to_dataset(eps, per="episode")
    assert ds.features == features(EpisodeRecord)
    assert [Episode.from_record(from_row(EpisodeRecord, r)).to_dict() for r in ds] == rows


def test_a_record_written_before_versions_reads_as_version_1(task_run):
    raw = _lines(task_run / "tasks.jsonl")[0]
    raw.pop("schema_version")
    assert TaskRecord.parse(raw).schema_version == 1


def test_an_episode_file_with_a_foreign_line_is_refused_not_skipped(tmp_path):
    # before: any complete line that was not an episode was silently dropped
    from gemkit.records.base import RecordError

    env_id = "toy:Doors-v0"
    path = save_jsonl(
        run_episodes(env_id, lambda: gemkit.make_policy("expert", env_id), 1), tmp_path / "e.jsonl"
    )
    with path.open("a") as f:
        f.write(json.dumps({"question": "?", "answer": "!"}) + "\n")
    with pytest.raises(RecordError, match="line 2: not an episode record: field 'env_id': missing"):
        load_jsonl(path)


def test_an_export_of_no_records_still_has_every_column(tmp_path):
    # a run that keeps nothing (every rewrite rejected) still writes a loadable dataset
    from gemkit.records.export import save_dataset

    save_dataset([], QARecord, tmp_path / "empty")
    ds = datasets.load_from_disk(str(tmp_path / "empty"))
    assert len(ds) == 0 and ds.features == features(QARecord)
