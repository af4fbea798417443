"""Records, resumable runs, pass@k, and the `toolworld:` envs played by the baseline agent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import gemkit
from gemkit.envs.toolworld.agent import parse_results
from gemkit.envs.toolworld.baselines import baseline_for
from gemkit.envs.toolworld.env import make_toolworld
from gemkit.registry import spec
from gemkit.synth.tasks.builtin_sets import make_builtin
from gemkit.synth.tasks.run import RunConfig, run_synthesis

RECORD_KEYS = {
    "id", "category", "level", "database", "tools", "task", "constraints", "verifier",
    "solution", "reference_answer", "stats", "history",
}  # fmt: skip


def test_records_carry_every_field_and_their_database(trip_run):
    assert len(trip_run.records) == 4
    for r in trip_run.records:
        assert RECORD_KEYS <= set(r)
        assert (trip_run.out / r["database"]).is_file()
        assert not Path(r["database"]).is_absolute()
        assert {"prompt", "answer_format"} <= set(r["task"])
        assert all({"name", "description", "parameters"} == set(t) for t in r["tools"])
        assert r["solution"]["kind"] == "builtin" and ":" in r["solution"]["ref"]
        assert r["verifier"]["kind"] == "builtin"
        assert r["stats"]["pass_at_k"]["k"] == 2 and r["stats"]["pass_at_k"]["passes"] >= 1
        assert r["stats"]["n_valid_solutions"] == r["history"][-1]["n_valid_solutions"] > 0
        assert [h["level"] for h in r["history"]] == list(range(1, r["level"] + 1))
    assert (trip_run.out / "dataset" / "dataset_info.json").is_file()


def test_env_plays_an_episode_with_the_baseline_agent(trip_run):
    env = gemkit.make("toolworld:TripPlanning-v0", path=trip_run.out)
    policy = spec("toolworld:TripPlanning-v0").make_expert()
    obs, info = env.reset(seed=0)
    assert "submit_result" in obs and info["tools"]
    for _ in range(10):
        obs, reward, terminated, truncated, info = env.step(policy.choose(obs))
        if terminated or truncated:
            break
    assert terminated and reward in (0.0, 1.0)
    assert info["success"] == (reward == 1.0)
    assert isinstance(info["violations"], list)
    assert info["success"] or info["violations"]
    env.close()


def test_reference_answer_earns_reward_one_and_a_broken_one_names_its_violation(trip_run):
    record = trip_run.records[0]
    env = make_toolworld(path=trip_run.out, partial_credit=True)
    env.reset(options={"index": 0})
    call = {"name": "submit_result", "arguments": {"plan": record["reference_answer"]}}
    obs, reward, terminated, _, info = env.step(f"<tool_call>{json.dumps(call)}</tool_call>")
    assert terminated and reward == 1.0 and info["violations"] == []
    env.reset(options={"index": 0})
    broken = [dict(d) for d in record["reference_answer"]]
    broken[1]["city"] = broken[0]["city"]
    _, reward, terminated, _, info = env.step(json.dumps(broken))  # a final answer, no tool
    assert terminated and 0.0 < reward < 1.0
    assert "no_repeat" in info["failed_constraints"] and "in_city" in info["failed_constraints"]


def test_tool_results_reach_the_agent_as_data(trip_run):
    env = make_toolworld(path=trip_run.out)
    env.reset(options={"index": 0})
    obs, *_ = env.step('<tool_call>{"name": "get_all_cities", "arguments": {}}</tool_call>')
    (cities,) = parse_results(obs)
    assert isinstance(cities, list) and len(cities) == 7
    bad = '<tool_call>{"name": "get_all_hotels_by_city", "arguments": {"city": "Atlantis"}}'
    obs, *_ = env.step(bad + "</tool_call>")
    assert "no city named 'Atlantis'" in obs


def test_builtin_set_is_generated_once_and_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("GEMKIT_CACHE_DIR", str(tmp_path))
    env = make_builtin("trip_planning", builtin_n=2)
    obs, info = env.reset(seed=1)
    assert "Plan a" in obs
    folders = list((tmp_path / "toolworld").iterdir())
    assert len(folders) == 1 and (folders[0] / "tasks.jsonl").is_file()
    mtime = (folders[0] / "tasks.jsonl").stat().st_mtime
    make_builtin("trip_planning", builtin_n=2).reset(seed=2)
    assert (folders[0] / "tasks.jsonl").stat().st_mtime == mtime


def test_baseline_is_weaker_than_the_reference(trip_tasks):
    from gemkit.synth.tasks import get_category
    from gemkit.synth.tasks.run import make_record, pass_at_k

    cat = get_category("trip_planning")
    syn, db = min(trip_tasks, key=lambda t: t[0].history[-1]["valid_fraction"])
    record = make_record(cat, syn, "hard", db.path.name, [0, 0])
    passes = pass_at_k(record, db.path.parent, 8, seed=1)
    assert passes < 8
    assert cat.verify(db, syn.task, syn.reference_answer).passed


# a killed run resumed (byte-equal to an uninterrupted one) and torn lines: tests/runstore/


def test_parallel_workers_keep_the_same_tasks_as_one_worker(tmp_path):
    args = dict(n=3, min_level=1, max_level=2, k=0, seed=4, export=False)
    one = run_synthesis(RunConfig(out=tmp_path / "one", **args))
    two = run_synthesis(RunConfig(out=tmp_path / "two", workers=2, **args))
    assert [r["id"] for r in one.records] == [r["id"] for r in two.records]
    assert [r["history"] for r in one.records] == [r["history"] for r in two.records]


def test_bad_settings_get_clear_messages(tmp_path):
    from gemkit.synth.tasks import TaskSynthesisError

    with pytest.raises(TaskSynthesisError, match="known: trip_planning"):
        RunConfig(category="trip_plan", out=tmp_path)
    with pytest.raises(TaskSynthesisError, match="min-level"):
        RunConfig(min_level=3, max_level=2, out=tmp_path)
    with pytest.raises(TaskSynthesisError, match="--model"):
        RunConfig(llm="http://x", out=tmp_path)


def test_baseline_agent_submits_through_the_submit_tool():
    agent = baseline_for("trip_planning", seed=0)
    assert "get_all_cities" in agent.choose("Plan a 3-day trip starting in Lisbon on 2025-06-01.")


def test_a_cloned_env_plays_its_own_episode(trip_run):
    env = make_toolworld(path=trip_run.out)
    env.reset(options={"index": 1})
    twin = env.clone()
    record = trip_run.records[1]
    call = {"name": "submit_result", "arguments": {"plan": record["reference_answer"]}}
    _, reward, terminated, _, _ = twin.step(f"<tool_call>{json.dumps(call)}</tool_call>")
    assert terminated and reward == 1.0
    assert not env.unwrapped.done  # the original episode is untouched


def test_env_settings_users_get_wrong_are_explained(trip_run, tmp_path):
    from gemkit.envs.toolworld.env import ToolWorldError

    with pytest.raises(ToolWorldError, match="holds no tasks.jsonl"):
        make_toolworld(path=tmp_path)
    with pytest.raises(ToolWorldError, match="no task of level 99 in this set; it has levels"):
        make_toolworld(path=trip_run.out, level=99)
    levels = {r["level"] for r in trip_run.records}
    env = make_toolworld(path=trip_run.out, level=min(levels))
    _, info = env.reset(seed=0)
    assert info["level"] == min(levels)


def test_each_episode_offers_exactly_its_tasks_tools(trip_run):
    env = make_toolworld(path=trip_run.out)
    for i, record in enumerate(trip_run.records):
        _, info = env.reset(options={"index": i})
        offered = [t["function"]["name"] for t in info["tools"]]
        assert offered == [t["name"] for t in record["tools"]]
    level1 = dict(trip_run.records[0])
    level1["tools"] = [t for t in level1["tools"] if t["name"] != "get_weather_by_city_date"]
    env = make_toolworld(records=[level1], root=trip_run.out)
    _, info = env.reset(seed=0)
    assert "get_weather_by_city_date" not in [t["function"]["name"] for t in info["tools"]]
    call = {"name": "get_weather_by_city_date", "arguments": {"city": "x", "date": "y"}}
    obs, *_ = env.step(f"<tool_call>{json.dumps(call)}</tool_call>")
    assert "get_weather_by_city_date" in obs and "error" in obs.lower()
