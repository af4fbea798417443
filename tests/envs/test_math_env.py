"""`math:` envs: answers are graded for mathematical equivalence, problems load from files."""

from __future__ import annotations

import json
import os
import queue
import threading
import warnings

import pytest
from gymnasium.utils.env_checker import check_env

import gemkit
from gemkit.envs.math import grading
from gemkit.envs.math.arithmetic import ArithmeticProblems, format_fraction
from gemkit.envs.math.grading import grade, math_verify_available, normalize, to_number
from gemkit.envs.math.records import RecordsError

MATH_IDS = ["math:Builtin-v0", "math:Arithmetic-v0-easy", "math:Arithmetic-v0-hard"]

# (prediction, gold): equal without any symbolic checker
SAME_BY_FORM = [
    ("3", "3"),
    ("$3$", "3"),
    ("3.", "3"),
    ("x = 3", "3"),
    ("\\text{3}", "3"),
    ("1,000", "1000"),
    ("0.50", "0.5"),
    ("0.5", "\\frac{1}{2}"),
    ("1/2", "\\dfrac{1}{2}"),
    ("\\frac12", "0.5"),
    ("-\\frac{3}{4}", "-0.75"),
    ("\\left(1,2\\right)", "(1, 2)"),
    ("90^\\circ", "90"),
    ("25\\%", "25"),
    ("\\text{ 42 }", "42"),
    ("007", "7"),
]
DIFFERENT = [
    ("4", "3"),
    ("0.333", "\\frac{1}{3}"),
    ("-3", "3"),
    ("1/2", "2"),
    ("(2,1)", "(1,2)"),
    ("x+1", "x+2"),
    ("", "3"),
    (None, "3"),
]
# need symbolic equivalence
SAME_BY_SYMBOLS = [
    ("(x+1)^2", "x^2+2x+1"),
    ("\\frac{\\sqrt{2}}{2}", "\\sqrt{2}/2"),
    ("\\{2, 1\\}", "\\{1, 2\\}"),
    ("2 \\cdot 3x", "6x"),
]


@pytest.mark.parametrize("pred, gold", SAME_BY_FORM)
def test_equivalent_forms_grade_correct_without_symbols(pred, gold):
    assert grade(pred, gold, backend="none")


@pytest.mark.parametrize("pred, gold", DIFFERENT)
def test_different_answers_grade_wrong(pred, gold):
    assert not grade(pred, gold, backend="sympy")


@pytest.mark.parametrize("pred, gold", SAME_BY_SYMBOLS)
def test_sympy_fallback_finds_symbolic_equivalence(pred, gold):
    assert not grade(pred, gold, backend="none")
    assert grade(pred, gold, backend="sympy")


@pytest.mark.skipif(not math_verify_available(), reason="math-verify is an optional extra")
@pytest.mark.parametrize("pred, gold", [("(x+1)^2", "x^2+2x+1"), ("\\sqrt{8}", "2\\sqrt{2}")])
def test_math_verify_finds_symbolic_equivalence(pred, gold):
    assert grade(pred, gold, backend="math_verify")


def test_symbolic_checks_have_a_hard_time_limit_in_any_thread(monkeypatch):
    # expanding (x+y+z)^99 takes minutes: the check must give up and call it wrong (the
    # guard that keeps such powers from the checkers is lifted, to reach the time limit)
    monkeypatch.setattr(grading, "SYMBOLIC_TIMEOUT_S", 2.0)
    monkeypatch.setattr(grading, "MAX_EXPANSION_TERMS", 10**9)
    assert grading.grading_plan("(x+y+z)^{99}", "x+1") == [("(x+y+z)^{99}", "x+1")]
    assert not grade("(x+y+z)^{99}", "x+1")
    assert grade("(x+1)^2", "x^2+2x+1")  # the main thread's timer is off again

    out: list[bool] = []

    def in_a_thread():  # no signals here: a helper process does the checking
        out.append(grade("(x+1)^2", "x^2+2x+1"))
        out.append(grade("(x+y+z)^{99}", "x+1"))

    worker = threading.Thread(target=in_a_thread)
    worker.start()
    worker.join(300)
    assert out == [True, False]


