"""SQuAD-style answer metrics: exact match and token F1 after normalisation, best over aliases."""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Callable, Iterable

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> str:
    """Lowercase, drop punctuation and the articles a/an/the, collapse whitespace."""
    text = text.lower().translate(_PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def exact_match(pred: str, gold: str) -> float:
    """1.0 when the normalised strings are equal, else 0.0."""
    return float(normalize_answer(pred) == normalize_answer(gold))


def f1_score(pred: str, gold: str) -> float:
    """Harmonic mean of token precision and recall between the normalised strings."""
    p, g = normalize_answer(pred).split(), normalize_answer(gold).split()
    if not p or not g:
        return float(p == g)
    common = sum((Counter(p) & Counter(g)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(p), common / len(g)
    return 2 * precision * recall / (precision + recall)


def best_score(metric: Callable[[str, str], float], pred: str, golds: Iterable[str]) -> float:
    """The best `metric(pred, gold)` over the gold answer and its aliases."""
    return max((metric(pred, g) for g in golds), default=0.0)


METRICS: dict[str, Callable[[str, str], float]] = {"em": exact_match, "f1": f1_score}
