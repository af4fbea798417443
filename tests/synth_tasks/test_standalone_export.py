"""A task-tuple dataset stands alone: its folder copied anywhere, or its Hub form, plays.

Before, each row named its database by a relative path (`db/<id>.sqlite`) that only the
synthesis folder held: a copy of `dataset/` alone, or a `push_to_hub` upload, lost every
database. Now each row carries its SQLite file.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gemkit.envs.toolworld.env import ToolWorldError, make_toolworld
from gemkit.synth.tasks.run import RunConfig, run_synthesis


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> tuple[Path, list[dict]]:
    out = tmp_path_factory.mktemp("synth")
    summary = run_synthesis(
        RunConfig(n=3, out=out, min_level=1, max_level=3, k=1, random_k=0, seed=4)
    )
    return out / "dataset", summary.records


def _elsewhere(folder: Path, tmp_path: Path) -> Path:
    """The dataset folder alone, copied where no synthesis folder is."""
    copy = tmp_path / "other-machine" / "trips"
    shutil.copytree(folder, copy)
    return copy


def _reference_rewards(env, records: list[dict]) -> list[float]:
    rewards = []
    for i, r in enumerate(records):
        obs, info = env.reset(options={"index": i})
        assert info["task_id"] == r["id"]
        answer = r["reference_answer"]
        call = '<tool_call>{"name": "submit_result", "arguments": {"plan": %s}}</tool_call>'
        import json

        _, reward, terminated, _, _ = env.step(call % json.dumps(answer))
        assert terminated
        rewards.append(reward)
    return rewards


def test_a_copied_dataset_folder_loads_and_plays_with_load_from_disk(
    exported, tmp_path, monkeypatch
):
    import datasets

    monkeypatch.setenv("GEMKIT_CACHE_DIR", str(tmp_path / "cache"))
    folder, records = exported
    copy = _elsewhere(folder, tmp_path)
    ds = datasets.load_from_disk(str(copy))
    assert ds.num_rows == 3 and "database_sqlite" in ds.column_names
    env = make_toolworld(records=ds)
    assert _reference_rewards(env, records) == [1.0, 1.0, 1.0]
    # a wrong plan still names what it broke: the tools and the verifier read the database
    env.reset(options={"index": 0})
    _, reward, _, _, info = env.step(
        '<tool_call>{"name": "submit_result", "arguments": {"plan": []}}</tool_call>'
    )
    assert reward == 0.0 and info["violations"]
    env.close()


def test_the_registered_id_plays_the_copied_folder_with_its_baseline(
    exported, tmp_path, monkeypatch
):
    import gemkit

    monkeypatch.setenv("GEMKIT_CACHE_DIR", str(tmp_path / "cache"))
    folder, _ = exported
    env = gemkit.make("toolworld:TripPlanning-v0", path=str(_elsewhere(folder, tmp_path)))
    agent = gemkit.make_policy("expert", "toolworld:TripPlanning-v0", seed=0)
    obs, info = env.reset(seed=0)
    for _ in range(12):
        obs, reward, terminated, truncated, info = env.step(agent.choose(obs))
        if terminated or truncated:
            break
    assert terminated and info.get("tool_uses", 0) > 1  # it looked things up in the database
    env.close()


def test_the_hub_form_parquet_plays_too(exported, tmp_path, monkeypatch):
    """`push_to_hub` stores parquet; `load_dataset` reads it back: the same round trip here."""
    import datasets

    monkeypatch.setenv("GEMKIT_CACHE_DIR", str(tmp_path / "cache"))
    folder, records = exported
    datasets.load_from_disk(str(folder)).to_parquet(str(tmp_path / "train.parquet"))
    hub = datasets.load_dataset(
        "parquet", data_files=str(tmp_path / "train.parquet"), split="train",
        cache_dir=str(tmp_path / "hf"),
    )  # fmt: skip
    env = make_toolworld(records=hub)
    assert _reference_rewards(env, records) == [1.0, 1.0, 1.0]
    env.close()


def test_a_dataset_without_databases_is_one_clear_line(exported, tmp_path):
    import datasets

    folder, _ = exported
    bare = datasets.load_from_disk(str(folder)).remove_columns(["database_sqlite"])
    with pytest.raises(ToolWorldError, match="carries no databases"):
        make_toolworld(records=bare)
