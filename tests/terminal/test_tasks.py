"""The shipped tasks: well-formed, registered, solved by their reference solutions, and not by
a wrong solution or by doing nothing, on both backends."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

import gemkit
from gemkit.envs.terminal.env import TerminalEnv
from gemkit.envs.terminal.task import Task, TaskError, builtin_tasks, load_task

TASKS = builtin_tasks()


def grade(backend: str, name: str, script: str) -> dict:
    """Run `script` as the agent's only command in a fresh episode; return the final info."""
    env = TerminalEnv(name, backend=backend)
    try:
        env.reset(seed=0)
        if script:
            env.run_command(script)
        _, reward, terminated, _, info = env.step("submit")
        assert terminated
        return {**info, "reward": reward}
    finally:
        env.close()


def grade_all(backend: str, which: str) -> dict[str, dict]:
    jobs = {name: getattr(task, which) if which else "" for name, task in TASKS.items()}
    with ThreadPoolExecutor(4) as pool:  # container starts are I/O-bound waits on the engine
        results = pool.map(lambda item: grade(backend, *item), jobs.items())
        return dict(zip(jobs, results, strict=True))


def test_the_suite_ships_at_least_twelve_tasks_with_solutions_and_wrong_solutions():
    assert len(TASKS) >= 12
    assert all(t.solution.strip() and t.wrong.strip() and t.tests for t in TASKS.values())


def test_the_suite_covers_files_text_scripting_and_repairs():
    tags = {tag for t in TASKS.values() for tag in t.tags}
    assert {"files", "text", "scripting", "repair"} <= tags


def test_every_task_has_an_id_and_the_suite_has_one():
    ids = {s.id for s in gemkit.list_envs("terminal")}
    assert ids == {f"terminal:{n}-v0" for n in TASKS} | {"terminal:Suite-v0"}


def test_every_task_passes_with_its_reference_solution(backend):
    results = grade_all(backend, "solution")
    failed = {n: r["test_results"] for n, r in results.items() if r["reward"] != 1.0}
    assert failed == {}
    assert all(r["pass_fraction"] == 1.0 and r["success"] for r in results.values())


def test_every_task_fails_with_its_wrong_solution(backend):
    results = grade_all(backend, "wrong")
    passed = [n for n, r in results.items() if r["reward"] != 0.0 or r["success"]]
    assert passed == []
    assert all(r["pass_fraction"] < 1.0 for r in results.values())


def test_no_task_passes_when_the_agent_does_nothing(backend):
    results = grade_all(backend, "")
    assert [n for n, r in results.items() if r["reward"] != 0.0 or r["success"]] == []


def test_a_task_file_with_a_missing_field_names_the_file_and_the_field(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("name: Broken\ndescription: d\ninstruction: i\ntests: []\n")
    with pytest.raises(TaskError, match=r"broken\.yaml.*'tests'"):
        load_task(path)


def test_a_task_file_with_an_unknown_field_lists_the_allowed_ones(tmp_path):
    path = tmp_path / "odd.yaml"
    path.write_text(
        "name: Odd\ndescription: d\ninstruction: i\nsolution: s\n"
        "tests: [{name: t, run: 'true'}]\ntimeout: 5\n"
    )
    with pytest.raises(TaskError, match=r"unknown fields \['timeout'\]; allowed"):
        load_task(path)


def test_a_task_file_that_is_not_yaml_says_so(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("name: [unclosed\n")
    with pytest.raises(TaskError, match="not valid YAML"):
        load_task(path)


def test_a_task_can_be_given_as_an_object(bwrap_backend):
    task = Task.from_dict(
        {
            "name": "Hello",
            "description": "Say hello.",
            "instruction": "Write hello to /work/out.",
            "solution": "echo hello > out",
            "tests": [{"name": "hello", "run": "grep -qx hello /work/out"}],
        }
    )
    env = TerminalEnv(task, backend=bwrap_backend)
    try:
        env.reset()
        env.run_command(task.solution)
        assert env.step("done")[1] == 1.0
    finally:
        env.close()
