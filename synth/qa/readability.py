"""How hard a question's text is to read: checks on the text alone, for any writer's question.

A question a model is trained on should read like one a person would ask. These readers find,
in the text, the three patterns a template writer leaves when it nests descriptions:

- **centre-embedding**: a relative clause inside the middle of another phrase, so the reader
  must hold the outer phrase open across it ("a country that has *a city that is the
  birthplace of a person who ...* as its capital");
- **a repeated main verb**: two phrases of one clause that start with the same verb ("was
  born in the 1920s and was born in a city ...");
- **deep clauses**: more relative clauses in one sentence than `MAX_CLAUSES` (every one
  counted as if nested in the one before it: the count bounds the depth from above, and a
  text reader cannot always tell which clause an "and" closes).

`readability_problems` lists every problem found; the realizer writes questions that have
none, and the quality check refuses an edit whose question has any (`verify.check_form`).
`frame_of` names the construction a question is written in, read off its text.
"""

from __future__ import annotations

import functools
import re

from gemkit.synth.world.schema import RELATIONS, TYPES

#: relative clauses one sentence may hold
MAX_CLAUSES = 2
#: the words that open a relative clause (the question's own wh-word is not one)
RELATIVE = re.compile(r"\b(?:who|whom|whose|that|which|where)\b", re.IGNORECASE)
#: the asking word of a sentence: first, or first after a fronted phrase ("Founded in 1934, which")
_INTERROGATIVE = re.compile(r"^(?:(?:[^,]|,(?! ))*, )?(?:which|what|who|whom|whose)\b", re.I)
_AUX = frozenset({"is", "was", "are", "were", "has", "had", "have"})
_WORD = re.compile(r"[\w'-]+")


def sentences(question: str) -> list[str]:
    """The sentences of a question (a lead-in states facts before the asking one)."""
    return [s for s in re.split(r"(?<=[.?])\s+(?=[A-Z])", question.strip()) if s]


def relative_clauses(sentence: str) -> int:
    """The relative clauses a sentence opens, its own asking word left out."""
    asking = _INTERROGATIVE.match(sentence)
    rest = sentence[asking.end() :] if asking else sentence
    return len(RELATIVE.findall(rest))


def clause_depth(question: str) -> int:
    """The most relative clauses in one sentence of the question: a bound on their nesting."""
    return max((relative_clauses(s) for s in sentences(question)), default=0)


# -- centre-embedding ---------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def _middle_slots() -> tuple[tuple[re.Pattern[str], re.Pattern[str]], ...]:
    """`(before, after)` word patterns of every phrase whose slot is not at its end."""
    out = set()
    for rel in RELATIONS.values():
        # only a slot that holds an entity can hold a description (a year or a number cannot)
        outgoing = (rel.out_vp, rel.out_pp) if rel.obj in TYPES else ()
        for template in (*outgoing, rel.in_vp, rel.in_noun):
            if not template:
                continue
            m = re.search(r"\{(?:S|O|aO)\}", template)
            if m is None or m.end() == len(template):
                continue
            before = template[: m.start()].split()  # the whole lead: "the company that"
            after = template[m.end() :].split()
            if after and before:
                out.add((" ".join(before), " ".join(after)))
    return tuple(
        (
            re.compile(r"\b" + re.escape(b) + r"\b", re.I),
            re.compile(r"\b" + re.escape(a) + r"\b", re.I),
        )
        for b, a in sorted(out)
    )


def centre_embedded(question: str) -> list[str]:
    """Each phrase of the question that holds a relative clause inside its middle.

    For every phrase of the world's relations whose slot holds an entity and is not at its
    end ("has {O} as its capital", "the university where {S} studied"), the text between the
    nearest start of the phrase and its end (in one sentence) must hold no relative clause.
    """
    found = []
    for sentence in sentences(question):
        for before, after in _middle_slots():
            for end in after.finditer(sentence):
                starts = list(before.finditer(sentence, 0, end.start()))
                if not starts:
                    continue
                inside = sentence[starts[-1].end() : end.start()].strip()
                # "the company that employs ... a person who worked for": the closing verb has
                # a subject of its own (the relative word right before it), so nothing is inside
                last = inside.split()[-1] if inside else ""
                if RELATIVE.search(inside) and not RELATIVE.fullmatch(last):
                    found.append(f"{starts[-1].group(0)} ... {end.group(0)}")
    return found


# -- repeated verbs ------------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def _verbs() -> frozenset[str]:
    """The words a relation's verb phrase starts with ("was", "founded", "employs", ...)."""
    words = set(_AUX)
    for rel in RELATIONS.values():
        for template in (rel.out_vp, rel.in_vp):
            if template:
                words.add(template.split()[0].lower())
    return frozenset(words)


