"""Logical forms: the constraints a question states about its answer, evaluated over facts.

A logical form is plain JSON, so it travels in records unchanged:

    {"kind": "query", "type": "company", "where": [
        {"rel": "founded", "dir": "out", "value": {"kind": "range", "lo": 1930, "hi": 1933,
                                                   "text": "the early 1930s"}},
        {"rel": "founded_by", "dir": "out", "value": {"kind": "query", "type": "person", "where": [
            {"rel": "founded_by", "dir": "in", "value": {"kind": "entity", "id": "e7",
                                                         "name": "Kelvar Institute"}}]}}]}

reads "Which company was founded in the early 1930s by the founder of the Kelvar Institute?".
`dir: "out"` constrains `(?x, rel, value)`, `dir: "in"` constrains `(value, rel, ?x)`. A nested
query is existential: some entity matching it stands in the relation.
"""

from __future__ import annotations

import bisect
import functools
import re
from collections import defaultdict
from collections.abc import Iterable, Iterator
from typing import Any

from gemkit.synth.world.schema import (
    LABEL,
    NUMBER,
    RELATIONS,
    TYPES,
    format_number,
    with_article,
)

Node = dict[str, Any]
Path = tuple[Any, ...]


# -- constructors -------------------------------------------------------------------------------


def entity_node(entity_id: str, name: str, type_: str) -> Node:
    """A named entity."""
    return {"kind": "entity", "id": entity_id, "name": name, "type": type_}


def literal_node(value: Any) -> Node:
    """A year, a number or a label, stated exactly."""
    return {"kind": "literal", "value": value}


def range_node(lo: int | None, hi: int | None, text: str) -> Node:
    """A blurred year or number: any value in [lo, hi] (None = unbounded), read as `text`."""
    return {"kind": "range", "lo": lo, "hi": hi, "text": text}


def query_node(type_: str, where: list[dict[str, Any]]) -> Node:
    """An entity described by constraints."""
    return {"kind": "query", "type": type_, "where": where}


def constraint(rel: str, direction: str, value: Node) -> dict[str, Any]:
    """`(?x, rel, value)` for direction "out", `(value, rel, ?x)` for "in"."""
    return {"rel": rel, "dir": direction, "value": value}


# -- paths --------------------------------------------------------------------------------------


def walk(node: Node, path: Path = ()) -> Iterator[tuple[Path, Node, dict[str, Any] | None]]:
    """Every node with its path and the constraint that holds it (None for the root)."""
    yield path, node, None
    yield from _walk_children(node, path)


def _walk_children(node: Node, path: Path) -> Iterator[tuple[Path, Node, dict[str, Any] | None]]:
    if node["kind"] != "query":
        return
    for i, c in enumerate(node["where"]):
        p = (*path, i)
        yield p, c["value"], c
        yield from _walk_children(c["value"], p)


def get(node: Node, path: Path) -> Node:
    """The node at `path`."""
    for i in path:
        node = node["where"][i]["value"]
    return node


def replace(root: Node, path: Path, new: Node) -> Node:
    """`root` with the node at `path` replaced by `new`.

    Only the nodes along the path are copied; the rest is shared, so forms must be treated as
    immutable values (every edit goes through `replace`).
    """
    if not path:
        return new
    i = path[0]
    where = list(root["where"])
    where[i] = {**where[i], "value": replace(where[i]["value"], path[1:], new)}
    return {**root, "where": where}


def clause_paths(node: Node) -> list[Path]:
    """The path of every constraint of the form, at any depth (`walk` order)."""
    return [p for p, _, holder in walk(node) if holder is not None]


def drop_clause(root: Node, path: Path) -> Node:
    """`root` without the constraint at `path` (its value, and all below it, goes with it)."""
    parent = get(root, path[:-1])
    where = [c for i, c in enumerate(parent["where"]) if i != path[-1]]
    return replace(root, path[:-1], {**parent, "where": where})


def entity_ids(node: Node) -> set[str]:
    """Ids of every entity named anywhere in the form."""
    return {n["id"] for _, n, _ in walk(node) if n["kind"] == "entity"}


def depth(node: Node) -> int:
    """Nesting depth: 1 for a query over plain values."""
    if node["kind"] != "query":
        return 0
    return 1 + max((depth(c["value"]) for c in node["where"]), default=0)


