"""The question realizer: a logical form as one of several English constructions.

`question_text` in `logic.py` reads every form the same way ("Which X ... and ... and ...?")
and nests descriptions inside descriptions. This realizer writes the same form the way a
person would, varied by a per-question `style` seed:

- the frame, seven that differ in structure: "Which X ...?" (or "What X ...?"), "What is the
  name of the X that ...?", "Who ...?" (people), an apposition ("Which X, founded in 1934,
  ...?"), a fronted phrase ("Founded in 1934, which X ...?"), a lead-in sentence that states
  the deepest part of the chain first and points back at it ("A person studied at the Kelvar
  Institute. Which company was founded by this person?"), and statements that say the facts
  one sentence at a time ("A company was founded in 1934. It is headquartered in ... .
  Which company is it?");
- each nested description one of several ways: "the founder of X", "X's founder", "the
  person who founded X", "a person born in X".

What it never writes (`readability` reads the text back for each):

- a clause in the middle of another: a phrase whose slot is not at its end ("the university
  where {S} studied", "has {O} as its capital") takes a name only; a description goes in a
  right-branching form ("the university that was attended by ...", "has as its capital ...");
  and in a list of phrases about one subject only the last may open a clause;
- one verb twice in a clause: two phrases with the same verb share it ("was founded in 1934
  by ...", "is in X and the birthplace of ...");
- more than `MAX_CLAUSES` relative clauses in a sentence: every choice of wording has a cost
  in clauses, the cheapest wording of each part is known, and a frame is only drawn when its
  cheapest wording fits; the slack is spent on the wordings drawn.

Every construction states every clause with its relation's own words and every value and
name verbatim, so `verify.check_text` reads the same form back from any of them.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable
from typing import Any

from gemkit.synth.qa.logic import Node, depth, get, head_noun, replace, value_text
from gemkit.synth.qa.readability import MAX_CLAUSES, RELATIVE, main_verb
from gemkit.synth.world.schema import LABEL, RELATIONS, with_article

#: the question frames, in the order `realize` considers them
CONSTRUCTIONS = ("which", "what_name", "who", "apposition", "fronted", "lead_in", "statements")
#: a phrase whose slot is not at its end, said right-branching when the slot holds a description
_RIGHT = {
    ("filmed_in", "in"): "was the filming location of {S}",
    ("capital", "out"): "has as its capital {O}",
}
#: the cost of a wording that cannot be written within the rules
NEVER = 10**6
_PREPOSITIONS = ("in ", "by ", "at ", "on ", "to ", "for ", "from ", "with ")

Choice = tuple[int, Callable[[], str]]


@functools.lru_cache(maxsize=4096)
def _clauses_in(template: str) -> int:
    return len(RELATIVE.findall(template))


def _is_label(c: dict[str, Any]) -> bool:
    return RELATIONS[c["rel"]].obj == LABEL and c["value"]["kind"] == "literal"


def _clauses(node: Node) -> list[dict[str, Any]]:
    # plain values first: a clause after a nested description would read as part of it
    return sorted((c for c in node["where"] if not _is_label(c)), key=lambda c: depth(c["value"]))


def _simple(node: Node) -> bool:
    """Whether a value reads as a name or a plain value (no clause of its own)."""
    return node["kind"] in ("entity", "literal", "range", "pronoun")


def _template(c: dict[str, Any]) -> str:
    """The verb phrase template of a clause about `?x`, right-branching around a description."""
    return _template_of(c["rel"], c["dir"], _simple(c["value"]))


@functools.lru_cache(maxsize=1024)
def _template_of(key: str, direction: str, simple: bool) -> str:
    rel = RELATIONS[key]
    if direction == "out":
        template = rel.out_vp
        slot = "{aO}" if "{aO}" in template else "{O}"
    else:
        template = rel.in_vp or f"is the object of {key} for {{S}}"
        slot = "{S}"
    if not template.endswith(slot) and not simple:
        template = _RIGHT.get((key, direction), template)
    return template


def _verb(c: dict[str, Any]) -> tuple[str, ...]:
    return _verb_of(c["rel"], c["dir"], _simple(c["value"]))


@functools.lru_cache(maxsize=1024)
def _verb_of(key: str, direction: str, simple: bool) -> tuple[str, ...]:
    return main_verb(_template_of(key, direction, simple).split())


def _groups(clauses: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Clauses grouped by their verb (in order of first use): one group is one phrase."""
    groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for c in clauses:
        groups.setdefault(_verb(c), []).append(c)
    return list(groups.values())


