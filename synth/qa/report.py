"""Figures a data scientist checks before training on a QA run: shortcuts, wording, hardness.

    figures = data_report(records, outcomes, world)

- the shortcut rate: records whose strongest sub-question of fewer hops already leaves one
  entity (and at most three), over the world's fact store;
- clauses that do no work, re-derived from each logical form over the fact store: records
  that stay unique without one of their clauses, and blurred values no entity is outside of;
- the share of each question frame (read off the text, so older runs count too) and what
  makes a text hard to read (`readability`): a clause inside another, a verb twice in a
  clause, more relative clauses in a sentence than the limit, and doubled words;
- answers and questions that repeat, and answers on both sides of the export's split;
- the tool solver's calls to solve (mean and distribution) and the closed-book accuracy of
  every verified item (kept or not).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from typing import Any

import numpy as np

from gemkit.records.splits import answer_split, normalized
from gemkit.synth.qa.logic import FactIndex, depth, truncate
from gemkit.synth.qa.readability import (
    MAX_CLAUSES,
    centre_embedded,
    clause_depth,
    frame_of,
    repeated_verbs,
)
from gemkit.synth.qa.verify import droppable_clauses, vacuous_blurs
from gemkit.synth.world.world import World

_DOUBLED = re.compile(r"\b(\w+) \1\b", re.IGNORECASE)


def construction_of(question: str) -> str:
    """The frame a question is written in, read off its text (`readability.frame_of`)."""
    return frame_of(question)


def data_report(
    records: list[dict[str, Any]], outcomes: Iterable[dict[str, Any]], world: World
) -> dict[str, Any]:
    """The figures above for kept `records`; `outcomes` are every item (kept and rejected)."""
    index = FactIndex.of_world(world)
    one_hop = sub = sub3 = 0
    for r in records:
        lf = r["logical_form"]
        hops = depth(lf)
        if hops < 2:
            continue
        one_hop += len(index.evaluate(truncate(lf, 1))) == 1
        fits = len(index.evaluate(truncate(lf, hops - 1)))
        sub += fits == 1
        sub3 += fits <= 3
    n = max(1, len(records))
    frames = Counter(construction_of(r["question"]) for r in records)
    idle = vacuous = 0
    for r in records:
        lf, answer = r["logical_form"], _answer_id(r, index)
        if answer is not None:
            idle += bool(droppable_clauses(lf, answer, index))
        vacuous += bool(vacuous_blurs(lf, index))
    questions = [r["question"] for r in records]
    answers = Counter(normalized(r["answer"]) for r in records)
    sides = {normalized(r["answer"]): answer_split(r["answer"]) for r in records}
    calls = np.array([r["verification"]["difficulty"]["tool_calls"] for r in records] or [0])
    correct = tries = 0
    for o in outcomes:
        diff = (o.get("verification") or {}).get("difficulty") or {}
        correct += int(diff.get("closed_book_correct") or 0)
        tries += int(diff.get("closed_book_tries") or 0)
    return {
        "records": len(records),
        "shortcut_rate_top_level": round(one_hop / n, 4),
        "shortcut_rate_fewer_hops": round(sub / n, 4),
        "at_most_3_candidates_fewer_hops": round(sub3 / n, 4),
        "records_with_a_clause_that_does_no_work": idle,
        "records_with_a_blur_that_excludes_nothing": vacuous,
        "constructions": {k: round(v / n, 3) for k, v in frames.most_common()},
        "centre_embedded": sum(bool(centre_embedded(q)) for q in questions),
        "repeated_main_verb": sum(bool(repeated_verbs(q)) for q in questions),
        f"more_than_{MAX_CLAUSES}_relative_clauses_in_a_sentence": sum(
            clause_depth(q) > MAX_CLAUSES for q in questions
        ),
        "relative_clauses_per_sentence": dict(
            sorted(Counter(map(clause_depth, questions)).items())
        ),
        "doubled_words": sum(bool(_DOUBLED.search(q)) for q in questions),
        "where_inside_where": sum(q.count(" where ") > 1 for q in questions),
        "distinct_answers": len(answers),
        "repeated_questions": len(questions) - len({normalized(q) for q in questions}),
        "test_answers": sum(side == "test" for side in sides.values()),
        "mean_hops": round(float(np.mean([depth(r["logical_form"]) for r in records] or [0])), 2),
        "tool_calls_mean": round(float(calls.mean()), 2),
        "tool_calls_percentiles_10_50_90": [int(x) for x in np.percentile(calls, [10, 50, 90])],
        "tool_calls_histogram": _histogram(calls),
        "closed_book_accuracy": round(correct / tries, 4) if tries else 0.0,
    }


def _histogram(calls: np.ndarray) -> dict[str, int]:
    edges = [0, 5, 10, 20, 40, 80, 121]
    counts, _ = np.histogram(calls, bins=edges)
    return {f"{a}-{b - 1}": int(c) for a, b, c in zip(edges[:-1], edges[1:], counts, strict=True)}


def _answer_id(record: dict[str, Any], index: FactIndex) -> str | None:
    """The entity a record's form answers with (the one its form fits), if it fits one."""
    found = index.evaluate(record["logical_form"])
    return next(iter(found)) if len(found) == 1 else None