def truncate(node: Node, hops: int) -> Node:
    """The strongest sub-question of at most `hops` hops: every clause nested deeper is dropped.

    Every other sub-question of that many hops keeps a subset of its clauses, and dropping a
    clause can only let more entities fit, so if this one does not pin the answer down, none
    with as few hops does (`check_shortcut` needs one evaluation, not one per subset).
    """
    if node["kind"] != "query":
        return node
    where = []
    for c in node["where"]:
        v = c["value"]
        if v["kind"] != "query":
            where.append(c)
        elif hops > 1:
            where.append({**c, "value": truncate(v, hops - 1)})
    return {**node, "where": where}


# -- evaluation ---------------------------------------------------------------------------------


#: candidates a clause is checked on one at a time, rather than by evaluating it whole
FEW = 64
#: the order a query's clauses are evaluated in: lookups first, ranges (cached sets), then
#: nested descriptions, which the candidates left are checked against one by one
_ORDER = {"entity": 0, "literal": 1, "range": 2, "query": 3}


class FactIndex:
    """Triples indexed for evaluation: by (relation, object) and by (subject, relation)."""

    def __init__(self, triples: Iterable[tuple[str, str, Any]], types: dict[str, str]):
        self.types = types
        self.by_type: dict[str, set[str]] = defaultdict(set)
        for e, t in types.items():
            self.by_type[t].add(e)
        self.subjects: dict[tuple[str, Any], set[str]] = defaultdict(set)
        self.objects: dict[tuple[str, str], set[Any]] = defaultdict(set)
        self.pairs: dict[str, list[tuple[str, Any]]] = defaultdict(list)
        self._linked_cache: dict[tuple[str, str, str], set[str]] = {}
        self._fits: dict[tuple[str, int], tuple[Node, bool]] = {}
        self._sorted: dict[str, tuple[list[Any], list[str]]] = {}
        self._range_cache: dict[tuple[str, Any, Any], set[str]] = {}
        for s, r, o in triples:
            self.subjects[(r, o)].add(s)
            self.objects[(s, r)].add(o)
            self.pairs[r].append((s, o))

    @classmethod
    def of_world(cls, world: Any) -> FactIndex:
        """The index of every fact of a world (cached on the world)."""

        def build(world: Any) -> FactIndex:
            types = {e.id: e.type for e in world.entities.values()}
            return cls(((f.subject, f.relation, f.object) for f in world.facts), types)

        index: FactIndex = world.derived("fact_index", build)
        return index

    def evaluate(self, node: Node) -> set[str]:
        """The entities that satisfy a query node (or the one an entity node names)."""
        kind = node["kind"]
        if kind == "entity":
            return {node["id"]}
        if kind != "query":
            raise ValueError(f"cannot evaluate a {kind} node as a set of entities")
        if len(self._fits) > 100_000:  # checks of earlier forms: bounded memory
            self._fits.clear()
        found: set[str] | None = None
        # Named entities and exact values first: they are direct lookups, and they usually
        # leave few candidates, which the other clauses then check one by one (top-down)
        # rather than by evaluating a whole nested description.
        for c in sorted(node["where"], key=lambda c: _ORDER[c["value"]["kind"]]):
            if found is not None and len(found) <= FEW and c["value"]["kind"] in ("query", "range"):
                found = {e for e in found if self._holds(e, c)}
            else:
                found = self._match(c) if found is None else found & self._match(c, found)
            if not found:
                return set()
        pool = self.by_type.get(node["type"], set())
        return set(pool) if found is None else found & pool

    def fits(self, entity: str, node: Node) -> bool:
        """Whether one entity satisfies a node (checked top-down, through its own facts)."""
        if node["kind"] == "entity":
            same: bool = entity == node["id"]
            return same
        if self.types.get(entity) != node["type"]:
            return False
        key = (entity, id(node))
        memo = self._fits
        if key not in memo or memo[key][0] is not node:  # the node held: its id is its own
            memo[key] = (node, all(self._holds(entity, c) for c in node["where"]))
        return memo[key][1]

    def _holds(self, entity: str, c: dict[str, Any]) -> bool:
        """Whether one entity satisfies one constraint."""
        rel, v = c["rel"], c["value"]
        kind = v["kind"]
        if c["dir"] == "in" and kind in ("entity", "query"):
            subjects = self.subjects.get((rel, entity), ())
            if kind == "entity":
                return v["id"] in subjects
            return any(self.fits(s, v) for s in subjects)
        objects = self.objects.get((entity, rel), ())
        if kind == "literal":
            return v["value"] in objects
        if kind == "range":
            lo, hi = v["lo"], v["hi"]
            return any((lo is None or o >= lo) and (hi is None or o <= hi) for o in objects)
        if kind == "entity":
            return v["id"] in objects
        return any(self.fits(o, v) for o in objects)

    def _in_range(self, rel: str, lo: Any, hi: Any) -> set[str]:
        """Subjects whose `rel` value is in [lo, hi] (None: open), by bisecting the values
        sorted once per relation; the last ranges asked are kept (an item asks the same
        ones edit after edit)."""
        key = (rel, lo, hi)
        cache = self._range_cache
        if key not in cache:
            if rel not in self._sorted:
                pairs = sorted((o, s) for s, o in self.pairs.get(rel, ()))
                self._sorted[rel] = ([o for o, _ in pairs], [s for _, s in pairs])
            values, subjects = self._sorted[rel]
            start = 0 if lo is None else bisect.bisect_left(values, lo)
            end = len(values) if hi is None else bisect.bisect_right(values, hi)
            if len(cache) > 4096:
                cache.clear()
            cache[key] = set(subjects[start:end])
        return cache[key]

    def _linked(self, rel: str, direction: str, type_: str) -> set[str]:
        """Entities with some `rel` link to an entity of `type_` (a truncated sub-question's
        "founded by someone"), built once per relation: expanding every person would cost a
        lookup per person each time."""
        key = (rel, direction, type_)
        cache = self._linked_cache
        if key not in cache:
            if direction == "out":
                cache[key] = {s for s, o in self.pairs.get(rel, ()) if self.types.get(o) == type_}
            else:
                cache[key] = {o for s, o in self.pairs.get(rel, ()) if self.types.get(s) == type_}
        return cache[key]

    def _match(self, c: dict[str, Any], within: set[str] | None = None) -> set[str]:
        rel, v = c["rel"], c["value"]
        kind = v["kind"]
        if kind == "literal":
            return self.subjects.get((rel, v["value"]), set())
        if kind == "range":
            lo, hi = v["lo"], v["hi"]
            if within is not None and len(within) <= FEW:
                return {
                    s
                    for s in within
                    for o in self.objects.get((s, rel), ())
                    if (lo is None or o >= lo) and (hi is None or o <= hi)
                }
            return self._in_range(rel, lo, hi)
        if kind == "query" and not v["where"]:
            return self._linked(rel, c["dir"], v["type"])
        values = self.evaluate(v)
        out: set[str] = set()
        if c["dir"] == "out":
            for o in values:
                out |= self.subjects.get((rel, o), set())
        else:
            for s in values:
                out |= self.objects.get((s, rel), set())
        return out


