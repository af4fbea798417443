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

Partial credit (`partial_credit=True`) pays only what an answer earns *because of this item*.
Upstream closeness scores pay any answer that lands near the reference by chance: `00:00:00`
earned 0.36 on `time_intervals`, `0` earned 0.15 on `rectangle_count`, and every parseable
answer 0.05 on `countdown`. So the partial reward of an answer `a` on item `i` is

    own(a, i) - max over decoys d of own(a, d),   own(a, j) = max(0, score(a, j) - floor(j))

where `floor(j)` is the most that text taken from item `j` itself earns there (no answer, its
question, each line of it, what follows a colon in a line). An answer that does not depend
on the item (a constant, another question's answer, junk shaped like an answer) scores on
this item as it does on any other, so its partial reward is 0 on average and below 0 against
the best of two decoys: it earns no more than with partial credit off. An echo of the
question earns at most its floor here. A hedge, an answer that lists the reference among
other text or has a part (split at `or`, `and`, commas, semicolons, bars, lines or spaces)
that scores better than the whole, earns nothing. The reward can be negative: an answer closer to another question's answer than to
this one's. The default scorer gives no partial credit (its only partial credit is for
containing the answer).
"""

from __future__ import annotations

import functools
import json
import logging
import math
import re
import warnings
from collections import OrderedDict
from typing import Any

from gemkit.envs.reasoning_gym.items import item_at
from gemkit.envs.reasoning_gym.safety import refusal

log = logging.getLogger(__name__)

#: text that answers no task: a scorer that accepts it accepts anything
NOT_AN_ANSWER = "#no-answer#"
#: decoy items an accepted answer must fail, the decoys a partial score is weighed against,
#: and how many later items are tried to find them
DECOYS = 1
PARTIAL_DECOYS = 2
DECOY_TRIES = 6
#: where an answer is split into the candidates a hedge lists, one kind at a time
_SEPARATORS = [
    re.compile(p, re.IGNORECASE)
    for p in (r"\s+or\s+", r"\s+and\s+", r"\s*\n\s*", r"\s*;\s*", r"\s*\|\s*", r"\s*,\s*", r"\s+")
]
#: the most separators of one kind that start or end a candidate, and the most candidates
MAX_PARTS = 64
MAX_CANDIDATES = 512
#: the most lines of a question taken as echo probes
MAX_LINES = 40
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
            value = float(dataset.score_answer(answer, entry))
    except Exception:  # an upstream verifier crash on odd text must not end the run
        log.debug("%s: score_answer failed on %r", name, answer[:200], exc_info=True)
        return 0.0
    return value if math.isfinite(value) else 0.0


@functools.lru_cache(maxsize=4096)
def decoys(
    dataset: Any, name: str, index: int, size: int
) -> tuple[tuple[int, dict[str, Any]], ...]:
    """Up to `PARTIAL_DECOYS` later items that item `index` disagrees with, both ways, as
    `(index, item)` pairs.

    A decoy's reference fails item `index`, and item `index`'s reference fails the decoy, so
    the right answer to item `index` always fails its decoys: only an answer that fits both
    questions, a hedge or a catch-all, can pass one.
    """
    entry = item_at(dataset, index)
    own = reference_answer(entry)
    found: list[tuple[int, dict[str, Any]]] = []
    for step in range(1, min(DECOY_TRIES, size - 1) + 1):
        at = (index + step) % size
        other = item_at(dataset, at)
        ref = reference_answer(other)
        if ref is None or score(dataset, ref, entry, name) >= 1.0:
            continue
        if own is not None and score(dataset, own, other, name) >= 1.0:
            continue
        found.append((at, other))
        if len(found) == PARTIAL_DECOYS:
            break
    return tuple(found)


def unspecific(dataset: Any, answer: str, entry: dict[str, Any], index: int, name: str) -> str:
    """Why an accepted `answer` earns nothing: the scorer takes anything, or a decoy takes it."""
    if score(dataset, NOT_AN_ANSWER, entry, name) >= 1.0:
        return "this task's scorer accepts any text, so no answer can be checked"
    for _, decoy in decoys(dataset, name, index, len(dataset))[:DECOYS]:
        if score(dataset, answer, decoy, name) >= 1.0:
            return "the answer also fits another question whose answer is different"
    return ""


def echoes(question: str) -> list[str]:
    """Text taken from a question with no work: the question, its lines, what follows a colon."""
    lines = [line.strip() for line in question.splitlines() if line.strip()][:MAX_LINES]
    tails = [line.rsplit(":", 1)[1].strip() for line in lines if ":" in line]
    return list(dict.fromkeys(t for t in [question.strip(), *lines, *tails] if t))


_FLOORS: OrderedDict[tuple[Any, str, int], float] = OrderedDict()


def floor(dataset: Any, entry: dict[str, Any], index: int, name: str) -> float:
    """The most that no answer, or text of item `index`'s own question, scores there."""
    key = (dataset, name, index)
    if key in _FLOORS:
        _FLOORS.move_to_end(key)
        return _FLOORS[key]
    probes = [NOT_AN_ANSWER, *echoes(str(entry.get("question", "")))]
    value = max(score(dataset, p, entry, name) for p in probes)
    _FLOORS[key] = value
    while len(_FLOORS) > 8192:
        _FLOORS.popitem(last=False)
    return value


