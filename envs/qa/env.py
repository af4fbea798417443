"""`QAEnv`: one factual question per episode, scored by exact match or token F1 over aliases."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gemkit.core import Env, ResetResult, StepResult
from gemkit.envs.math.records import RecordsError, RecordSet, load_records
from gemkit.envs.math.replies import MAX_ANSWERS, read_reply
from gemkit.envs.qa.metrics import METRICS, best_score, comparable, exact_match, f1_score
from gemkit.items import pick_index

DATA = Path(__file__).parent / "data"
BUILTIN_PATH = DATA / "builtin.jsonl"
CORPUS_PATH = DATA / "corpus.jsonl"
ANSWER_FORMAT = (
    "Answer with a short phrase inside \\boxed{} or <answer></answer>, "
    "for example \\boxed{your answer}."
)


class QAEnv(Env):
    """A single-turn question-answering task; reward by `"em"` (default) or `"f1"`.

    Records are `{question, answer, aliases}`; the score is the best over the answer and its
    aliases, after SQuAD normalisation (see `gemkit.envs.qa.metrics`). A reply may repeat its
    answer, but answers that differ, or a "final answer: ..." after the last one that differs,
    score 0 (`info["hedged"]`). `corpus_path` names the documents that hold the answers (if
    any), so a search tool wrapped around the env can index them.
    """

    def __init__(
        self,
        records: Sequence[dict[str, Any]],
        *,
        reward: str = "em",
        corpus_path: str | os.PathLike[str] | None = None,
    ):
        if reward not in METRICS:
            raise ValueError(f"reward must be one of {sorted(METRICS)}, got {reward!r}")
        if not isinstance(records, RecordSet):
            records = RecordSet(records)  # read-only and shared by clones
        _check_golds(records)
        self.records = records
        self.reward = reward
        self.corpus_path = None if corpus_path is None else str(corpus_path)
        self.record: dict[str, Any] | None = None
        self.index = -1
        self.done = False

    def golds(self) -> list[str]:
        """The gold answer followed by its aliases."""
        assert self.record is not None
        aliases = self.record.get("aliases") or []
        if isinstance(aliases, str):
            aliases = [aliases]
        return [str(self.record["answer"]), *map(str, aliases)]

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> ResetResult:
        """Draw a question (or take `options["index"]`); the observation is the question."""
        super().reset(seed=seed)
        self.index = pick_index(options, len(self.records), self.np_random, seed)
        self.record = self.records[self.index]
        self.done = False
        obs = f"{self.record['question']}\n\n{ANSWER_FORMAT}"
        return obs, {"index": self.index, "id": self.record.get("id", str(self.index))}

    def step(self, action: str) -> StepResult:
        """Score the answer in `action`; the episode ends either way."""
        info: dict[str, Any]
        if self.record is None or self.done:
            info = {"success": False, "invalid": True}
            return "The episode is over; call reset() for a new question.", 0.0, True, False, info
        self.done = True
        golds = self.golds()
        reply = read_reply(action) if isinstance(action, str) else None
        parsed = reply.answers[-1] if reply and reply.answers else None
        info = {"answer": golds[0], "aliases": golds[1:], "parsed": parsed}
        if not parsed:
            info.update(success=False, invalid=True, em=0.0, f1=0.0)
            return f"No answer found. {ANSWER_FORMAT}", 0.0, True, False, info
        assert reply is not None
        problem = _hedge(reply.answers, reply.too_many, reply.stated_after())
        if problem:
            info.update(success=False, hedged=True, em=0.0, f1=0.0)
            return f"Incorrect: {problem}", 0.0, True, False, info
        em, f1 = best_score(exact_match, parsed, golds), best_score(f1_score, parsed, golds)
        info.update(success=em == 1.0, em=em, f1=f1)
        reward = em if self.reward == "em" else f1
        return ("Correct." if em == 1.0 else "Incorrect."), float(reward), True, False, info

    def render(self) -> str | None:
        """The current question."""
        return None if self.record is None else str(self.record["question"])


def _hedge(answers: list[str], too_many: bool, stated: str | None) -> str | None:
    """Why a reply's answers do not make one answer, or None when they do."""
    if too_many:
        return f"more than {MAX_ANSWERS} answers; give one final answer."
    last = answers[-1]
    if any(exact_match(a, last) != 1.0 for a in answers[:-1]):
        return "the reply gives different answers; give exactly one final answer."
    if stated and exact_match(stated, last) != 1.0:
        return "the text after the answer states a different final answer; give exactly one."
    return None


def _check_golds(records: Sequence[dict[str, Any]]) -> None:
    """Refuse a gold answer or alias that keeps no letter or digit (any reply would match it)."""
    for n, record in enumerate(records, 1):
        aliases = record.get("aliases") or []
        for gold in [record["answer"], *([aliases] if isinstance(aliases, str) else aliases)]:
            if not comparable(str(gold)):
                source = getattr(records, "source", "") or "the records"
                raise RecordsError(
                    f"{source}, record {n}: the answer or alias {str(gold)!r} has no letter or "
                    "digit to compare a reply with; fix it or drop the record"
                )


def builtin(**kwargs: Any) -> QAEnv:
    """`qa:Builtin-v0`: questions about a small fictional world, answerable from its corpus."""
    fields = {"question": "question", "answer": "answer"}
    return QAEnv(load_records(BUILTIN_PATH, fields=fields), corpus_path=CORPUS_PATH, **kwargs)


def from_jsonl(
    path: str | os.PathLike[str] | None = None,
    *,
    question_field: str = "question",
    answer_field: str = "answer",
    aliases_field: str = "aliases",
    split: str | None = None,
    corpus: str | os.PathLike[str] | None = None,
    **kwargs: Any,
) -> QAEnv:
    """`qa:Jsonl-v0`: questions from a JSONL file or a `save_to_disk` folder (`path=`)."""
    if path is None:
        raise RecordsError(
            "qa:Jsonl-v0 needs a file: gemkit.make('qa:Jsonl-v0', path='questions.jsonl'), "
            'one {"question": ..., "answer": ..., "aliases": [...]} object per line'
        )
    fields = {"question": question_field, "answer": answer_field}
    records = load_records(path, fields=fields, split=split)
    if aliases_field != "aliases":
        records = RecordSet(
            [{**r, "aliases": r.get(aliases_field) or []} for r in records], records.source
        )
    return QAEnv(records, corpus_path=corpus, **kwargs)
