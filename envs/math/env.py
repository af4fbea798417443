"""`MathEnv`: one math question per episode, answered as `\\boxed{...}` and graded for equivalence."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from gemkit.core import Env, ResetResult, StepResult
from gemkit.envs.math.arithmetic import ArithmeticProblems
from gemkit.envs.math.grading import Backend, agrade, grade, normalize
from gemkit.envs.math.records import RecordsError, RecordSet, load_records
from gemkit.envs.math.replies import MAX_ANSWERS, plain_text, read_reply
from gemkit.items import pick_index

BUILTIN_PATH = Path(__file__).parent / "data" / "builtin.jsonl"
ANSWER_FORMAT = "Put your final answer inside \\boxed{}, as in \\boxed{your answer}."
# the value a "final answer ..." sentence starts with: $...$, \(...\) or a number
_STATED_VALUE = re.compile(r"(\$[^$]+\$|\\\(.+?\\\)|[-+]?\d[\d,]*(?:\.\d+)?(?:/\d+)?)")


class MathEnv(Env):
    """A single-turn math task: the question is the observation, the boxed answer is graded.

    `problems` is any sequence of `{question, answer}` dicts (a `RecordSet`, an endless
    `ArithmeticProblems`, a list). Each reset draws one with `self.np_random`, or takes
    `options={"index": i}`. Reward 1 for an answer equivalent to the gold one, else 0.
    A reply may repeat its answer in several boxes, but boxes that differ, or a "final answer:
    ..." after the last box that differs, score 0 (`info["hedged"]`). `astep` runs slow
    symbolic checks off the event loop.
    Wrapped with tools (`gemkit.make(id, tools=["python"])`) it becomes a multi-turn task.
    """

    def __init__(self, problems: Sequence[dict[str, Any]], *, backend: Backend = "auto"):
        if len(problems) == 0:
            raise RecordsError("MathEnv needs at least one problem")
        if not isinstance(problems, (RecordSet, ArithmeticProblems)):
            problems = RecordSet(problems)  # read-only and shared by clones
        if isinstance(problems, RecordSet):
            _check_golds(problems)
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
        self.index = pick_index(options, len(self.problems), self.np_random, seed)
        self.problem = self.problems[self.index]
        self.done = False
        obs = f"{self.problem['question']}\n\n{ANSWER_FORMAT}"
        return obs, {"index": self.index, "id": self.problem.get("id", str(self.index))}

    def step(self, action: str) -> StepResult:
        """Grade the `\\boxed{...}` answer in `action`; the episode ends either way."""
        read = self._read(action)
        if not isinstance(read, _Answer):
            return read
        return self._finish(read, grade(read.pred, read.gold, backend=self.backend))

    async def astep(self, action: str) -> StepResult:
        """`step` for event loops: a symbolic check runs in a thread, not on the loop."""
        read = self._read(action)
        if not isinstance(read, _Answer):
            return read
        return self._finish(read, await agrade(read.pred, read.gold, backend=self.backend))

    def _read(self, action: str) -> StepResult | _Answer:
        """The answer to grade, or the final step when there is none (or it hedges)."""
        info: dict[str, Any]
        if self.problem is None or self.done:
            info = {"success": False, "invalid": True}
            return "The episode is over; call reset() for a new problem.", 0.0, True, False, info
        self.done = True
        gold = str(self.problem["answer"])
        reply = read_reply(action, tags=False) if isinstance(action, str) else None
        parsed = reply.answers[-1] if reply and reply.answers else None
        info = {"answer": gold, "parsed": parsed, "index": self.index}
        if not parsed:
            info.update(success=False, invalid=True)
            return (
                f"No answer found. {ANSWER_FORMAT} The answer must be inside the braces.",
                0.0,
                True,
                False,
                info,
            )
        assert reply is not None
        problem = _hedge(reply.answers, reply.too_many, reply.stated_after())
        if problem:
            info.update(success=False, hedged=True)
            return f"Incorrect: {problem}", 0.0, True, False, info
        return _Answer(parsed, gold, info)

    @staticmethod
    def _finish(read: _Answer, correct: bool) -> StepResult:
        read.info["success"] = correct
        return ("Correct." if correct else "Incorrect."), float(correct), True, False, read.info

    def render(self) -> str | None:
        """The current question."""
        return None if self.problem is None else str(self.problem["question"])


class _Answer(NamedTuple):
    """A reply's one answer, waiting for its grade."""

    pred: str
    gold: str
    info: dict[str, Any]


def _hedge(answers: list[str], too_many: bool, stated: str | None) -> str | None:
    """Why a reply's boxes do not make one answer, or None when they do."""
    if too_many:
        return f"more than {MAX_ANSWERS} boxed answers; give one final answer in one \\boxed{{}}."
    last = answers[-1]
    if any(not grade(a, last, backend="none") for a in answers[:-1]):
        return "the reply boxes different answers; give exactly one final answer."
    # prose after the box that names another number: "\\boxed{19} ... final answer 20"
    value = _STATED_VALUE.match(stated or "")
    if value and not grade(value[1], last, backend="none"):
        return "the text after the box states a different final answer; give exactly one."
    return None


def _check_golds(problems: RecordSet) -> None:
    """Refuse a gold answer that normalises to nothing (`""`, `$$`, `\\text{}`)."""
    for n, problem in enumerate(problems, 1):
        if not normalize(plain_text(str(problem["answer"]))):
            raise RecordsError(
                f"{problems.source or 'the problems'}, record {n}: the answer "
                f"{str(problem['answer'])!r} is empty once normalised; fix it or drop the record"
            )


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