def main_verb(words: list[str]) -> tuple[str, ...]:
    """The verb a phrase starts with: "was founded" (an auxiliary and its participle), "is"
    (a copula before a noun or a place), "employs"."""
    low = [w.lower() for w in words[:3]]
    if low[0] in _AUX and len(low) > 1:
        if low[1] == "first" and len(low) > 2:  # "was first climbed"
            return tuple(low[:3])
        if low[1].endswith(("ed", "en")) or low[1] in {"born", "held", "set", "built", "run"}:
            return (low[0], low[1])
    return (low[0],)


def repeated_verbs(question: str) -> list[str]:
    """Each verb a phrase repeats from an earlier phrase of the same clause.

    A phrase starts after "and", after a comma, or as a sentence that goes on about the same
    subject ("It was ..."); the earlier one counts only if no relative clause opens between
    them (else the two phrases may have different subjects).
    """
    found = []
    verbs = _verbs()
    for sentence in sentences(question):
        for m in re.finditer(r"(?:\band |, )([\w'-]+)(?: ([\w'-]+))?(?: ([\w'-]+))?", sentence):
            words = [w for w in m.groups() if w]
            if words[0].lower() not in verbs:
                continue
            verb = main_verb(words)
            before = sentence[: m.start()]
            cut = max((r.end() for r in RELATIVE.finditer(before)), default=0)
            span = [w.lower() for w in _WORD.findall(before[cut:])]
            if _occurs(verb, span):
                found.append(" ".join(verb))
    found += _repeated_across(question, verbs)
    found += _repeated_participles(question)
    return found


def _repeated_participles(question: str) -> list[str]:
    """A participle set before or beside the asked noun, then its verb again: "Formed in the
    1960s, what band was formed in ...", "Which band, formed in 1960, was formed in ..."."""
    found = []
    for sentence in sentences(question):
        for m in re.finditer(r"\b(?:is|was) ([\w-]+)\b", sentence):
            if main_verb(["was", m.group(1)]) == ("was",):
                continue  # a copula, not a participle
            before = sentence[: m.start()]
            cut = max((r.end() for r in RELATIVE.finditer(before)), default=0)
            if re.search(rf"(?:^|, ){re.escape(m.group(1))}\b", before[cut:], re.I):
                found.append(m.group(1))
    return found


def _occurs(verb: tuple[str, ...], words: list[str]) -> bool:
    n = len(verb)
    for i in range(len(words) - n + 1):
        if tuple(words[i : i + n]) == verb and main_verb(words[i : i + 3]) == verb:
            return True
    return False


def _repeated_across(question: str, verbs: frozenset[str]) -> list[str]:
    """Verbs repeated by sentences that go on about one subject: "A film was released in
    1990. It was released in ..." (a statement, then "It ..." or "This person ...")."""
    seen: set[tuple[str, ...]] = set()
    found = []
    for sentence in sentences(question):
        words = _WORD.findall(sentence)
        if len(words) < 2 or not sentence.endswith("."):
            continue
        if words[0] == "It":
            start = 1
        elif words[0] == "This":
            start = 2
        elif words[0] in ("A", "An"):  # the first verb after the subject
            start = next((i for i, w in enumerate(words) if i and w.lower() in verbs), len(words))
        else:
            continue
        if len(words) <= start or words[start].lower() not in verbs:
            continue
        verb = main_verb(words[start : start + 3])
        if verb in seen:
            found.append(" ".join(verb))
        seen.add(verb)
    return found


def readability_problems(question: str, max_clauses: int = MAX_CLAUSES) -> list[str]:
    """What makes the question hard to read (empty when nothing does), one line each."""
    problems = [f"a clause inside '{p}'" for p in centre_embedded(question)]
    problems += [f"the verb '{v}' repeated in one clause" for v in repeated_verbs(question)]
    deepest = clause_depth(question)
    if deepest > max_clauses:
        problems.append(f"{deepest} relative clauses in one sentence (at most {max_clauses})")
    return problems


# -- frames --------------------------------------------------------------------------------------


def frame_of(question: str) -> str:
    """The construction a question is written in, read off its text.

    `statements` (facts said one sentence at a time, then "Which X is it?"), `lead_in` (one
    part of the chain said first, then pointed back at), `fronted` (a phrase before the asking
    word), `what_name`, `who`, `apposition` (a phrase set off by commas after the asked noun),
    `which` ("Which/What X ...?"), or `other`.
    """
    parts = sentences(question)
    asking = parts[-1] if parts else question
    if len(parts) > 1:
        if re.fullmatch(r"(?:Which [\w' -]+ is it|Who is this [\w' -]+)\?", asking):
            return "statements"
        return "lead_in"
    if asking.startswith("What is the name of"):
        return "what_name"
    if asking.startswith("Who "):
        return "who"
    if re.match(r"(?:Which|What) [a-z-]+(?: [a-z-]+){0,2}, ", asking):
        return "apposition"
    if asking.startswith(("Which ", "What ")):
        return "which"
    if re.match(r"[A-Z](?:[^,]|,(?! ))*, (?:which|what|who) ", asking):  # "2,000" is no comma
        return "fronted"
    return "other"
