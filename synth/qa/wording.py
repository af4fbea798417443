"""What a question's text states, read back for comparison with its logical form.

A model that rewrites a question may drift from the form it was given: name an entity the
form never mentions, ask for a city when the answer is a person, or drop a detail. These
readers find, in a question's text, the world entities it names, the answer type it asks
for, and whether it states each value and relation of a form; `check_text` in `verify.py`
compares them with the form.
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

from gemkit.synth.qa.logic import Node, mentions, value_text, walk
from gemkit.synth.world.schema import LABEL, LABELS, NAME_WORDS, RELATIONS, TYPES
from gemkit.synth.world.world import World

_WORD = re.compile(r"[\w'&-]+")
_STOP = frozenset(
    "the a an of in on at by to for from with and or is was were be been has have had its "
    "his her their that which who whom whose what where when this these those as it".split()
)
#: nouns a question may ask with, per answer type, beyond the type's own noun and its labels
SYNONYMS: dict[str, tuple[str, ...]] = {
    "person": ("man", "woman", "individual", "people"),
    "city": ("town",),
    "country": ("nation", "state"),
    "company": ("firm", "business", "corporation", "enterprise"),
    "university": ("college", "institute", "institution", "school"),
    "railway": ("line", "railroad"),
    "mountain": ("peak", "summit"),
    "book": ("novel", "work"),
    "film": ("movie",),
    "band": ("group", "ensemble"),
    "award": ("prize", "medal", "honour", "honor"),
    "event": ("festival", "fair", "summit", "regatta", "competition"),
}
#: how a question opens when it asks for a year or a number: never an entity answer
_VALUE_OPENINGS = re.compile(
    r"^(?:in |at |by )?(?:what|which) (?:year|decade|century|date|number|age)\b"
    r"|^(?:when|how many|how much|how long|how tall|how high|how old|how far)\b"
)
_WHO = re.compile(r"^(?:who|whom|whose)\b")
#: "what is the name of the company ..." asks what "which company ..." asks
_NAME_OF = re.compile(r"^(which|what) (?:is|was) the name of (?:the|a|an) ")
_WHERE = re.compile(r"^where\b")
_FRONTED = re.compile(r"^(?:[^,]|,(?! ))*?, (?=(?:which|what|who)\b)")  # "2,000" is no comma
_WHICH = re.compile(r"^(?:(?:in|at|of|for|by|from|to|on|with|into|under) )?(?:which|what)\b")


def _asked_nouns() -> dict[str, str]:
    nouns: dict[str, str] = {}
    for key, t in TYPES.items():
        nouns[t.noun] = key
    for rel, values in LABELS.items():
        relation = RELATIONS[rel]
        if relation.label_mode != "noun":
            continue
        for value in values:
            for subject in relation.subjects:
                nouns.setdefault(value.split()[-1], subject)
    for key, words in SYNONYMS.items():
        for w in words:
            nouns.setdefault(w, key)
    return nouns


#: noun -> the answer type a question asking "which <noun>" wants
ASKED_NOUNS = _asked_nouns()


def asked_type(question: str) -> str | None:
    """The entity type a question asks for ("Which journalist ...?" -> person), `value` when it
    asks for a year or a number, or None when the text does not say."""
    q = " ".join(question.lower().replace("?", " ").split())
    # the asking sentence is the last one: a lead-in sentence before it states a fact
    q = q.rsplit(". ", 1)[-1]
    if not (_VALUE_OPENINGS.match(q) or _WHO.match(q) or _WHERE.match(q) or _WHICH.match(q)):
        # a fronted phrase before the asking word: "founded in 1934, which company ..."
        fronted = _FRONTED.match(q)
        q = q[fronted.end() :] if fronted else q
    q = _NAME_OF.sub(r"\1 ", q)
    if _VALUE_OPENINGS.match(q):
        return "value"
    if _WHO.match(q):
        return "person"
    if _WHERE.match(q):
        return "place"
    m = _WHICH.match(q)
    if m is None:
        return None
    # the head noun comes within a few words, last of its compound: "which shipping company",
    # "which film festival" (an event), "what is the person"
    found = None
    for word in _WORD.findall(q[m.end() :])[:6]:
        noun = ASKED_NOUNS.get(word) or ASKED_NOUNS.get(word.rstrip("s"))
        if noun is None and found is not None:
            break
        found = noun or found
    return found


def type_matches(asked: str | None, answer_type: str) -> bool:
    """Whether a question asking for `asked` can have an answer of `answer_type`."""
    if asked == "place":
        return answer_type in ("city", "country")
    return asked == answer_type


def name_index(world: World) -> dict[str, list[tuple[str, str]]]:
    """Distinctive word -> `(surface form, entity id)` of every name holding it (cached)."""

    def build(world: World) -> dict[str, list[tuple[str, str]]]:
        built: dict[str, list[tuple[str, str]]] = defaultdict(list)
        for e in world.entities.values():
            for alias in e.aliases:
                words = [w.lower() for w in _WORD.findall(alias)]
                keys = [w for w in words if w not in NAME_WORDS] or words
                if keys:
                    built[max(keys, key=len)].append((alias, e.id))
        return dict(built)

    return world.derived("name_index", build)


def named_entities(text: str, world: World) -> set[str]:
    """Ids of the world entities a text names (a name inside a longer name counts once)."""
    index = name_index(world)
    hits: list[tuple[int, int, str]] = []
    low = text.lower()
    words = {w.lower() for w in _WORD.findall(text)}
    # a possessive ("Shavoupu's director", "Works' founder") names the same entity
    words |= {w.removesuffix("'s").rstrip("'") for w in words if "'" in w}
    for word in words:
        for alias, eid in index.get(word, ()):
            if not mentions(text, alias):
                continue
            start = low.find(alias.lower())
            hits.append((start, start + len(alias), eid))
    kept = {
        eid
        for s, e, eid in hits
        if not any(s2 <= s and e <= e2 and (e2 - s2) > (e - s) for s2, e2, _ in hits)
    }
    return kept


def _norm(text: str) -> str:
    text = text.lower().replace("-", " ")
    text = re.sub(r"(?<=\d),(?=\d{3})", "", text)  # 46,801 and 46801 read the same
    return " ".join(text.split())


def _strip_article(phrase: str) -> str:
    for a in ("the ", "a ", "an "):
        if phrase.startswith(a):
            return phrase[len(a) :]
    return phrase


def states_value(question: str, node: Node, rel: str, refs: dict[str, str]) -> bool:
    """Whether the question states a literal or blurred value ("1928", "the mid-1920s")."""
    phrase = _strip_article(_norm(value_text(node, rel, refs)))
    if not phrase:
        return True
    return re.search(r"(?<!\w)" + re.escape(phrase) + r"(?!\w)", _norm(question)) is not None


def relation_cues(rel: str, direction: str) -> frozenset[str]:
    """Stems of the content words a relation's phrases use in one direction ("foun" for
    founded_by either way): a question stating the relation uses one of them."""
    r = RELATIONS[rel]
    templates = (r.out_vp, r.out_pp) if direction == "out" else (r.in_vp, r.in_noun)
    words: set[str] = set()
    for template in templates:
        if template:
            plain = re.sub(r"\{\w+\}", " ", template)
            words |= {w.lower() for w in _WORD.findall(plain)}
    return frozenset(w[:4] for w in words - _STOP if len(w) >= 4)


def states_relation(question: str, rel: str, direction: str) -> bool:
    """Whether the question uses a word of the relation ("founded", "founder" for founded_by)."""
    cues = relation_cues(rel, direction)
    if not cues:
        return True  # "is in": no content word to look for
    return any(w[:4] in cues for w in _WORD.findall(question.lower()) if len(w) >= 4)


def form_leaves(lf: Node) -> list[tuple[dict[str, Any], Node]]:
    """Every `(constraint, value node)` of a form whose value is an entity or a value."""
    return [(holder, node) for _, node, holder in walk(lf) if holder is not None]


def is_label(holder: dict[str, Any]) -> bool:
    """Whether a constraint is a label ("an architect"), folded into the head noun."""
    return RELATIONS[holder["rel"]].obj == LABEL
