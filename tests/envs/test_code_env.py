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


# -- statement tests judged by the grader: shapes a correct answer must pass ------------------

SHAPES = [
    (  # a class with state, checked through its methods, len() and str()
        "s = Stack()\ns.push(1)\ns.push(2)\nassert s.pop() == 2\nassert len(s) == 1 and str(s) == '[1]'",
        "class Stack:\n    def __init__(self):\n        self.items = []\n"
        "    def push(self, x):\n        self.items.append(x)\n"
        "    def pop(self):\n        return self.items.pop()\n"
        "    def __len__(self):\n        return len(self.items)\n"
        "    def __str__(self):\n        return str(self.items)",
        "class Stack:\n    def __init__(self):\n        self.items = []\n"
        "    def push(self, x):\n        self.items.insert(0, x)\n"
        "    def pop(self):\n        return self.items.pop()\n"
        "    def __len__(self):\n        return 1\n"
        "    def __str__(self):\n        return str(self.items)",
    ),
    (
        "assert Solution().two_sum([2, 7, 11], 9) == [0, 1]",
        "class Solution:\n    def two_sum(self, nums, t):\n        return [0, 1]",
        "class Solution:\n    def two_sum(self, nums, t):\n        return (0, 1)",  # a tuple is not a list
    ),
    ("assert pair() == (1, 2)", "def pair():\n    return (1, 2)", "def pair():\n    return [1, 2]"),
    (
        "assert evens({1, 2, 4}) == {2, 4}",
        "def evens(s):\n    return {x for x in s if x % 2 == 0}",
        "def evens(s):\n    return [2, 4]",
    ),
    (
        "assert counts('aab') == {'a': 2, 'b': 1}",
        "def counts(s):\n    return {c: s.count(c) for c in s}",
        "def counts(s):\n    return {'a': 2}",
    ),
    (
        "import math\nassert abs(mean([0.1, 0.2]) - 0.15) < 1e-9\nassert math.isclose(mean([1, 2]), 1.5)",
        "def mean(xs):\n    return sum(xs) / len(xs)",
        "def mean(xs):\n    return 0.15",
    ),
    (
        "assert is_even(2) is True",
        "def is_even(n):\n    return n % 2 == 0",
        "def is_even(n):\n    return 1",
    ),  # 1 == True, but it is not True
    (  # an expected exception, raised as a subclass of the builtin one
        "try:\n    root(-1)\nexcept ValueError as e:\n    assert 'negative' in str(e)\n"
        "else:\n    raise AssertionError('root(-1) did not raise')",
        "class Negative(ValueError):\n    pass\n"
        "def root(n):\n    if n < 0:\n        raise Negative('negative input')\n    return int(n ** 0.5)",
        "def root(n):\n    return 0",
    ),
    (
        "assert list(squares(3)) == [0, 1, 4]\nit = squares(2)\nassert next(it) == 0 and next(it) == 1",
        "def squares(n):\n    for i in range(n):\n        yield i * i",
        "def squares(n):\n    yield from [0, 1, 5]",
    ),
    (  # a generator that ends: the test catches its StopIteration
        "it = countdown(1)\nassert next(it) == 1\ntry:\n    next(it)\nexcept StopIteration:\n    pass\n"
        "else:\n    raise AssertionError('it goes on')",
        "def countdown(n):\n    while n > 0:\n        yield n\n        n -= 1",
        "def countdown(n):\n    while True:\n        yield n",
    ),
    (  # HumanEval's shape: a check function handed the candidate
        "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(-1, 1) == 0\ncheck(add)",
        "def add(a, b):\n    return a + b",
        "def add(a, b):\n    return 3",
    ),
    (  # a loop of cases with its own failure message
        "for x, want in [(1, 2), (5, 10)]:\n    got = double(x)\n"
        "    if got != want:\n        raise AssertionError(f'double({x}) = {got}, not {want}')",
        "def double(x):\n    return 2 * x",
        "def double(x):\n    return 2 if x == 1 else 11",
    ),
    (  # needs the outcome of a check to go on: the program's process runs the whole test
        "n = 0\nwhile step(n) != 0:\n    n = step(n)\nassert n == 0",
        "def step(n):\n    return 0",
        "def step(n):\n    return n + 1 if n < 3 else 0",
    ),
    (
        "assert sorted([3, 1, 2]) == [1, 2, 3]",  # the task asks for a function named like a builtin
        "def sorted(xs):\n    out = list(xs)\n    out.sort()\n    return out",
        "def sorted(xs):\n    return xs",
    ),
    (
        "assert blob() == b'\\x00\\xff' and nothing() is None",
        "def blob():\n    return bytes([0, 255])\ndef nothing():\n    print('side effect')",
        "def blob():\n    return '\\x00\\xff'\ndef nothing():\n    return None",
    ),
]


@pytest.mark.parametrize(
    "test, right, wrong", SHAPES, ids=[s[0].split("\n")[-1][:40] for s in SHAPES]
)
def test_a_right_answer_passes_and_a_wrong_one_fails(test, right, wrong):
    question = "Write the code; for a sorting task, write `sorted(xs)`."
    env = gemkit.make(
        "code:Jsonl-v0", problems=[{"question": question, "tests": [test]}], timeout=10
    )
    env.reset(options={"index": 0})
    _, reward, _, _, info = env.step(fenced(right))
    assert reward == 1.0, info
    env.reset(options={"index": 0})
    _, reward, _, _, info = env.step(fenced(wrong))
    assert reward == 0.0 and info["error"].startswith(test), info