class Realizer:
    """Writes one form; `pick` draws each choice, so one style seed gives one wording."""

    def __init__(self, refs: dict[str, str], pick: random.Random, max_clauses: int = MAX_CLAUSES):
        self.refs = refs
        self.pick = pick
        self.max_clauses = max_clauses
        self.slack = 0  # clauses the sentence being written may spend beyond its cheapest
        self._need: dict[int, tuple[Node, int]] = {}  # holds the node: its id stays its own

    def choose(self, options: list[Choice]) -> str:
        """One of the wordings whose extra clauses the slack allows, written out."""
        cheapest = min(cost for cost, _ in options)
        allowed = [(cost, build) for cost, build in options if cost - cheapest <= self.slack]
        cost, build = (
            allowed[0] if len(allowed) == 1 else allowed[self.pick.randrange(len(allowed))]
        )
        self.slack -= cost - cheapest
        return build()

    # -- costs: relative clauses of the cheapest wording ------------------------------------------

    def value_need(self, node: Node) -> int:
        """Relative clauses the cheapest wording of a value takes."""
        return 0 if _simple(node) else self.np_need(node)

    def vp_need(self, c: dict[str, Any]) -> int:
        """Relative clauses of the cheapest verb phrase of one clause."""
        return _clauses_in(_template(c)) + self.value_need(c["value"])

    def list_need(self, clauses: list[dict[str, Any]]) -> int:
        """Relative clauses of a list of phrases about one subject (NEVER if two must open one:
        an "and" after a clause would read as part of it)."""
        needs = [sorted(self.vp_need(c) for c in g) for g in _groups(clauses)]
        if sum(n > 0 for g in needs for n in g) > 1:
            return NEVER
        return sum(sum(g) for g in needs)

    def np_need(self, node: Node) -> int:
        """Relative clauses of the cheapest description of a query node."""
        key = id(node)
        if key not in self._need:
            self._need[key] = (node, min(cost for cost, _ in self.np_options(node)))
        return self._need[key][1]

    # -- wordings ---------------------------------------------------------------------------------

    def value(self, node: Node, rel: str) -> str:
        """How a value node reads in a relation's phrase."""
        if node["kind"] == "pronoun":
            return node["text"]
        if node["kind"] == "query":
            return self.choose(self.np_options(node))
        return value_text(node, rel, self.refs)

    def verb_phrase(self, c: dict[str, Any]) -> str:
        """The finite verb phrase of one clause about `?x` ("was founded in 1934")."""
        template = _template(c)
        text = self.value(c["value"], c["rel"])
        if c["dir"] == "out":
            return (
                template.format(aO=with_article(text))
                if "{aO}" in template
                else template.format(O=text)
            )
        return template.format(S=text)

    def group_phrase(self, group: list[dict[str, Any]]) -> str:
        """Phrases sharing a verb as one: "was founded in 1934 by X", "is in X and the capital of Y"."""
        group = sorted(group, key=lambda c: self.vp_need(c))
        verb = _verb(group[0])
        text = self.verb_phrase(group[0])
        for c in group[1:]:
            rest = self.verb_phrase(c).split(" ", len(verb))[-1]
            # an auxiliary and its participle take a second preposition directly
            text += (
                f" {rest}" if len(verb) > 1 and rest.startswith(_PREPOSITIONS) else f" and {rest}"
            )
        return text

    def phrase_list(self, clauses: list[dict[str, Any]]) -> str:
        """'A', 'A and B', 'A, B and C': one phrase per verb, the one opening a clause last."""
        groups = sorted(_groups(clauses), key=lambda g: sum(self.vp_need(c) for c in g))
        phrases = [self.group_phrase(g) for g in groups]
        if len(phrases) == 1:
            return phrases[0]
        return ", ".join(phrases[:-1]) + " and " + phrases[-1]

    def np_options(self, node: Node) -> list[Choice]:
        """The wordings of a description, each with its cost in relative clauses."""
        rest = _clauses(node)
        head = head_noun(node)
        if not rest:
            return [(0, lambda: with_article(head))]
        who = "who" if node["type"] == "person" else "that"
        if len(rest) > 1:
            need = self.list_need(rest)
            return [
                (
                    min(NEVER, 1 + need),
                    lambda: f"{with_article(head)} {who} {self.phrase_list(rest)}",
                )
            ]
        c = rest[0]
        rel = RELATIONS[c["rel"]]
        inner = c["value"]
        options: list[Choice] = [
            (1 + self.vp_need(c), lambda: f"{with_article(head)} {who} {self.verb_phrase(c)}")
        ]
        labelled = len(rest) < len(node["where"])
        if c["dir"] == "in" and rel.in_noun and not labelled:
            # a slot in the middle takes a name only: "the university where X studied"
            in_noun = rel.in_noun
            if in_noun.endswith("{S}") or _simple(inner):
                cost = _clauses_in(in_noun) + self.value_need(inner)
                options.append((cost, lambda: in_noun.format(S=self.value(inner, c["rel"]))))
            if (
                inner["kind"] == "entity"
                and rel.in_noun.startswith("the ")
                and rel.in_noun.endswith(" of {S}")
            ):
                noun = rel.in_noun[len("the ") : -len(" of {S}")]
                name = value_text(inner, c["rel"], self.refs)
                owner = f"{name}'" + ("" if name.endswith("s") else "s")
                options.append((0, lambda: f"{owner} {noun}"))
        out_pp = rel.out_pp
        if c["dir"] == "out" and out_pp and (out_pp.endswith("{O}") or _simple(inner)):
            cost = _clauses_in(out_pp) + self.value_need(inner)
            options.append(
                (
                    cost,
                    lambda: f"{with_article(head)} {out_pp.format(O=self.value(inner, c['rel']))}",
                )
            )
        return options

    # -- frames -----------------------------------------------------------------------------------

    def sentence(self, need: int, write: Callable[[], str]) -> str:
        """One sentence, written with the slack its cheapest wording leaves."""
        self.slack = max(0, self.max_clauses - need)  # none left: the cheapest wordings
        return write()

    def frames(self, root: Node) -> dict[str, list[int]]:
        """Each frame that fits the form, with the relative clauses each of its sentences
        needs at least (one entry per sentence)."""
        rest = _clauses(root)
        base = self.list_need(rest)
        out: dict[str, list[int]] = {"which": [base], "what_name": [1 + base]}
        if root["type"] == "person":
            out["who"] = [self.list_need(_labels(root) + rest)]
        i = _apposable(rest)
        if i is not None:
            others = self.list_need([c for j, c in enumerate(rest) if j != i])
            pp = RELATIONS[rest[i]["rel"]].out_pp or ""
            out["apposition"] = [_clauses_in(pp) + others]
            if not _clauses_in(pp) and not pp.startswith("{"):  # no sentence opens on "20 ..."
                out["fronted"] = [others]
        path = lead_in_path(root)
        if path is not None:
            node = get(root, path)
            pointed = replace(root, path, {"kind": "pronoun", "text": "this"})
            out["lead_in"] = [self.list_need(_clauses(node)), self.list_need(_clauses(pointed))]
        groups = _groups(rest)
        if len(groups) > 1:
            needs = [self.list_need(g) for g in groups]
            plain = [n for n in needs if n == 0]
            out["statements"] = ([0] if plain else []) + [n for n in needs if n > 0] + [0]
        return {k: v for k, v in out.items() if max(v) <= self.max_clauses}

    def frame(self, root: Node, construction: str) -> str:
        """The interrogative sentence of `root` in one single-sentence frame."""
        rest = _clauses(root)
        head = head_noun(root)
        base = self.list_need(rest)
        if construction == "who":
            said = _labels(root) + rest  # "was an architect" is said, not folded into a noun
            return self.sentence(self.list_need(said), lambda: f"Who {self.phrase_list(said)}?")
        if construction == "what_name":
            who_that = "who" if root["type"] == "person" else "that"
            return self.sentence(
                1 + base,
                lambda: f"What is the name of the {head} {who_that} {self.phrase_list(rest)}?",
            )
        if construction in ("apposition", "fronted"):
            i = _apposable(rest)
            if i is not None:
                c = rest[i]
                others = [x for j, x in enumerate(rest) if j != i]
                apposed = RELATIONS[c["rel"]].out_pp
                assert apposed is not None  # _apposable chose a clause with a participle
                pp = apposed.format(O=self.value(c["value"], c["rel"]))
                need = _clauses_in(pp) + self.list_need(others)
                if construction == "apposition":
                    return self.sentence(
                        need, lambda: f"Which {head}, {pp}, {self.phrase_list(others)}?"
                    )
                asks = ("which", "who") if root["type"] == "person" else ("which", "what")
                ask = self.pick.choice(asks)
                asked = "who" if ask == "who" else f"{ask} {head}"
                return self.sentence(
                    need, lambda: f"{pp[:1].upper()}{pp[1:]}, {asked} {self.phrase_list(others)}?"
                )
        ask = self.pick.choice(("Which", "What"))
        return self.sentence(base, lambda: f"{ask} {head} {self.phrase_list(rest)}?")

    def lead_in(self, root: Node, path: tuple[Any, ...], ask: str) -> str:
        """The node at `path` stated first as a sentence of its own, then pointed back at."""
        node = get(root, path)
        rest = _clauses(node)
        subject = with_article(head_noun(node))
        first = self.sentence(
            self.list_need(rest),
            lambda: f"{subject[:1].upper()}{subject[1:]} {self.phrase_list(rest)}.",
        )
        noun = head_noun(node).split()[-1]
        pointed = replace(root, path, {"kind": "pronoun", "text": f"this {noun}"})
        return f"{first} {self.frame(pointed, ask)}"

    def statements(self, root: Node) -> str:
        """The facts one sentence at a time (those without a clause together), then the ask."""
        head = head_noun(root)
        groups = _groups(_clauses(root))
        plain = [g for g in groups if all(self.vp_need(c) == 0 for c in g)]
        nested = [g for g in groups if g not in plain]
        person = root["type"] == "person"
        it = f"This {head}" if person else "It"
        subject = with_article(head)
        lead = [c for g in plain for c in g] if plain else nested.pop(0)
        said = [
            self.sentence(
                self.list_need(lead),
                lambda: f"{subject[:1].upper()}{subject[1:]} {self.phrase_list(lead)}.",
            )
        ]
        for g in nested:

            def write(g: list[dict[str, Any]] = g) -> str:
                return f"{it} {self.group_phrase(g)}."

            said.append(self.sentence(self.list_need(g), write))
        said.append(f"Who is this {head}?" if person else f"Which {head} is it?")
        return " ".join(said)


