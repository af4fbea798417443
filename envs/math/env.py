"""`MathEnv`: one math question per episode, answered as `\\boxed{...}` and graded for equivalence."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gemkit.core import Env, ResetResult, StepResult
from gemkit.envs.math.arithmetic import ArithmeticProblems
from gemkit.envs.math.grading import Backend, grade
from gemkit.envs.math.records import RecordsError, RecordSet, load_records, pick_index
from gemkit.parsing import extract_boxed

BUILTIN_PATH = Path(__file__).parent / "data" / "builtin.jsonl"
ANSWER_FORMAT = "Put your final answer inside \\boxed{}, e.g. \\boxed{42}."


class MathEnv(Env):
    """A single-turn math task: the question is the observation, the boxed answer is graded.

    `problems` is any sequence of `{question, answer}` dicts (a `RecordSet`, an endless
    `ArithmeticProblems`, a list). Each reset draws one with `self.np_random`, or takes
    `options={"index": i}`. Reward 1 for an answer equivalent to the gold one, else 0.
    Wrapped with tools (`gemkit.make(id, tools=["python"])`) it becomes a multi-turn task.
    """

    def __init__(self, problems: Sequence[dict[str, Any]], *, backend: Backend = "auto"):
        if len(problems) == 0:
            raise RecordsError("MathEnv needs at least one problem")
        if not isinstance(problems, (RecordSet, ArithmeticProblems)):
            problems = RecordSet(problems)  # read-only and shared by clones
        self.problems = problems
        self.backend = backend
        self.problem: dict[str, Any] | None = None
        self.index = -1
        self.done = False

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> ResetResult:
        """Draw a problem (or take `options["index"]`); the observation is the question."""
        super().reset(seed=seed)
        self.index = pick_index(options, len(self.problems), self.np_random)
        self.problem = self.problems[self.index]
        self.done = False
        obs = f"{self.problem['question']}\n\n{ANSWER_FORMAT}"
        return obs, {"index": self.index, "id": self.problem.get("id", str(self.index))}

    def step(self, action: str) -> StepResult:
        """Grade the last `\\boxed{...}` in `action`; the episode ends either way."""
        if self.problem is None or self.done:
            info = {"success": False, "invalid": True}
            return "The episode is over; call reset() for a new problem.", 0.0, True, False, info
        self.done = True
        gold = str(self.problem["answer"])
        parsed = extract_boxed(action) if isinstance(action, str) else None
        info: dict[str, Any] = {"answer": gold, "parsed": parsed, "index": self.index}
        if parsed is None or not parsed:
            info.update(success=False, invalid=True)
            return (
                f"No answer found. {ANSWER_FORMAT} The answer must be inside the braces.",
                0.0,
                True,
                False,
                info,
            )
        correct = grade(parsed, gold, backend=self.backend)
        info["success"] = correct
        return ("Correct." if correct else "Incorrect."), float(correct), True, False, info

    def render(self) -> str | None:
        """The current question."""
        return None if self.problem is None else str(self.problem["question"])


def builtin(**kwargs: Any) -> MathEnv:
    """`math:Builtin-v0`: the problems shipped with gemkit (arithmetic, algebra, counting)."""
    fields = {"question": "question", "answer": "answer"}
    return MathEnv(load_records(BUILTIN_PATH, fields=fields), **kwargs)


def from_jsonl(
    path: str | os.PathLike[str] | None = None,
    *,
    question_field: str = "question",
    answer_field: str = "answer",
    split: str | None = None,
    **kwargs: Any,
) -> MathEnv:
    """`math:Jsonl-v0`: problems from a JSONL file or a `datasets` folder saved with `save_to_disk`."""
    if path is None:
        raise RecordsError(
            "math:Jsonl-v0 needs a file: gemkit.make('math:Jsonl-v0', path='problems.jsonl'), "
            'one {"question": ..., "answer": ...} object per line'
        )
    fields = {"question": question_field, "answer": answer_field}
    return MathEnv(load_records(path, fields=fields, split=split), **kwargs)


def arithmetic(level: str = "easy", **kwargs: Any) -> MathEnv:
    """`math:Arithmetic-v0-<level>`: endless generated problems of one level."""
    return MathEnv(ArithmeticProblems(level), **kwargs)