@pytest.fixture
def helpers(monkeypatch):
    """A fresh set of helper processes in place of this process's own; ended afterwards."""
    made = grading._Helpers()
    monkeypatch.setattr(grading, "_WORKER", made)
    yield made
    for helper in made._helpers:
        helper._stop()


def in_threads(checks: list[tuple[str, str]]) -> list[bool]:
    """`grade` of each (pred, gold) in a thread of its own, all at once (no signals there)."""
    out: dict[int, bool] = {}

    def check(i: int, pred: str, gold: str) -> None:
        out[i] = grade(pred, gold)

    threads = [threading.Thread(target=check, args=(i, *c)) for i, c in enumerate(checks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    return [out.get(i) for i in range(len(checks))]


HELPER_EQUAL = grading._HelperProcess.equal  # before any test wraps it


def count_in_flight(monkeypatch, together: threading.Barrier | None = None) -> dict[str, int]:
    """Count the checks inside helpers at once (`peak`); with `together`, each check waits
    until that many are inside before it asks its helper."""
    seen = {"now": 0, "peak": 0}
    lock = threading.Lock()

    def counted(self, pred, gold, backend):
        with lock:
            seen["now"] += 1
            seen["peak"] = max(seen["peak"], seen["now"])
        try:
            if together is not None:
                together.wait()
            return HELPER_EQUAL(self, pred, gold, backend)
        finally:
            with lock:
                seen["now"] -= 1

    monkeypatch.setattr(grading._HelperProcess, "equal", counted)
    return seen


SYMBOLIC = [("(x+1)^2", "x^2+2x+1"), ("\\sqrt{8}", "2\\sqrt{2}"), ("(x+1)(x-1)", "x^2-2")]


def test_checks_from_many_threads_run_in_helpers_up_to_one_per_core(monkeypatch, helpers):
    # an async vector's envs check their answers from several threads at once: each check
    # takes a helper process of its own, up to one per core, so grading uses every core
    monkeypatch.setenv("GEMKIT_CORES", "2")
    count_in_flight(monkeypatch, threading.Barrier(2, timeout=120))  # two inside at once...
    assert in_threads(SYMBOLIC[:2]) == [True, True]  # ...so two helpers (one would deadlock)
    pids = helpers.pids()
    assert len(set(pids)) == 2 and os.getpid() not in pids

    seen = count_in_flight(monkeypatch)
    assert in_threads(SYMBOLIC * 3) == [True, True, False] * 3
    assert seen["peak"] <= 2 and sorted(helpers.pids()) == sorted(pids)  # no third helper

    monkeypatch.setenv("GEMKIT_CORES", "1")  # a lower cap holds for helpers already running
    seen = count_in_flight(monkeypatch)
    assert in_threads(SYMBOLIC * 2) == [True, True, False] * 2
    assert seen["peak"] == 1


def test_a_late_check_replaces_only_its_own_helper(monkeypatch, helpers):
    monkeypatch.setenv("GEMKIT_CORES", "2")
    count_in_flight(monkeypatch, threading.Barrier(2, timeout=120))
    assert in_threads(SYMBOLIC[:2]) == [True, True]
    before = set(helpers.pids())
    count_in_flight(monkeypatch)
    monkeypatch.setattr(grading, "SYMBOLIC_TIMEOUT_S", 2.0)
    monkeypatch.setattr(grading, "MAX_EXPANSION_TERMS", 10**9)
    assert in_threads([("(x+y+z)^{99}", "x+1")]) == [False]  # expands for minutes: killed
    left = set(helpers.pids())
    assert len(left) == 1 and left < before  # the other helper still runs
    assert in_threads(SYMBOLIC[:2]) == [True, True]


def _grade_in_a_thread(out) -> None:
    out.put(in_threads(SYMBOLIC[:1]))


def test_a_child_forked_while_a_check_runs_grades_with_helpers_of_its_own(monkeypatch, helpers):
    # a process pool forks (gemkit's process executor does) while another thread's check
    # holds the only helper: the child must not wait for a check that is not running in it
    import multiprocessing

    monkeypatch.setenv("GEMKIT_CORES", "1")
    parent, inside, release = os.getpid(), threading.Event(), threading.Event()

    def held(self, pred, gold, backend):
        if os.getpid() == parent:
            inside.set()
            release.wait(300)
        return HELPER_EQUAL(self, pred, gold, backend)

    monkeypatch.setattr(grading._HelperProcess, "equal", held)
    busy = threading.Thread(target=grade, args=SYMBOLIC[0])
    busy.start()
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    child = ctx.Process(target=_grade_in_a_thread, args=(out,), daemon=True)
    try:
        assert inside.wait(120)
        child.start()
        try:
            got = out.get(timeout=300)
        except queue.Empty:
            got = "the child waited for its parent's busy helper"
        child.join(60)
    finally:
        release.set()
        busy.join(300)
        if child.is_alive():
            child.kill()
    assert got == [True] and child.exitcode == 0
    assert len(helpers.pids()) == 1  # the parent's own helper, untouched by the child


def test_a_bad_gemkit_cores_is_refused_with_its_value(monkeypatch):
    from gemkit.cores import CoresError, usable_cores

    for bad in ("0", "-2", "two", "1.5"):
        monkeypatch.setenv("GEMKIT_CORES", bad)
        with pytest.raises(CoresError, match=f"GEMKIT_CORES must be a whole number.*{bad!r}"):
            usable_cores()
    monkeypatch.setenv("GEMKIT_CORES", " 3 ")
    assert usable_cores() == 3
    monkeypatch.delenv("GEMKIT_CORES")
    assert usable_cores() == len(os.sched_getaffinity(0))


@pytest.mark.parametrize("backend", ["sympy", "auto"])
def test_hostile_answers_are_refused_quickly_not_evaluated(backend):
    assert not grade("9^{9^{9^9}}", "1", backend=backend)
    assert not grade("9^9^9", "1", backend=backend)
    assert not grade("__import__('os').system('echo hi')", "0", backend=backend)
    assert not grade("x" * 5000, "1", backend=backend)


def test_normalize_and_to_number():
    assert normalize("\\left( \\dfrac{1}{2} \\right).") == "(\\frac{1}{2})"
    assert to_number("1,234.50") == to_number("2469/2")
    assert to_number("x^2") is None
    assert format_fraction(to_number("-6/8")) == "-\\frac{3}{4}"


@pytest.mark.parametrize("env_id", MATH_IDS)
def test_passes_gymnasium_env_checker(env_id):
    env = gemkit.make(env_id)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env, skip_render_check=True)


@pytest.mark.parametrize("env_id", MATH_IDS)
def test_episode_rewards_the_gold_answer_and_ends(env_id):
    env = gemkit.make(env_id)
    obs, info = env.reset(seed=11)
    problem = env.unwrapped.problem
    assert obs.startswith(problem["question"]) and "\\boxed{}" in obs
    obs, reward, terminated, truncated, info = env.step(f"So \\boxed{{{problem['answer']}}}.")
    assert (reward, terminated, truncated, info["success"]) == (1.0, True, False, True)
    assert info["answer"] == problem["answer"] and info["parsed"] == problem["answer"]
    obs, reward, terminated, _, info = env.step("\\boxed{1}")
    assert reward == 0.0 and terminated and "reset" in obs


def test_wrong_answer_scores_zero():
    env = gemkit.make("math:Builtin-v0")
    env.reset(options={"index": 0})
    _, reward, terminated, _, info = env.step("\\boxed{-12345}")
    assert (reward, terminated, info["success"]) == (0.0, True, False)


@pytest.mark.parametrize("action", ["", "42", "\\boxed{}", "\\boxed{4", "\x00\u2603"])
def test_missing_answer_explains_the_expected_format(action):
    env = gemkit.make("math:Builtin-v0")
    env.reset(seed=0)
    obs, reward, terminated, _, info = env.step(action)
    assert reward == 0.0 and terminated and info["invalid"] and not info["success"]
    assert "\\boxed{" in obs


def test_every_builtin_problem_accepts_its_own_answer():
    env = gemkit.make("math:Builtin-v0")
    n = len(env.unwrapped.problems)
    assert n >= 60
    for i in range(n):
        env.reset(options={"index": i})
        answer = env.unwrapped.problem["answer"]
        assert env.step(f"\\boxed{{${answer}$}}")[1] == 1.0, (i, answer)


def test_index_option_takes_problems_in_order_and_checks_range():
    env = gemkit.make("math:Builtin-v0")
    first = env.reset(options={"index": 0})[0]
    assert first == env.reset(seed=123, options={"index": 0})[0]
    with pytest.raises(IndexError, match="options\\['index'\\]"):
        env.reset(options={"index": 10_000})


def test_arithmetic_is_endless_and_deterministic_by_index():
    easy = ArithmeticProblems("easy")
    assert easy[10**15] == ArithmeticProblems("easy")[10**15]
    assert easy[3] != ArithmeticProblems("hard")[3]
    env = gemkit.make("math:Arithmetic-v0-hard")
    assert env.reset(seed=4)[0] == gemkit.make("math:Arithmetic-v0-hard").reset(seed=4)[0]
    assert len({env.reset(seed=s)[0] for s in range(10)}) > 5


def test_clone_shares_problems_and_continues_alike():
    env = gemkit.make("math:Builtin-v0")
    env.reset(seed=3)
    twin = env.clone()
    assert twin.unwrapped.problems is env.unwrapped.problems
    assert twin.step("\\boxed{7}") == env.step("\\boxed{7}")


# -- loading your own data ------------------------------------------------------------------


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_jsonl_file_with_renamed_fields(tmp_path):
    path = write_jsonl(tmp_path / "p.jsonl", [{"problem": "1+1?", "solution": 2}])
    env = gemkit.make("math:Jsonl-v0", path=path, question_field="problem", answer_field="solution")
    obs, _ = env.reset(seed=0)
    assert obs.startswith("1+1?")
    assert env.step("\\boxed{2}")[1] == 1.0


def test_datasets_folder_saved_to_disk(tmp_path):
    import datasets

    rows = {"question": ["2+2?", "3+3?"], "answer": ["4", "6"]}
    datasets.Dataset.from_dict(rows).save_to_disk(str(tmp_path / "ds"))
    env = gemkit.make("math:Jsonl-v0", path=tmp_path / "ds")
    env.reset(options={"index": 1})
    assert env.step("\\boxed{6}")[1] == 1.0
    datasets.DatasetDict({"test": datasets.Dataset.from_dict(rows)}).save_to_disk(
        str(tmp_path / "dd")
    )
    env = gemkit.make("math:Jsonl-v0", path=tmp_path / "dd", split="test")
    assert env.reset(options={"index": 0})[0].startswith("2+2?")


@pytest.mark.parametrize(
    "content, message",
    [
        ('{"question": "q", "answer": "1"}\nnot json\n', "line 2: not valid JSON"),
        ('["q", "1"]\n', "line 1: expected a JSON object"),
        ('{"question": "q"}\n', "missing field"),
        ("\n", "no records"),
    ],
)
def test_bad_files_are_explained(tmp_path, content, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(RecordsError, match=message):
        gemkit.make("math:Jsonl-v0", path=path)


def test_missing_path_is_explained(tmp_path):
    with pytest.raises(RecordsError, match="path="):
        gemkit.make("math:Jsonl-v0")
    with pytest.raises(RecordsError, match="does not exist"):
        gemkit.make("math:Jsonl-v0", path=tmp_path / "nope.jsonl")
    (tmp_path / "empty_dir").mkdir()
    with pytest.raises(RecordsError, match="save_to_disk"):
        gemkit.make("math:Jsonl-v0", path=tmp_path / "empty_dir")
