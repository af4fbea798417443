"""Code tasks: write a Python program; it runs in the sandbox against the task's tests.

A problem is `{"question": str, "tests": [...]}` where each test is either a Python statement
(usually an `assert`) checked against the solution, or `{"input": str, "output": str}`: the
program reads the input on stdin and must print the output. Reward is the fraction of tests
passed. A statement test is judged in a separate grader process that only ever sees the
program's answers as plain data (`statements.py`); printed output is compared on the host.
"""

from __future__ import annotations

import asyncio
import json
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gemkit.answers import extract_boxed
from gemkit.core import Env, ResetResult, StepResult
from gemkit.envs.code import statements
from gemkit.envs.code.probes import TestShapeError, task_builtins, validate_test
from gemkit.envs.code.statements import Failure, Grading
from gemkit.errors import GemkitError
from gemkit.items import pick_index
from gemkit.policy import SyncPolicy
from gemkit.sandbox import ExecResult, Sandbox, shared_sandbox

BUILTIN_PATH = Path(__file__).with_name("data") / "builtin.jsonl"
FORMAT = "a ```python code block holding your complete solution"
_FENCE_RE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)```", re.DOTALL)
#: threads that wait on the sandbox for `step` (the calls of one step run at once)
_WAITERS = ThreadPoolExecutor(max_workers=16, thread_name_prefix="gemkit-code")


class CodeTaskError(GemkitError):
    """A problem file or record that does not follow `{question, tests}`."""


@dataclass(frozen=True)
class Problem:
    """One task: the statement, its tests, and an optional id."""

    question: str
    tests: tuple[Any, ...]
    id: str = ""
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def io_style(self) -> bool:
        """True when the tests are stdin/stdout pairs (else they are statements)."""
        return isinstance(self.tests[0], dict)


def parse_problem(record: Any, where: str = "record") -> Problem:
    """Validate one `{question, tests}` record; raise `CodeTaskError` saying what is wrong."""
    expected = (
        'expected {"question": str, "tests": ["assert f(1) == 2", ...]} or tests as '
        '[{"input": "1 2\\n", "output": "3\\n"}, ...]'
    )
    if not isinstance(record, dict):
        raise CodeTaskError(f"{where}: not a JSON object; {expected}")
    question, tests = record.get("question"), record.get("tests")
    if not isinstance(question, str) or not question.strip():
        raise CodeTaskError(f"{where}: 'question' must be a non-empty string; {expected}")
    if not isinstance(tests, list) or not tests:
        raise CodeTaskError(f"{where}: 'tests' must be a non-empty list; {expected}")
    if all(isinstance(t, str) for t in tests):
        for j, test in enumerate(tests):
            try:
                validate_test(test, task_builtins(question))
            except TestShapeError as e:
                raise CodeTaskError(
                    f"{where}: test {j} ({test[:80]!r}) cannot be checked: {e}"
                ) from None
    elif all(
        isinstance(t, dict) and isinstance(t.get("input"), str) and isinstance(t.get("output"), str)
        for t in tests
    ):
        tests = [{"input": t["input"], "output": t["output"]} for t in tests]
    else:
        raise CodeTaskError(
            f"{where}: every test must be a statement string, or every test an "
            f"{{'input': str, 'output': str}} pair (not a mix); {expected}"
        )
    meta = {k: v for k, v in record.items() if k not in ("question", "tests", "id")}
    return Problem(question=question, tests=tuple(tests), id=str(record.get("id", "")), meta=meta)


def load_problems(path: str | Path) -> list[Problem]:
    """Read a JSONL file of `{question, tests}` records."""
    p = Path(path)
    if not p.is_file():
        raise CodeTaskError(f"no problem file at {str(p)!r}; pass path= a JSONL of problems")
    problems = []
    with p.open(encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise CodeTaskError(f"{p}:{n}: not valid JSON ({e.msg})") from e
            problems.append(parse_problem(record, f"{p}:{n}"))
    if not problems:
        raise CodeTaskError(f"{p} holds no problems")
    return problems


def extract_code(text: str) -> str | None:
    """The last fenced code block (a ```python one if any), else the last `\\boxed{}`."""
    blocks = _FENCE_RE.findall(text)
    python = [body for lang, body in blocks if lang.lower() in ("python", "py", "python3")]
    chosen = python or [body for lang, body in blocks if not lang]
    if chosen and chosen[-1].strip():
        return chosen[-1]
    boxed = extract_boxed(text)
    return boxed if boxed else None


def normalize_output(text: str) -> str:
    """Compare printed output modulo trailing spaces and trailing blank lines."""
    return "\n".join(line.rstrip() for line in text.strip("\n").splitlines()).rstrip()


def _io_failure(index: int, test: dict[str, str], result: ExecResult) -> Failure | None:
    """None if the printed output matches, else the failure (the expected output is not
    part of what the model is shown)."""
    if not result.ok:
        reason = result.exception or f"exit status {result.exit_code}"
        return Failure(reason, f"test {index + 1}, input {test['input'][:200]!r}: {reason}")
    if normalize_output(result.stdout) == normalize_output(test["output"]):
        return None
    got = result.stdout[:200]
    return Failure(
        f"input {test['input']!r}: expected output {test['output']!r}, got {got!r}",
        f"test {index + 1}, input {test['input'][:200]!r}: your program printed {got!r}, "
        "which is not the expected output",
    )


def _io_failures(tests: tuple[Any, ...], results: list[ExecResult]) -> list[Failure | None]:
    return [_io_failure(i, t, r) for i, (t, r) in enumerate(zip(tests, results, strict=True))]


class CodeEnv(Env):
    """Single-turn (by default) Python programming tasks checked by tests in a sandbox.

    `max_attempts` > 1 turns it multi-turn: a failed attempt gets the failing test as
    feedback and the episode goes on until success or the last attempt.
    """

    answers_in_code = True  # the solution is a ```python block: never a python-tool call

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        problems: list[dict[str, Any]] | None = None,
        timeout: float = 5.0,
        memory_mb: int = 512,
        max_attempts: int = 1,
        backend: str = "auto",
    ):
        if problems is not None:
            self.problems = [parse_problem(r, f"problems[{i}]") for i, r in enumerate(problems)]
        elif path is not None:
            self.problems = load_problems(path)
        else:
            raise CodeTaskError(
                "no problems given: pass path='tasks.jsonl' (records of {question, tests}) "
                "or problems=[...], or use code:Builtin-v0"
            )
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
        self.timeout = float(timeout)
        self.max_attempts = max_attempts
        self._sandbox_options = {
            "backend": backend,
            "timeout": self.timeout,
            "memory_mb": memory_mb,
            # room for a test's record of answers (and the program's own output)
            "max_output": statements.MAX_OUTPUT,
        }
        self.problem: Problem | None = None
        self.attempts = 0
        self.done = False

    # -- episode ------------------------------------------------------------------------------

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> ResetResult:
        """Pick a problem (`options={"index": i}` for a given one) and show it."""
        super().reset(seed=seed)
        index = pick_index(options, len(self.problems), self.np_random, seed)
        self.problem = self.problems[index]
        self.attempts = 0
        self.done = False
        return self._prompt(self.problem), {"index": index, "id": self.problem.id}

    def _prompt(self, problem: Problem) -> str:
        if problem.io_style:
            how = (
                "Your program reads the input from standard input and prints the answer to "
                "standard output."
            )
        else:
            how = f"Your code is checked with tests such as:\n{problem.tests[0]}"
        return (
            f"{problem.question.strip()}\n\n{how}\n\nAnswer with {FORMAT}, e.g.\n"
            "```python\n...\n```"
        )

    def _check_action(self, action: Any) -> tuple[str | None, StepResult | None]:
        if self.problem is None:
            return None, ("Call reset() before step().", 0.0, True, False, {"invalid": True})
        if self.done:
            return None, (
                "The episode is over; call reset() to start a new one.",
                0.0,
                True,
                False,
                {"success": False, "invalid": True},
            )
        code = extract_code(action) if isinstance(action, str) else None
        if code is None:
            self.attempts += 1
            last = self.attempts >= self.max_attempts
            self.done = last
            obs = f"No code found. Answer with {FORMAT}:\n```python\n# your solution\n```"
            info = {"invalid": True, "passed": 0, "total": len(self.problem.tests)}
            if last:
                info["success"] = False
            return None, (obs, 0.0, last, False, info)
        return code, None

    def _score(self, failures: list[Failure | None]) -> StepResult:
        assert self.problem is not None
        self.attempts += 1
        total = len(failures)
        passed = sum(f is None for f in failures)
        success = passed == total
        last = success or self.attempts >= self.max_attempts
        self.done = last
        first = next((i for i, f in enumerate(failures) if f is not None), None)
        info: dict[str, Any] = {"passed": passed, "total": total, "attempt": self.attempts}
        if last:
            info["success"] = success
        if first is None:
            return f"All {total} tests passed.", 1.0, last, False, info
        failure = failures[first]
        assert failure is not None
        info["error"] = failure.error
        obs = f"{passed}/{total} tests passed. First failure: {self._shown(first, failure)}"
        if not last:
            obs += f"\n\nFix the code and answer again with {FORMAT}."
        return obs, passed / total, last, False, info

    def _shown(self, index: int, failure: Failure) -> str:
        """The failure as the model sees it: the prompt's example test in full; for the
        others, what went wrong but no expected value (else later attempts could copy it)."""
        assert self.problem is not None
        if self.problem.io_style:
            text = failure.public
        elif index == 0:  # shown in the prompt already
            text = failure.error
        else:
            text = f"test {index + 1}: {failure.public}"
        return f"{text} ({failure.detail})" if failure.detail else text

    def _sandbox(self) -> Sandbox:
        return shared_sandbox(**self._sandbox_options)

    def step(self, action: str) -> StepResult:
        """Run the code in `action` against every test; reward = fraction passed."""
        code, early = self._check_action(action)
        if early is not None:
            return early
        assert code is not None and self.problem is not None
        sb = self._sandbox()
        if self.problem.io_style:
            tests = self.problem.tests
            results = list(_WAITERS.map(lambda t: sb.run_sync(code, stdin=t["input"]), tests))
            return self._score(_io_failures(tests, results))
        grading = Grading(self.problem.tests, code, self.problem.question)
        grading.answered(list(_WAITERS.map(sb.run_sync, grading.programs)))
        if grading.grader is not None:
            grading.judged(sb.run_sync(grading.grader, stdin=grading.stdin))
        return self._score(grading.failures())

    async def astep(self, action: str) -> StepResult:
        """Async twin of `step`: the tests run concurrently on the sandbox pool."""
        code, early = self._check_action(action)
        if early is not None:
            return early
        assert code is not None and self.problem is not None
        sb = self._sandbox()
        if self.problem.io_style:
            tests = self.problem.tests
            results = await asyncio.gather(*(sb.run(code, stdin=t["input"]) for t in tests))
            return self._score(_io_failures(tests, list(results)))
        grading = Grading(self.problem.tests, code, self.problem.question)
        grading.answered(list(await asyncio.gather(*(sb.run(p) for p in grading.programs))))
        if grading.grader is not None:
            grading.judged(await sb.run(grading.grader, stdin=grading.stdin))
        return self._score(grading.failures())

    def render(self) -> str | None:
        """The current problem statement."""
        return None if self.problem is None else self.problem.question


class BuiltinCodeEnv(CodeEnv):
    """The built-in set of small programming problems (`code:Builtin-v0`)."""

    def __init__(self, **kwargs: Any):
        kwargs.pop("path", None)
        super().__init__(BUILTIN_PATH, **kwargs)


class JsonlCodeEnv(CodeEnv):
    """Problems from any JSONL of `{question, tests}` records (`code:Jsonl-v0`, `path=`)."""

    def __init__(self, path: str | Path | None = None, **kwargs: Any):
        if path is None and kwargs.get("problems") is None:
            raise CodeTaskError(
                "code:Jsonl-v0 needs path=: gemkit.make('code:Jsonl-v0', path='tasks.jsonl'), "
                'one {"question": ..., "tests": [...]} record per line'
            )
        super().__init__(path, **kwargs)


class CodeExpert(SyncPolicy):
    """Answers with the reference `solution` stored in the problem records (when they have one)."""

    def __init__(self, path: str | Path | None = None, **kwargs: Any):
        problems = kwargs.get("problems")
        if problems is not None:
            records = [parse_problem(r) for r in problems]
        else:
            records = load_problems(path if path is not None else BUILTIN_PATH)
        self.solutions = {
            p.question.strip(): p.meta["solution"] for p in records if "solution" in p.meta
        }

    def choose(self, observation: str) -> str:
        """The reference solution of the problem shown, in a fenced block."""
        for question, solution in self.solutions.items():
            if question in observation:
                return f"```python\n{solution}```"
        return "```python\nprint('no reference solution for this problem')\n```"
