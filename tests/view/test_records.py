"""The record readers: what each gemkit output file holds, as the pages show it."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gemkit.rollout import load_jsonl, to_dataset
from gemkit.view.records import (
    KINDS,
    read_episode,
    read_qa,
    read_task,
    read_turn_rows,
    sniff_kind,
    task_record,
)


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def test_a_tool_call_is_paired_with_its_result_and_the_reasoning_is_kept(tool_episodes):
    ep = read_episode(lines(tool_episodes / "episodes.jsonl")[0])
    first = ep["turns"][0]
    (call,) = first["calls"]
    assert call["name"] == "python" and call["arguments"] == {"code": "print(400 / 18)"}
    assert call["result"] == "22.22222222222222" and call["is_error"] is False
    assert first["reasoning"] == ["400 pages at 18 a day."]
    last = ep["turns"][-1]
    assert last["reasoning"] == ["396 < 400 <= 414.", "22 days leave 4 pages"], "both kinds"
    assert last["action"] == "He needs \\boxed{23} days.", "the think block is shown apart"
    assert isinstance(ep["success"], bool) and ep["tool_calls"] == 3


def test_a_context_edit_shows_the_messages_it_cut(tool_episodes):
    ep = read_episode(lines(tool_episodes / "episodes.jsonl")[0])
    edited = [t for t in ep["turns"] if t["edits"]]
    assert edited, "the discard strategy trimmed the chat at least once"
    turn = edited[0]
    edit = turn["edits"][0]
    assert edit["strategy"] == "discard_all"
    assert edit["figures"]["tokens_before"] > edit["figures"]["tokens_after"]
    removed = [m for _, m in edit["removed"] if m is not None]
    assert removed and {m["role"] for m in removed} <= {"assistant", "tool"}
    # what was cut is what the model saw before: the earlier call and its result
    assert removed == [turn["context"][j] for j, m in edit["removed"] if m is not None]


def test_new_messages_are_those_after_the_last_assistant_message(tool_episodes):
    ep = read_episode(lines(tool_episodes / "episodes.jsonl")[0])
    assert [m["role"] for m in ep["turns"][0]["new_messages"]] == ["user"]
    assert [m["role"] for m in ep["turns"][1]["new_messages"]] == ["tool"]


def test_a_text_episode_from_run_out_reads_with_its_figures(demo):
    # `gemkit run --out DIR` (the demo's games) writes every id's episodes to DIR/episodes.jsonl
    raw = next(r for r in lines(demo / "episodes.jsonl") if r["env_id"] == "game:Sudoku-v0-easy")
    ep = read_episode(raw)
    assert ep["env_id"] == "game:Sudoku-v0-easy" and ep["success"] is True
    assert ep["num_turns"] == raw["num_turns"] and ep["total_reward"] == raw["total_reward"]
    assert ep["turns"][0]["observation"].startswith("Sudoku")
    assert ep["turns"][0]["calls"] == []


def test_datasets_exports_of_rollouts_read_like_the_jsonl(tool_episodes, tmp_path):
    jsonl = lines(tool_episodes / "episodes.jsonl")
    episodes = load_jsonl(tool_episodes / "episodes.jsonl")
    per_episode = to_dataset(episodes, per="episode")
    per_turn = to_dataset(episodes, per="turn")
    want = read_episode(jsonl[1])
    got = read_episode(KINDS["episodes"].arrow(per_episode[1]))  # as the store reads a row
    assert got["turns"] == want["turns"]
    rows = [r for r in per_turn if r["episode"] == 1]
    grouped = read_turn_rows(rows[::-1])  # any order: the reader sorts by turn
    assert [t["calls"] for t in grouped["turns"]] == [t["calls"] for t in want["turns"]]
    assert [t["edits"] for t in grouped["turns"]] == [t["edits"] for t in want["turns"]]
    assert sniff_kind(per_turn.column_names) == "turns"
    assert sniff_kind(per_episode.column_names) == "episodes"


def test_a_qa_record_replays_each_edit_on_the_seed_question(demo):
    raw = lines(demo / "synth-qa" / "qa.jsonl")[0]
    qa = read_qa(raw)
    assert qa["seed"]["question"] == raw["seed"]["question"]
    assert len(qa["steps"]) == len(raw["edits"])
    question = qa["seed"]["question"]
    for step in qa["steps"]:
        assert step["question_before"] == question and step["at"] >= 0
        assert step["before"] in question and step["after"] in step["question_after"]
        question = step["question_after"]
    # the agent words the final question from its logical form: shown as a last step
    if question != raw["question"]:
        assert qa["final_wording"] == (question, raw["question"])
    assert [s for s, _ in qa["verification"]] == ["quality", "difficulty", "uniqueness", "shortcut"]
    assert qa["facts"] == raw["supporting_facts"] and qa["stage"] == "kept"


def test_a_rejected_qa_record_says_at_which_stage(demo):
    rows = lines(demo / "synth-qa" / "rejected.jsonl")
    for raw in rows:
        qa = read_qa(raw)
        assert qa["stage"] == raw["rejected_stage"] and qa["reason"] == raw["reason"]
        assert KINDS["qa"].columns_of(raw)["stage"] == raw["rejected_stage"]


def test_the_qa_datasets_export_reads_like_qa_jsonl(demo):
    splits = datasets.load_from_disk(str(demo / "synth-qa" / "dataset"))  # train and test
    by_id = {r["id"]: r for r in lines(demo / "synth-qa" / "qa.jsonl")}
    for row in (row for split in splits.values() for row in split):
        got, want = read_qa(KINDS["qa"].arrow(row)), read_qa(by_id[row["id"]])
        for key in ("question", "steps", "facts", "verification", "final_wording", "seed"):
            assert got[key] == want[key], key


def test_a_task_reads_with_its_tools_rules_and_reference_answer(demo):
    raw = lines(demo / "synth-tasks" / "tasks.jsonl")[0]
    task = read_task(raw)
    assert task["prompt"] == raw["task"]["prompt"] and task["status"] == "kept"
    assert [t["name"] for t in task["tools"]] == [t["name"] for t in raw["tools"]]
    assert task["reference_answer"] == raw["reference_answer"]
    assert task["constraints"] == raw["constraints"]
    rejected = read_task(lines(demo / "synth-tasks" / "rejected.jsonl")[0])
    assert rejected["status"] == "rejected" and rejected["reason"]


def test_the_tasks_datasets_export_reads_like_tasks_jsonl(demo, tmp_path):
    from gemkit.synth.tasks.run import export_datasets

    records = lines(demo / "synth-tasks" / "tasks.jsonl")
    folder = export_datasets(tmp_path, records, root=demo / "synth-tasks")
    for row, raw in zip(datasets.load_from_disk(str(folder)), records, strict=True):
        got, want = read_task(KINDS["tasks"].arrow(row)), read_task(raw)
        for key in ("prompt", "tools", "reference_answer", "stats", "history", "spec"):
            assert got[key] == want[key], key
        assert task_record(KINDS["tasks"].arrow(row))["task"] == raw["task"]


def test_unknown_fields_are_kept_and_missing_ones_are_not_errors():
    ep = read_episode({"env_id": "x", "turns": [{"action": "a"}], "run_id": 7})
    assert ep["extra"] == {"run_id": 7} and ep["turns"][0]["action"] == "a"
    assert ep["turns"][0]["reward"] is None and ep["success"] is None
    assert read_qa({})["question"] == "" and read_task({})["tools"] == []


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=25,
)
records = st.dictionaries(
    st.sampled_from(
        ["env_id", "turns", "success", "total_reward", "num_turns", "tool_calls", "tokens",
         "error", "question", "answer", "edits", "verification", "seed", "supporting_facts",
         "rejected_stage", "reason", "task", "tools", "stats", "level", "category", "history",
         "reference_answer", "observation", "action", "info", "episode", "turn", "prompt"]
    ) | st.text(max_size=5),
    json_values | st.lists(st.dictionaries(
        st.sampled_from(["observation", "action", "info", "reward", "role", "content",
                         "tool_calls", "parsed_calls", "tool_results", "context_edits", "op",
                         "before", "after"]), json_values, max_size=6), max_size=3),
    max_size=10,
)  # fmt: skip


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records)
def test_no_reader_raises_on_any_json_object(raw):
    for kind in KINDS.values():
        kind.columns_of(raw)
        kind.preview(raw)
        kind.read(raw)
    read_turn_rows([raw, raw])
    task_record(raw)
