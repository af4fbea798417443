"""The two edits: *inject* (replace an entity by a fact about it, found with the search tool)
and *fuzz* (blur a year, a number, a place or a name). Each proposes candidates; the agent
picks one and verification accepts or rejects it."""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any

import numpy as np

from gemkit.synth.qa.logic import (
    FactIndex,
    Node,
    Path,
    constraint,
    entity_ids,
    entity_node,
    get,
    literal_node,
    mentions,
    query_node,
    range_node,
    walk,
)
from gemkit.synth.world.schema import LABEL, NUMBER, RELATIONS, YEAR, format_number
from gemkit.synth.world.world import Fact, World, split_sentences

#: how an entity of each type is blurred: the relation whose value replaces its name (a person
#: is not: "an engineer" fits hundreds and leaves a question no searcher can start from)
FUZZ_RELATION: dict[str, str] = {
    "city": "located_in",
    "mountain": "located_in",
    "river": "flows_through",
    "university": "university_city",
    "railway": "railway_kind",
    "company": "industry",
    "book": "book_genre",
    "film": "film_genre",
    "band": "band_genre",
    "event": "event_kind",
    "award": "award_field",
}


@dataclass
class Candidate:
    """A proposed edit: the node at `path` becomes `new`; `fact` is the fact it rests on."""

    op: str
    path: Path
    new: Node
    fact: Fact | None = None
    mention: tuple[str, str] | None = None  # (doc_id, sentence) the fact was read from
    score: float = 0.0
    description: str = ""  # what it does, in words (shown to an LLM agent)


