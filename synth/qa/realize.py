"""The question realizer: a logical form as one of several English constructions.

`question_text` in `logic.py` reads every form the same way ("Which X ... and ... and ...?")
and nests descriptions inside descriptions ("the university where the founder of the
university where ... studied studied"). This realizer writes the same form the way a person
would, varied by a per-question `style` seed:

- the question frame: "Which X ...?", "What X ...?", "What is the name of the X that ...?",
  "Who ...?" (people), an apposition ("Which X, founded in 1934, ...?"), or a lead-in sentence
  that states the deepest part of the chain first and points back at it ("A person studied
  at the Kelvar Institute. Which company did this person found ...?" reads "... founded by
  this person");
- each nested description one of several ways: "the founder of X", "X's founder", "the person
  who founded X", "a person born in X";
- never a clause inside the middle of another: a template whose slot is not at its end
  ("the university where {S} studied") takes only a name; a longer description goes in a
  right-branching form ("the university that was attended by ...").

Every construction states every clause with its relation's own words and every value and
name verbatim, so `verify.check_text` reads the same form back from any of them.
"""

from __future__ import annotations

import random
from typing import Any

from gemkit.synth.qa.logic import (
    Node,
    depth,
    get,
    head_noun,
    join_phrases,
    replace,
    value_text,
)
from gemkit.synth.world.schema import LABEL, RELATIONS, with_article

#: the question frames, in the order `realize` considers them
CONSTRUCTIONS = ("which", "what", "what_name", "who", "apposition", "lead_in")
#: a relation's `in_vp` whose slot is not at its end, said right-branching instead
_RIGHT_VP = {"filmed_in": "was the filming location of {S}"}


def _is_label(c: dict[str, Any]) -> bool:
    return RELATIONS[c["rel"]].obj == LABEL and c["value"]["kind"] == "literal"


def _clauses(node: Node) -> list[dict[str, Any]]:
    # plain values first: a clause after a nested description would read as part of it
    return sorted((c for c in node["where"] if not _is_label(c)), key=lambda c: depth(c["value"]))


def _simple(node: Node) -> bool:
    """Whether a value reads as a name or a plain value (no clause of its own)."""
    return node["kind"] in ("entity", "literal", "range", "pronoun")