def holds(node: Node, value: Any) -> bool:
    """Whether a plain value (year, number, label) satisfies a literal or range node."""
    if node["kind"] == "literal":
        equal: bool = node["value"] == value
        return equal
    if node["kind"] == "range":
        return (node["lo"] is None or value >= node["lo"]) and (
            node["hi"] is None or value <= node["hi"]
        )
    return False


# -- English ------------------------------------------------------------------------------------


def value_text(node: Node, rel: str, refs: dict[str, str]) -> str:
    """How a value node reads inside a relation's phrase."""
    kind = node["kind"]
    if kind == "entity":
        name: str = node["name"]
        return refs.get(node["id"], name)
    if kind == "literal":
        obj = RELATIONS[rel].obj
        if obj == NUMBER:
            return format_number(int(node["value"]))
        return str(node["value"])
    if kind == "range":
        text: str = node["text"]
        return text
    return noun_phrase(node, refs)


def _is_label(c: dict[str, Any]) -> bool:
    return RELATIONS[c["rel"]].obj == LABEL and c["value"]["kind"] == "literal"


def _plain_first(constraints: list[dict[str, Any]]) -> list[dict[str, Any]]:
    # Phrases with a nested description go last: anything after one would read as part of it
    # ("born in the birthplace of a person who studied at X, worked for Y" -- who worked?).
    return sorted(constraints, key=lambda c: depth(c["value"]))