def _candidates(answer: str) -> list[str]:
    """What `answer` lists: its parts at each kind of separator, and the runs of parts that
    start or end it (a candidate that holds separators itself: `[1, 2] or [3]`)."""
    out: dict[str, None] = {}
    for sep in _SEPARATORS:
        pieces = [p for p in sep.split(answer) if p.strip()]
        if len(pieces) < 2:
            continue
        out.update(dict.fromkeys(p.strip() for p in pieces))
        bounds = [m.start() for m in sep.finditer(answer)][:MAX_PARTS]
        ends = [m.end() for m in sep.finditer(answer)][:MAX_PARTS]
        out.update(dict.fromkeys(answer[:b].strip() for b in bounds))
        out.update(dict.fromkeys(answer[e:].strip() for e in ends))
    out.pop(answer.strip(), None)
    out.pop("", None)
    return list(out)


def _lists(answer: str, ref: str) -> bool:
    """Whether `answer` holds `ref` as one of several candidates (between separators)."""
    ref, text = " ".join(ref.split()).lower(), " ".join(answer.split()).lower()
    if not ref or ref == text:
        return False
    return re.search(rf"(?:^|[\s,;|/]){re.escape(ref)}(?=$|[\s,;|/])", text) is not None


def hedged(dataset: Any, answer: str, entry: dict[str, Any], name: str, raw: float) -> bool:
    """Whether `answer` is a hedge: it lists the reference among other text, or a candidate it
    lists scores better than the whole (see `_candidates`)."""
    ref = reference_answer(entry)
    if ref is not None and _lists(answer, ref):
        return True
    candidates = _candidates(answer)
    if len(candidates) > MAX_CANDIDATES:
        return True  # too many candidates to try: a list this long is no partial answer
    return any(score(dataset, c, entry, name) > raw for c in candidates)


def partial(
    dataset: Any, answer: str, entry: dict[str, Any], index: int, name: str, raw: float
) -> float:
    """The partial reward of a rejected `answer` (see the module docstring): what it earns
    here above the floor, less the most it earns so on a decoy; 0 for a hedge."""
    if raw > 0.0 and hedged(dataset, answer, entry, name, raw):
        return 0.0
    others = decoys(dataset, name, index, len(dataset))
    if not others:  # nothing to tell an answer to this item from one to any item
        return 0.0
    own = max(0.0, raw - floor(dataset, entry, index, name))
    elsewhere = max(
        max(0.0, score(dataset, answer, other, name) - floor(dataset, other, at, name))
        for at, other in others
    )
    return own - elsewhere


def _default_scorer(dataset: Any, entry: dict[str, Any], name: str) -> bool:
    """Whether `entry` is scored by reasoning-gym's base `score_answer` (exact or substring)."""
    from reasoning_gym.dataset import ProceduralDataset

    member = getattr(dataset, "datasets", {}).get(source_of(entry, name), dataset)
    return type(member).score_answer is ProceduralDataset.score_answer


def reward(
    dataset: Any, answer: str, entry: dict[str, Any], index: int, name: str, partial_credit: bool
) -> tuple[float, float, str]:
    """`(reward, upstream score, why an accepted answer earned nothing)` of `answer`."""
    raw = score(dataset, answer, entry, name)
    if raw >= 1.0:
        why = unspecific(dataset, answer, entry, index, name)
        return (0.0 if why else 1.0), raw, why
    if not partial_credit or _default_scorer(dataset, entry, name):
        return 0.0, raw, ""
    return partial(dataset, answer, entry, index, name, raw), raw, ""