class Realizer:
    """Writes one form; `pick` draws each choice, so one style seed gives one wording."""

    def __init__(self, refs: dict[str, str], pick: random.Random):
        self.refs = refs
        self.pick = pick

    def choose(self, options: list[str]) -> str:
        """One of the options (the first when there is one)."""
        return options[0] if len(options) == 1 else options[self.pick.randrange(len(options))]

    def value(self, node: Node, rel: str) -> str:
        """How a value node reads in a relation's phrase."""
        if node["kind"] == "pronoun":
            return node["text"]
        if node["kind"] == "query":
            return self.noun_phrase(node)
        return value_text(node, rel, self.refs)

    def verb_phrase(self, c: dict[str, Any]) -> str:
        """The finite verb phrase of one clause about `?x` ("was founded in 1934")."""
        rel = RELATIONS[c["rel"]]
        text = self.value(c["value"], c["rel"])
        if c["dir"] == "out":
            if "{aO}" in rel.out_vp:
                return rel.out_vp.format(aO=with_article(text))
            return rel.out_vp.format(O=text)
        template = rel.in_vp or f"is the object of {c['rel']} for {{S}}"
        if not template.endswith("{S}") and not _simple(c["value"]):
            template = _RIGHT_VP.get(c["rel"], template)
        return template.format(S=text)

    def noun_phrase(self, node: Node) -> str:
        """A description of the entity a query node stands for, in one of its wordings."""
        rest = _clauses(node)
        head = head_noun(node)
        if not rest:
            return with_article(head)
        who = "who" if node["type"] == "person" else "that"
        if len(rest) > 1:
            return f"{with_article(head)} {who} {join_phrases([self.verb_phrase(c) for c in rest])}"
        c = rest[0]
        rel = RELATIONS[c["rel"]]
        inner = c["value"]
        text = self.value(inner, c["rel"])
        options = [f"{with_article(head)} {who} {self.verb_phrase(c)}"]
        labelled = len(rest) < len(node["where"])
        if c["dir"] == "in" and rel.in_noun and not labelled:
            # a slot in the middle takes a name only: "the university where X studied"
            if rel.in_noun.endswith("{S}") or _simple(inner):
                options.append(rel.in_noun.format(S=text))
            if (
                inner["kind"] == "entity"
                and rel.in_noun.startswith("the ")
                and rel.in_noun.endswith(" of {S}")
            ):
                noun = rel.in_noun[len("the ") : -len(" of {S}")]
                options.append(f"{text}'" + ("" if text.endswith("s") else "s") + f" {noun}")
        if c["dir"] == "out" and rel.out_pp:
            options.append(f"{with_article(head)} {rel.out_pp.format(O=text)}")
        return self.choose(options)

    # -- frames ---------------------------------------------------------------------------------

    def frame(self, root: Node, construction: str) -> str:
        """The interrogative sentence of `root` in one frame."""
        rest = _clauses(root)
        head = head_noun(root)
        vps = [self.verb_phrase(c) for c in rest] or ["is described here"]
        if construction == "who":
            labels = [c for c in root["where"] if _is_label(c)]
            vps = [
                RELATIONS[c["rel"]].out_vp.format(aO=with_article(str(c["value"]["value"])))
                for c in labels
            ] + vps
            return f"Who {join_phrases(vps)}?"
        if construction == "what":
            return f"What {head} {join_phrases(vps)}?"
        if construction == "what_name":
            who = "who" if root["type"] == "person" else "that"
            return f"What is the name of the {head} {who} {join_phrases(vps)}?"
        if construction == "apposition":
            i = _apposable(rest)
            if i is not None:
                c = rest[i]
                pp = RELATIONS[c["rel"]].out_pp.format(O=self.value(c["value"], c["rel"]))
                others = [vp for j, vp in enumerate(vps) if j != i]
                return f"Which {head}, {pp}, {join_phrases(others)}?"
        return f"Which {head} {join_phrases(vps)}?"

    def lead_in(self, root: Node, path: tuple[Any, ...], ask: str) -> str:
        """The node at `path` stated first as a sentence of its own, then pointed back at."""
        node = get(root, path)
        rest = _clauses(node)
        subject = with_article(head_noun(node))
        sentence = f"{subject[:1].upper()}{subject[1:]} {join_phrases([self.verb_phrase(c) for c in rest])}."
        noun = head_noun(node).split()[-1]
        pointer = {"kind": "pronoun", "text": f"this {noun}"}
        return f"{sentence} {self.frame(replace(root, path, pointer), ask)}"


def _apposable(clauses: list[dict[str, Any]]) -> int | None:
    """The clause an apposition can hold: a plain value with a participle, not the only one."""
    if len(clauses) < 2:
        return None
    for i, c in enumerate(clauses):
        if c["dir"] == "out" and RELATIONS[c["rel"]].out_pp and _simple(c["value"]):
            return i
    return None


def lead_in_path(root: Node) -> tuple[Any, ...] | None:
    """Where a lead-in cuts the chain: halfway down its deepest branch (None if too shallow)."""
    path: tuple[Any, ...] = ()
    node = root
    while True:
        nested = [(i, c) for i, c in enumerate(node["where"]) if c["value"]["kind"] == "query"]
        if not nested:
            break
        i, c = max(nested, key=lambda ic: depth(ic[1]["value"]))
        path, node = (*path, i), c["value"]
    if len(path) < 2:
        return None
    cut = path[: (len(path) + 1) // 2]
    return cut if _clauses(get(root, cut)) else None


def constructions_for(root: Node) -> list[str]:
    """The frames that fit a form, a frame listed twice drawn twice as often (a person is
    asked "who"; an apposition needs two clauses; a lead-in needs a chain)."""
    out = ["which", "what", "what_name"]
    if root["type"] == "person":
        out += ["who", "who"]  # how people are most often asked about
    if _apposable(_clauses(root)) is not None:
        out.append("apposition")
    if lead_in_path(root) is not None:
        out.append("lead_in")
    return out


def realize(root: Node, refs: dict[str, str] | None = None, style: int = 0) -> tuple[str, str]:
    """`(question, construction)`: the form in the frame and wording `style` selects."""
    pick = random.Random(style)
    r = Realizer(refs or {}, pick)
    options = constructions_for(root)
    construction = options[pick.randrange(len(options))]
    if construction == "lead_in":
        path = lead_in_path(root)
        assert path is not None
        asks = list(dict.fromkeys(c for c in options if c not in ("lead_in", "apposition")))
        return r.lead_in(root, path, asks[pick.randrange(len(asks))]), construction
    return r.frame(root, construction), construction