def head_noun(node: Node) -> str:
    """The noun of a query with its label constraints folded in ("shipping company", "architect")."""
    noun = TYPES[node["type"]].noun
    adjs = []
    for c in node["where"]:
        if _is_label(c):
            if RELATIONS[c["rel"]].label_mode == "noun":
                noun = c["value"]["value"]
            else:
                adjs.append(c["value"]["value"])
    return " ".join([*adjs, noun])


def verb_phrase(c: dict[str, Any], refs: dict[str, str]) -> str:
    """The finite verb phrase stating one constraint about `?x` ("was founded in 1934")."""
    rel = RELATIONS[c["rel"]]
    text = value_text(c["value"], c["rel"], refs)
    if c["dir"] == "out":
        if "{aO}" in rel.out_vp:
            return rel.out_vp.format(aO=with_article(text))
        return rel.out_vp.format(O=text)
    return (rel.in_vp or f"is the object of {c['rel']} for {{S}}").format(S=text)


def join_phrases(vps: list[str]) -> str:
    """'A', 'A and B', 'A, B and C'; two phrases sharing their verb merge ("was founded in 1934 by X")."""
    merged: list[str] = []
    for vp in vps:
        if merged:
            prev = merged[-1].split(" ")
            cur = vp.split(" ")
            # only short phrases merge: a long one may end in a clause the merge would extend
            if (
                2 < len(prev) <= 4
                and len(cur) > 2
                and prev[:2] == cur[:2]
                and cur[2] in ("in", "by", "at")
            ):
                merged[-1] = f"{merged[-1]} {' '.join(cur[2:])}"
                continue
        merged.append(vp)
    if len(merged) == 1:
        return merged[0]
    return ", ".join(merged[:-1]) + " and " + merged[-1]


def noun_phrase(node: Node, refs: dict[str, str]) -> str:
    """A description of the entity a query node stands for ("the founder of the Kelvar Institute")."""
    if node["kind"] != "query":
        return value_text(node, "", refs)
    rest = _plain_first([c for c in node["where"] if not _is_label(c)])
    head = head_noun(node)
    has_label = len(rest) < len(node["where"])
    if not rest:
        return with_article(head)
    if len(rest) == 1:
        c = rest[0]
        rel = RELATIONS[c["rel"]]
        text = value_text(c["value"], c["rel"], refs)
        if c["dir"] == "in" and rel.in_noun and not has_label:
            return rel.in_noun.format(S=text)
        if c["dir"] == "out" and rel.out_pp:
            return f"{with_article(head)} {rel.out_pp.format(O=text)}"
    who = "who" if node["type"] == "person" else "that"
    return f"{with_article(head)} {who} {join_phrases([verb_phrase(c, refs) for c in rest])}"


def question_text(root: Node, refs: dict[str, str] | None = None) -> str:
    """The question a logical form asks: 'Which <head> <phrase>, <phrase> and <phrase>?'."""
    refs = refs or {}
    rest = _plain_first([c for c in root["where"] if not _is_label(c)])
    phrases = [verb_phrase(c, refs) for c in rest] or ["is described here"]
    return f"Which {head_noun(root)} {join_phrases(phrases)}?"


def node_text(node: Node, rel: str, refs: dict[str, str]) -> str:
    """How a node at any place of the form reads (the `before`/`after` of an edit)."""
    return value_text(node, rel, refs) if node["kind"] != "query" else noun_phrase(node, refs)


_WORD = re.compile(r"[\w'-]+")


@functools.lru_cache(maxsize=65536)
def _phrase_re(phrase: str) -> re.Pattern[str]:
    return re.compile(r"(?<![\w])" + re.escape(phrase.lower()) + r"(?![\w])")


def mentions(text: str, phrase: str) -> bool:
    """Whether `phrase` occurs in `text` as whole words, ignoring case."""
    if not phrase.strip():
        return False
    low = text.lower()
    return phrase.lower() in low and _phrase_re(phrase).search(low) is not None
