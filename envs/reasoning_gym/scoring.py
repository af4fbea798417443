"""Rewards from reasoning-gym scorers that junk, hedged and catch-all answers cannot earn.

Upstream `score_answer` methods grade a model; an optimizer reads them as a target. Measured
on reasoning-gym 0.1.19 (three items per dataset, answers that are not the reference):

- about twenty datasets pay 0.01-0.25 to any text at all ("a", "[]", "?"), as a format bonus;
- the default scorer pays `len(reference) / len(answer)` to any text containing the reference,
  so a list of every candidate always earns something;
- `game_of_life_halting` pays 1.0 to every non-empty answer (it compares `bool(answer)`);
  it is scored here by exact match instead (`EXACT`).

So an env pays 1.0 only for an answer the scorer accepts (a score of 1) that is also
*specific*: the scorer rejects a probe that is no answer at all, and rejects the answer on
decoy items, other items of the same dataset that disagree with this one (each rejects the
other's reference answer). An answer that passes two questions with different answers is a
hedge or a catch-all (a tautology is a valid conclusion of any premises), not an answer.
Partial credit, when asked for, is the upstream score above what the no-answer probe earns,
and nothing from the default scorer (whose only partial credit is for containing the answer).
"""

from __future__ import annotations

import functools
import json
import logging
import warnings
from typing import Any

from gemkit.envs.reasoning_gym.items import item_at
from gemkit.envs.reasoning_gym.safety import refusal

log = logging.getLogger(__name__)

#: text that answers no task: a scorer that accepts it accepts anything
NOT_AN_ANSWER = "#no-answer#"
#: decoy items an accepted answer must fail, and how many later items are tried to find them
DECOYS = 1
DECOY_TRIES = 4
#: datasets whose upstream scorer accepts anything, scored here by exact (case-blind) match
EXACT = frozenset({"game_of_life_halting"})
#: metadata fields that hold a valid answer for datasets whose `answer` is None
REFERENCE_FIELDS = ("possible_answer", "example_correct_answer", "example_answer")


def reference_answer(entry: dict[str, Any]) -> str | None:
    """A correct answer for `entry`: its `answer`, or an example kept in its metadata."""
    if entry.get("answer") is not None:
        return str(entry["answer"])
    meta = entry.get("metadata") or {}
    for key in REFERENCE_FIELDS:
        value = meta.get(key)
        if value is not None:
            return value if isinstance(value, str) else json.dumps(value)
    return None


def source_of(entry: dict[str, Any], default: str) -> str:
    """The dataset that made `entry` (a composite's member, else `default`)."""
    return str((entry.get("metadata") or {}).get("source_dataset", default))


def score(dataset: Any, answer: str, entry: dict[str, Any], name: str) -> float:
    """The upstream score of `answer`, 0.0 when it is screened out or the scorer crashes."""
    source = source_of(entry, name)
    if source in EXACT:
        return float(answer.strip().lower() == str(entry.get("answer")).strip().lower())
    if refusal(source, answer):
        return 0.0
    try:
        with warnings.catch_warnings():  # scorers warn on odd text (the probe is odd text)
            warnings.simplefilter("ignore")
            return float(dataset.score_answer(answer, entry))
    except Exception:  # an upstream verifier crash on odd text must not end the run
        log.debug("%s: score_answer failed on %r", name, answer[:200], exc_info=True)
        return 0.0


@functools.lru_cache(maxsize=4096)
def decoys(dataset: Any, name: str, index: int, size: int) -> tuple[dict[str, Any], ...]:
    """Up to `DECOYS` later items that item `index` disagrees with, both ways.

    A decoy's reference fails item `index`, and item `index`'s reference fails the decoy, so
    the right answer to item `index` always fails its decoys: only an answer that fits both
    questions, a hedge or a catch-all, can pass one.
    """
    entry = item_at(dataset, index)
    own = reference_answer(entry)
    found: list[dict[str, Any]] = []
    for step in range(1, min(DECOY_TRIES, size - 1) + 1):
        other = item_at(dataset, (index + step) % size)
        ref = reference_answer(other)
        if ref is None or score(dataset, ref, entry, name) >= 1.0:
            continue
        if own is not None and score(dataset, own, other, name) >= 1.0:
            continue
        found.append(other)
        if len(found) == DECOYS:
            break
    return tuple(found)


def unspecific(dataset: Any, answer: str, entry: dict[str, Any], index: int, name: str) -> str:
    """Why an accepted `answer` earns nothing: the scorer takes anything, or a decoy takes it."""
    if score(dataset, NOT_AN_ANSWER, entry, name) >= 1.0:
        return "this task's scorer accepts any text, so no answer can be checked"
    for decoy in decoys(dataset, name, index, len(dataset)):
        if score(dataset, answer, decoy, name) >= 1.0:
            return "the answer also fits another question whose answer is different"
    return ""


def _default_scorer(dataset: Any, entry: dict[str, Any], name: str) -> bool:
    """Whether `entry` is scored by reasoning-gym's base `score_answer` (exact or substring)."""
    from reasoning_gym.dataset import ProceduralDataset

    member = getattr(dataset, "datasets", {}).get(source_of(entry, name), dataset)
    return type(member).score_answer is ProceduralDataset.score_answer


def reward(
    dataset: Any, answer: str, entry: dict[str, Any], index: int, name: str, partial: bool
) -> tuple[float, float, str]:
    """`(reward, upstream score, why an accepted answer earned nothing)` of `answer`."""
    raw = score(dataset, answer, entry, name)
    if raw >= 1.0:
        why = unspecific(dataset, answer, entry, index, name)
        return (0.0 if why else 1.0), raw, why
    if not partial or raw <= 0.0 or _default_scorer(dataset, entry, name):
        return 0.0, raw, ""
    floor = score(dataset, NOT_AN_ANSWER, entry, name)
    return (raw if raw > floor else 0.0), raw, ""