# -- fuzz: years and numbers --------------------------------------------------------------------


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def fuzz_year(node: Node) -> Node | None:
    """Blur a year one step: 1934 -> the mid-1930s -> the 1930s -> the first half of the 20th century."""
    if node["kind"] == "literal":
        v = int(node["value"])
        d = v // 10 * 10
        part, lo, hi = (
            ("early", 0, 3) if v % 10 <= 3 else ("mid-", 4, 6) if v % 10 <= 6 else ("late", 7, 9)
        )
        text = f"the mid-{d}s" if part == "mid-" else f"the {part} {d}s"
        return range_node(d + lo, d + hi, text)
    if node["kind"] != "range" or node["lo"] is None or node["hi"] is None:
        return None
    lo, hi = node["lo"], node["hi"]
    if hi - lo < 9:
        d = lo // 10 * 10
        return range_node(d, d + 9, f"the {d}s")
    if hi - lo == 9:
        c = lo // 100 * 100
        first = lo % 100 < 50
        half_lo = c if first else c + 50
        century = _ordinal(c // 100 + 1)
        return range_node(
            half_lo,
            half_lo + 49,
            f"the {'first' if first else 'second'} half of the {century} century",
        )
    return None


def _round_down(v: int) -> int:
    """The largest 'round' number (one significant digit) strictly below v."""
    mag = 10 ** max(0, len(str(max(v, 1))) - 1)
    r = v // mag * mag
    if r >= v:
        r -= mag
    if r <= 0 and mag > 1:
        r = mag // 10 * 9 if v > mag // 10 * 9 else 0
    return max(r, 0)


def _round_up(v: int) -> int:
    """The smallest 'round' number (one significant digit) strictly above v."""
    mag = 10 ** max(0, len(str(max(v, 1))) - 1)
    r = (v // mag + 1) * mag
    return r


def _round_two(v: int) -> tuple[int, int]:
    """The nearest numbers of two significant digits below and above v (43,817 -> 43,000 and
    44,000), strictly."""
    mag = 10 ** max(0, len(str(max(v, 1))) - 2)
    lo = v // mag * mag
    if lo >= v:
        lo -= mag
    return lo, (v // mag + 1) * mag


def fuzz_number(
    node: Node, unit: str, rng: np.random.Generator, mode: int | None = None
) -> Node | None:
    """Blur a number: 43,817 -> 'more than 40,000' / 'fewer than 50,000' / 'between 40,000 and
    50,000' / 'between 43,000 and 44,000' (`mode` 0, 1, 2, 3; one of the first three drawn
    from `rng` when None). Mode 3, the tightest, needs three digits or more."""
    few = "fewer" if unit else "less"
    if node["kind"] == "literal":
        v = int(node["value"])
        lo, hi = _round_down(v), _round_up(v)
        mode = int(rng.integers(3)) if mode is None else mode
        if mode == 3:
            if v < 100:
                return None
            lo, hi = _round_two(v)
        if mode == 0 and lo > 0:
            return range_node(lo + 1, None, f"more than {format_number(lo)}")
        if mode == 1:
            return range_node(None, hi - 1, f"{few} than {format_number(hi)}")
        return range_node(lo, hi, f"between {format_number(lo)} and {format_number(hi)}")
    if node["kind"] != "range":
        return None
    lo, hi = node["lo"], node["hi"]
    if hi is None and lo is not None:
        new = _round_down(max(1, (lo - 1) // 2))
        return range_node(new + 1, None, f"more than {format_number(new)}") if new > 0 else None
    if lo is None and hi is not None:
        new = _round_up((hi + 1) * 2)
        return range_node(None, new - 1, f"{few} than {format_number(new)}")
    if lo is not None and hi is not None:
        nlo, nhi = _round_down(max(1, lo)), _round_up(hi)
        return range_node(nlo, nhi, f"between {format_number(nlo)} and {format_number(nhi)}")
    return None


# -- candidates ---------------------------------------------------------------------------------


def value_node(world: World, relation: str, value: Any) -> Node:
    """The node for a fact's object (or subject): an entity, or a literal year/number/label."""
    if (
        isinstance(value, str)
        and value in world.entities
        and RELATIONS[relation].obj not in (LABEL,)
    ):
        e = world.entities[value]
        return entity_node(e.id, e.name, e.type)
    return literal_node(value)


def fuzz_candidates(
    lf: Node, world: World, rng: np.random.Generator, seen: AbstractSet[str] = frozenset()
) -> list[Candidate]:
    """Every way to blur one detail of the form: a year, a number, a place or a name.

    A place is never blurred into an entity the question has named before (`seen`): "a city in
    X" where X was already described would make the question describe X by itself.
    """
    out: list[Candidate] = []
    for path, node, holder in walk(lf):
        if holder is None:
            continue
        obj = RELATIONS[holder["rel"]].obj if holder["dir"] == "out" else None
        if obj == YEAR and node["kind"] in ("literal", "range"):
            new = fuzz_year(node)
            if new is not None:
                out.append(
                    Candidate("fuzz", path, new, description=f"blur the year to {new['text']!r}")
                )
        elif obj == NUMBER and node["kind"] in ("literal", "range"):
            # an exact number can be blurred several ways; the tighter ones may keep the
            # answer unique where the others do not
            modes = [int(rng.integers(3)), 2, 3] if node["kind"] == "literal" else [None]
            for mode in dict.fromkeys(modes):
                new = fuzz_number(node, RELATIONS[holder["rel"]].unit, rng, mode)
                if new is not None:
                    out.append(
                        Candidate(
                            "fuzz", path, new, description=f"blur the number to {new['text']!r}"
                        )
                    )
        elif node["kind"] == "entity":
            rel = FUZZ_RELATION.get(node["type"])
            if rel is None:
                continue
            facts = [
                world.facts[i]
                for i in world.by_subject.get(node["id"], ())
                if world.facts[i].relation == rel
            ]
            if not facts:
                continue
            f = facts[int(rng.integers(len(facts)))]
            if isinstance(f.object, str) and f.object in seen:
                continue
            new = query_node(
                node["type"], [constraint(rel, "out", value_node(world, rel, f.object))]
            )
            out.append(
                Candidate(
                    "fuzz",
                    path,
                    new,
                    fact=f,
                    mention=f.mentions[0],
                    description=f"replace {node['name']!r} by what kind of {node['type']} it is",
                )
            )
    return out


def facts_from_docs(
    docs: list[dict[str, Any]], entity_id: str, names: list[str], world: World
) -> list[tuple[Fact, tuple[str, str]]]:
    """The world facts about an entity stated in retrieved docs, each with the sentence found."""
    found: list[tuple[Fact, tuple[str, str]]] = []
    seen: set[int] = set()
    for d in docs:
        doc_id = str(d.get("id"))
        for sentence in split_sentences(d.get("text") or ""):
            if not any(mentions(sentence, n) for n in names):
                continue
            for f in world.facts_in(doc_id, sentence):
                if f.index in seen or entity_id not in (f.subject, f.object):
                    continue
                seen.add(f.index)
                found.append((f, (doc_id, sentence)))
    return found


def inject_candidates(
    lf: Node,
    path: Path,
    docs: list[dict[str, Any]],
    world: World,
    index: FactIndex,
    answer_id: str,
    want_entity: bool,
    seen: AbstractSet[str] = frozenset(),
    used_facts: AbstractSet[int] = frozenset(),
    max_fits: int = 8,
) -> list[Candidate]:
    """Descriptions of the entity at `path` built from facts the search returned.

    Facts about labels are left to fuzz; facts already used, and facts that would name the
    answer or an entity the question has named before (`seen`), are skipped, so descriptions
    never loop back. A description fitting more than `max_fits` entities is too vague to
    search for. Candidates are ranked by how few entities the description fits (1 is a
    definite description), then by whether it names a new entity to inject next.
    """
    node = get(lf, path)
    eid = node["id"]
    entity = world.entities[eid]
    taken = entity_ids(lf) | {answer_id} | set(seen)
    out: list[Candidate] = []
    for f, mention in facts_from_docs(docs, eid, entity.aliases, world):
        rel = RELATIONS[f.relation]
        if rel.obj == LABEL or f.index in used_facts:
            continue
        if f.subject == eid:
            direction, other = "out", f.object
        else:
            direction, other = "in", f.subject
        if direction == "in" and not rel.in_vp:
            continue
        if isinstance(other, str) and other in taken:
            continue
        new = query_node(
            entity.type, [constraint(f.relation, direction, value_node(world, f.relation, other))]
        )
        fits = len(index.evaluate(new))
        if fits > max_fits:
            continue
        # While more injections are due, a description must name a new entity to continue
        # from; a literal-only one ("a person born in 1907") leaves a searcher no anchor.
        score = fits + (100 if want_entity and not rel.is_entity else 0)
        out.append(
            Candidate(
                "inject",
                path,
                new,
                fact=f,
                mention=mention,
                score=score,
                description=f"replace {node['name']!r} using: {mention[1]}",
            )
        )
    out.sort(key=lambda c: c.score)
    return out
