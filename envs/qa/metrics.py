"""SQuAD-style answer metrics: exact match and token F1 after normalisation, best over aliases.

Three rules keep a policy from earning these without the answer:

- an empty prediction never scores, and a gold answer that SQuAD normalisation empties (the
  multiple-choice letter "A", "The", "an") is compared with its articles kept, so "the" is not
  "A"; a gold with no letters or digits at all cannot be compared (`comparable`);
- F1 credit needs more than half of the prediction's tokens to be gold tokens
  (`MIN_F1_PRECISION`): listing candidates ("A B C D", "Paris London Rome") or padding the gold
  with other words earns nothing, where plain F1 pays 2/(k+1) for k listed candidates, more than
  the 1/k a guess expects;
- an F1 answer that joins alternatives ("Paris or Lyon", "Paris, Lyon", "Paris/Lyon") more
  often than the gold does scores 0 (`hedged`).

Text is read as `plain_text` first (NFKC: fullwidth letters, ligatures; no zero-width or bidi
characters), and accents are dropped, so look-alike encodings of one answer compare equal.
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable
from functools import lru_cache
from typing import Any

from gemkit.envs.math.replies import plain_text

#: F1 counts only when more than this share of the predicted tokens are gold tokens
MIN_F1_PRECISION = 0.5
#: words that join alternatives or negate an answer
HEDGE_WORDS = frozenset(
    "or nor either neither and not maybe perhaps possibly probably vs versus unless except "
    "otherwise".split()
)

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)
# separators of a list: `,` (not in 2,306), `;`, `/`, `|`, `&`, `+`, a line break
_SEPARATORS = re.compile(r",(?!\d{3}(?!\d))|[;/|&+\n]")
_WORDS = re.compile(r"[^\W_]+")


def _fold(text: str) -> str:
    """Plain, case-folded text without accents or punctuation (ASCII or Unicode)."""
    text = plain_text(text).casefold()
    if text.isascii():
        return text.translate(_PUNCT)
    text = unicodedata.normalize("NFKD", text)
    # drop combining marks (accents) and every punctuation or symbol character
    return "".join(c for c in text if unicodedata.category(c)[0] not in "MPS")


def normalize_answer(text: str) -> str:
    """Lowercase, drop punctuation and the articles a/an/the, collapse whitespace."""
    return " ".join(_ARTICLES.sub(" ", _fold(text)).split())


def _loose(text: str) -> str:
    """`normalize_answer` that keeps the articles."""
    return " ".join(_fold(text).split())


def _marks(text: str) -> Counter[str]:
    """The list separators and hedge words in `text`, counted."""
    text = plain_text(text).casefold()
    found = Counter(m[0] for m in _SEPARATORS.finditer(text))
    found.update(w for w in _WORDS.findall(text) if w in HEDGE_WORDS)
    return found


# golds recur every episode and a reply is scored against each alias: short texts are cached
_CACHED: dict[Callable[[str], Any], Callable[[str], Any]] = {
    f: lru_cache(maxsize=4096)(f) for f in (normalize_answer, _loose, _marks)
}


def _memo(f: Callable[[str], Any], text: str) -> Any:
    return _CACHED[f](text) if len(text) <= 200 else f(text)


def _forms(pred: str, gold: str) -> tuple[str, str]:
    """`pred` and `gold` normalised alike: SQuAD-style, or with articles when that empties gold."""
    g = _memo(normalize_answer, gold)
    if g:
        return _memo(normalize_answer, pred), g
    return _memo(_loose, pred), _memo(_loose, gold)


def comparable(gold: str) -> bool:
    """Whether `gold` keeps any letter or digit to compare a prediction with."""
    return bool(_forms("", gold)[1])


def hedged(pred: str, gold: str) -> bool:
    """Whether `pred` joins alternatives (or negates) more often than `gold` does."""
    return bool(_memo(_marks, pred) - _memo(_marks, gold))


def _too_long(pred: str, gold: str) -> bool:
    # far longer than the gold, an answer is padding: 0 at once, not after seconds of work
    return len(pred) > 10 * len(gold) + 200


def exact_match(pred: str, gold: str) -> float:
    """1.0 when the normalised strings are equal and not empty (and `pred` is not over 10 times
    the gold and 200 characters long), else 0.0."""
    if _too_long(pred, gold):
        return 0.0
    p, g = _forms(pred, gold)
    return float(bool(p) and p == g)


def f1_score(pred: str, gold: str) -> float:
    """Harmonic mean of token precision and recall between the normalised strings.

    0 for an empty, hedged or far too long prediction (over 10 times the gold and 200
    characters), and when at most `MIN_F1_PRECISION` of its tokens are gold tokens.
    """
    if _too_long(pred, gold):
        return 0.0
    p_text, g_text = _forms(pred, gold)
    p, g = p_text.split(), g_text.split()
    if not p or not g or hedged(pred, gold):
        return 0.0
    common = sum((Counter(p) & Counter(g)).values())
    precision, recall = common / len(p), common / len(g)
    if precision <= MIN_F1_PRECISION:
        return 0.0
    return 2 * precision * recall / (precision + recall)


def best_score(metric: Callable[[str, str], float], pred: str, golds: Iterable[str]) -> float:
    """The best `metric(pred, gold)` over the gold answer and its aliases."""
    return max((metric(pred, g) for g in golds), default=0.0)


METRICS: dict[str, Callable[[str, str], float]] = {"em": exact_match, "f1": f1_score}
