"""Figures a data scientist checks before training on a QA run: shortcuts, wording, hardness.

    figures = data_report(records, outcomes, world)

- the shortcut rate: records whose strongest sub-question of fewer hops already leaves one
  entity (and at most three), over the world's fact store;
- the share of each question construction (read off the text, so older runs count too) and
  the patterns a template leaves: doubled words, "where" inside "where";
- the tool solver's calls to solve (mean and distribution) and the closed-book accuracy of
  every verified item (kept or not).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from typing import Any

import numpy as np

from gemkit.synth.qa.logic import FactIndex, depth, truncate
from gemkit.synth.world.world import World

_DOUBLED = re.compile(r"\b(\w+) \1\b", re.IGNORECASE)


def construction_of(question: str) -> str:
    """The frame a question is written in, read off its text."""
    if ". " in question:  # a sentence before the asking one
        return "lead_in"
    asking = question
    if asking.startswith("What is the name of"):
        return "what_name"
    if asking.startswith("Who "):
        return "who"
    if re.match(r"Which [a-z-]+(?: [a-z-]+){0,2}, ", asking):  # "Which shipping company, ..."
        return "apposition"
    if asking.startswith("What "):
        return "what"
    return "which" if asking.startswith("Which ") else "other"


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
        "constructions": {k: round(v / n, 3) for k, v in frames.most_common()},
        "doubled_words": sum(bool(_DOUBLED.search(r["question"])) for r in records),
        "where_inside_where": sum(r["question"].count(" where ") > 1 for r in records),
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