def _labels(node: Node) -> list[dict[str, Any]]:
    return [c for c in node["where"] if _is_label(c)]


def _apposable(clauses: list[dict[str, Any]]) -> int | None:
    """The clause an apposition can hold: a plain value with a participle, not the only one,
    and not sharing its verb with another ("formed in 1960" beside "was formed in X" would
    say the verb twice)."""
    if len(clauses) < 2:
        return None
    verbs = [_verb(c) for c in clauses]
    for i, c in enumerate(clauses):
        if verbs.count(verbs[i]) > 1:
            continue
        if c["dir"] == "out" and RELATIONS[c["rel"]].out_pp and _simple(c["value"]):
            return i
    return None


def lead_in_path(root: Node) -> tuple[Any, ...] | None:
    """Where a lead-in cuts the chain: halfway down its deepest branch (None if too shallow,
    or if the part cut off is of the asked type: "the city where this city ..." misleads)."""
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
    part = get(root, cut)
    if not _clauses(part) or part["type"] == root["type"]:
        return None
    return cut


def constructions_for(root: Node, refs: dict[str, str] | None = None) -> list[str]:
    """The frames that fit a form within the clause limit, a frame listed twice drawn twice as
    often (a person is asked "who"; an apposition needs two clauses; a lead-in a chain)."""
    fits = Realizer(refs or {}, random.Random(0)).frames(root)
    out = [c for c in CONSTRUCTIONS if c in fits]
    if "who" in fits:
        out.append("who")  # how people are most often asked about
    return out


def realize(root: Node, refs: dict[str, str] | None = None, style: int = 0) -> tuple[str, str]:
    """`(question, construction)`: the form in the frame and wording `style` selects.

    When no frame fits within the clause limit, the statements frame (or the plain one) is
    written anyway; the quality check then refuses the question as hard to read.
    """
    pick = random.Random(style)
    r = Realizer(refs or {}, pick)
    fits = r.frames(root)
    options = [c for c in CONSTRUCTIONS if c in fits] + (["who"] if "who" in fits else [])
    if not options:
        options = ["statements"] if len(_groups(_clauses(root))) > 1 else ["which"]
    construction = options[pick.randrange(len(options))]
    if construction == "lead_in":
        path = lead_in_path(root)
        assert path is not None
        pointed = replace(root, path, {"kind": "pronoun", "text": "this"})
        after = r.frames(pointed)
        asks = [c for c in ("which", "what_name", "who") if c in after] or ["which"]
        return r.lead_in(root, path, asks[pick.randrange(len(asks))]), construction
    if construction == "statements":
        return r.statements(root), construction
    return r.frame(root, construction), construction
