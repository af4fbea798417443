"""The `code:` env: answers are run against the task's tests in the sandbox."""

from __future__ import annotations

import json
import os
import uuid

import pytest

import gemkit
from gemkit.envs.code.env import CodeTaskError, extract_code

ADD = {"question": "Write add(a, b).", "tests": ["assert add(1, 2) == 3", "assert add(2, 2) == 4"]}
ECHO = {
    "question": "Print the input doubled.",
    "tests": [{"input": "2\n", "output": "4\n"}, {"input": "5\n", "output": "10\n"}],
}


def fenced(code: str) -> str:
    return f"Here is my solution:\n```python\n{code}\n```\n"


@pytest.fixture
def env():
    # generous: a loaded CI machine must not turn a correct answer into a timeout
    return gemkit.make("code:Jsonl-v0", problems=[ADD, ECHO], timeout=10)


def test_every_builtin_problem_is_solved_by_its_reference_solution():
    env = gemkit.make("code:Builtin-v0")
    expert = gemkit.spec("code:Builtin-v0").make_expert()
    assert len(env.problems) >= 20
    for i in range(len(env.problems)):
        obs, _ = env.reset(options={"index": i})
        _, reward, terminated, _, info = env.step(expert.choose(obs))
        assert (reward, terminated, info["success"]) == (1.0, True, True), env.problems[i].id


def test_a_correct_solution_gets_full_reward(env):
    env.reset(options={"index": 0})
    obs, reward, terminated, truncated, info = env.step(fenced("def add(a, b):\n    return a + b"))
    assert (reward, terminated, truncated) == (1.0, True, False)
    assert info["passed"] == info["total"] == 2 and info["success"] is True
    assert obs == "All 2 tests passed."


def test_a_partly_wrong_solution_gets_the_fraction_passed_and_the_first_failure(env):
    env.reset(options={"index": 0})
    _, reward, _, _, info = env.step(fenced("def add(a, b):\n    return 4"))
    assert reward == 0.5 and info["success"] is False
    assert info["error"] == "assert add(1, 2) == 3: AssertionError"


def test_stdin_stdout_tests_compare_printed_output(env):
    env.reset(options={"index": 1})
    right = env.step(fenced("print(int(input()) * 2)"))
    env.reset(options={"index": 1})
    wrong = env.step(fenced("print(int(input()) + 2)"))
    assert right[1] == 1.0 and wrong[1] == 0.5, (right, wrong)
    assert "expected output '10\\n', got '7\\n'" in wrong[4]["error"]


@pytest.mark.parametrize("exit_call", ["import sys; sys.exit(0)", "import os; os._exit(0)"])
def test_exiting_before_the_tests_run_passes_none_of_them(env, exit_call):
    env.reset(options={"index": 0})
    _, reward, _, _, info = env.step(fenced(f"def add(a, b):\n    return 0\n{exit_call}"))
    assert reward == 0.0
    assert "exited before the test ran" in info["error"]


def test_an_answer_without_code_is_told_the_expected_format(env):
    env.reset(options={"index": 0})
    obs, reward, terminated, _, info = env.step("I think the answer is 3.")
    assert reward == 0.0 and terminated and info["invalid"] and info["success"] is False
    assert "```python" in obs and "No code found" in obs


def test_a_boxed_answer_is_accepted_as_code(env):
    env.reset(options={"index": 0})
    assert env.step("\\boxed{def add(a, b): return a + b}")[1] == 1.0


def test_the_last_python_block_is_the_answer():
    text = "```python\nprint(1)\n```\nbetter:\n```python\nprint(2)\n```\n```text\nlog\n```"
    assert extract_code(text) == "print(2)\n"


def test_malicious_code_is_contained_and_scores_zero(env):
    target = f"/tmp/gemkit-code-env-{uuid.uuid4().hex}"
    env.reset(options={"index": 0})
    evil = (
        "import os, socket\n"
        f"open({target!r}, 'w').write('pwned')\n"
        "socket.create_connection(('1.1.1.1', 80), timeout=1)\n"
        "def add(a, b):\n    return a + b\n"
    )
    _, reward, _, _, info = env.step(fenced(evil))
    assert reward == 0.0 and not os.path.exists(target)
    looping = gemkit.make("code:Jsonl-v0", problems=[ADD], timeout=1)
    looping.reset(options={"index": 0})
    _, reward, _, _, info = looping.step(fenced("while True:\n    pass"))
    assert reward == 0.0 and "TimeoutError" in info["error"]
    env.reset(options={"index": 0})
    assert env.step(fenced("def add(a, b):\n    return a + b"))[1] == 1.0


async def test_astep_runs_the_tests_concurrently_with_the_same_score(env):
    await env.areset(options={"index": 0})
    _, reward, _, _, info = await env.astep(fenced("def add(a, b):\n    return a + b"))
    assert reward == 1.0 and info["success"]


def test_more_attempts_give_feedback_and_continue(env):
    env = gemkit.make("code:Jsonl-v0", problems=[ADD], max_attempts=2, timeout=10)
    env.reset(seed=1)
    obs, reward, terminated, _, info = env.step(fenced("def add(a, b):\n    return 0"))
    assert not terminated and "Fix the code" in obs and "success" not in info
    _, reward, terminated, _, info = env.step(fenced("def add(a, b):\n    return a + b"))
    assert terminated and reward == 1.0 and info["success"]


def test_the_same_seed_picks_the_same_problem():
    env = gemkit.make("code:Builtin-v0")
    assert env.reset(seed=7)[0] == env.reset(seed=7)[0]


def test_jsonl_problems_load_from_a_path(tmp_path):
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps(ADD) + "\n\n" + json.dumps(ECHO) + "\n")
    env = gemkit.make("code:Jsonl-v0", path=str(path))
    assert len(env.problems) == 2 and env.problems[1].io_style


def test_jsonl_without_a_path_says_how_to_pass_one():
    with pytest.raises(CodeTaskError, match="needs path="):
        gemkit.make("code:Jsonl-v0")


@pytest.mark.parametrize(
    "line, message",
    [
        ("not json", "not valid JSON"),
        (json.dumps({"question": "q"}), "'tests' must be a non-empty list"),
        (json.dumps({"question": "", "tests": ["assert 1"]}), "'question' must be a non-empty"),
        (
            json.dumps({"question": "q", "tests": ["assert 1", {"input": "", "output": ""}]}),
            "not a mix",
        ),
    ],
)
def test_malformed_problem_files_name_the_line_and_the_expected_record(tmp_path, line, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(CodeTaskError, match=message) as err:
        gemkit.make("code:Jsonl-v0", path=str(path))
    assert "bad.jsonl:1" in str(err.value)