def test_every_builtin_test_hides_its_expected_values_from_the_program():
    from gemkit.envs.code.probes import split_test

    env = gemkit.make("code:Builtin-v0")
    statement_tests = [t for p in env.problems if not p.io_style for t in p.tests]
    assert statement_tests and all(split_test(t).blind for t in statement_tests)


def test_feedback_on_a_hidden_test_says_what_the_program_answered():
    env = gemkit.make("code:Jsonl-v0", problems=[ADD], max_attempts=2, timeout=10)
    env.reset(options={"index": 0})
    obs, _, _, _, info = env.step(fenced("def add(a, b):\n    return 3"))
    assert "test 2: AssertionError (add(2, 2) returned 3)" in obs and "== 4" not in obs
    assert info["error"] == "assert add(2, 2) == 4: AssertionError"  # in full, for the user


def test_printed_output_feedback_hides_the_expected_output(env):
    env.reset(options={"index": 1})
    obs = env.step(fenced("print(7)"))[0]
    assert "test 1, input '2\\n': your program printed '7\\n'" in obs and "'4" not in obs


@pytest.mark.parametrize(
    "test, message",
    [
        ("assert True", "checks nothing"),
        ("assert (y := f(1)) == 2", "walrus"),
        ("s = Stack()\ns.items = []", "changes a program object"),
        ("assert f(1) ==", "not valid Python"),
    ],
)
def test_a_test_that_cannot_be_checked_is_refused_when_the_problems_load(test, message):
    with pytest.raises(CodeTaskError, match=message) as err:
        gemkit.make("code:Jsonl-v0", problems=[{"question": "q", "tests": [test]}])
    assert "problems[0]: test 0" in str(err.value)


def test_code_that_rebinds_common_builtin_names_is_still_checked(env):
    env.reset(options={"index": 0})
    code = "def add(a, b):\n    return a + b\nbytes = exec = globals = compile = 0\nprint('hi')"
    assert env.step(fenced(code))[1] == 1.0


def test_subclasses_of_builtin_types_and_numpy_scalars_are_checked_by_value():
    problem = {
        "question": "Count the words; give the first pair; the sum as numpy would.",
        "tests": [
            "assert counts('a b a') == {'a': 2, 'b': 1}",
            "assert first('xy') == ('x', 'y') and first('xy').left == 'x'",
            "assert total([1, 2]) == 3 and level() == 2",
        ],
    }
    right = (
        "from collections import Counter, namedtuple\nfrom enum import IntEnum\nimport numpy\n"
        "Pair = namedtuple('Pair', 'left right')\nclass Level(IntEnum):\n    HIGH = 2\n"
        "def counts(s):\n    return Counter(s.split())\n"
        "def first(s):\n    return Pair(s[0], s[1])\n"
        "def total(xs):\n    return numpy.int64(sum(xs))\n"
        "def level():\n    return Level.HIGH"
    )
    env = gemkit.make("code:Jsonl-v0", problems=[problem], timeout=20)
    env.reset(options={"index": 0})
    _, reward, _, _, info = env.step(fenced(right))
    assert reward == 1.0, info


def _python310() -> str | None:
    """A Python 3.10 that runs (pyenv's, else python3.10 on the PATH), or None."""
    import glob
    import shutil
    import subprocess

    for c in [*sorted(glob.glob("/root/.pyenv/versions/3.10*/bin/python3.10")), "python3.10"]:
        path = shutil.which(c)
        if path and subprocess.run([path, "-c", "pass"], capture_output=True).returncode == 0:
            return path
    return None


def _run_on_python_3_10(path: str, then: str) -> str:
    """Load the standard-library-only module at `path` on Python 3.10, run `then`, its stdout."""
    import subprocess

    python = _python310()
    if python is None:
        pytest.skip("no Python 3.10 on this machine (gemkit supports 3.10 and later)")
    load = (
        "import importlib.util, sys; "
        f"spec = importlib.util.spec_from_file_location('m', {path!r}); "
        "m = importlib.util.module_from_spec(spec); sys.modules['m'] = m; "
        f"spec.loader.exec_module(m); {then}"
    )
    done = subprocess.run([python, "-c", load], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_probe_splitter_loads_on_python_3_10():
    # Python 3.10's ast has no TryStar (`except*` is 3.11's)
    import gemkit.envs.code.probes as probes

    then = "print(sorted(m._UNSUPPORTED.values())[0])"
    assert _run_on_python_3_10(probes.__file__, then) == "'async def'"


def test_the_sandbox_runtime_copies_a_bytes_subclass_on_python_3_10():
    # bytes.__bytes__ is Python 3.11's: the runtime copies a bytes subclass without it
    import gemkit.envs.code.runtime as runtime

    then = "B = type('B', (bytes,), {}); v = m._plain_copy(B(b'ab')); print(type(v).__name__, v)"
    assert _run_on_python_3_10(runtime.__file__, then) == "bytes b'ab'"
