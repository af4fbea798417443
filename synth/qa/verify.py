"""The verification stages; each returns its verdict with the figures behind it."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from gemkit.synth.qa.logic import (
    FactIndex,
    Node,
    Path,
    clause_paths,
    depth,
    drop_clause,
    entity_ids,
    get,
    mentions,
    query_node,
    truncate,
    walk,
)
from gemkit.synth.qa.readability import readability_problems
from gemkit.synth.qa.wording import (
    asked_type,
    form_leaves,
    is_label,
    named_entities,
    states_relation,
    states_value,
    type_matches,
)
from gemkit.synth.world.world import World

#: a question longer than this many characters fails the quality stage
MAX_CHARS = 600
#: entities the strongest sub-question of fewer hops must leave: with two or three left, a
#: policy that skips the last hop still scores a third to a half of the time by guessing
MIN_SUB_CANDIDATES = 4
#: how the reason of a clause that does no work begins (an edit's or a record's)
IDLE_CLAUSE = "the answer stays unique without the clause"
#: the stages a record must pass, in the order they are reported
STAGES = ("quality", "difficulty", "uniqueness", "shortcut")


def check_form(question: str, aliases: Iterable[str], max_chars: int = MAX_CHARS) -> dict[str, Any]:
    """The cheap part of quality: one question, bounded length, the answer not given away,
    easy to read (no clause inside another, no verb twice in a clause, at most
    `readability.MAX_CLAUSES` relative clauses a sentence)."""
    q = question.strip()
    leaked = [a for a in aliases if a and mentions(q, a)]
    one = q.count("?") == 1 and q.endswith("?") and "\n" not in q and len(q.split()) >= 4
    hard = readability_problems(q)
    ok = one and not leaked and len(q) <= max_chars and not hard
    if leaked:
        reason = "answer leaked: " + leaked[0]
    elif not one:
        reason = "not a single question"
    elif len(q) > max_chars:
        reason = "too long"
    else:
        reason = f"hard to read: {hard[0]}" if hard else ""
    return {
        "passed": ok,
        "answer_leaked": bool(leaked),
        "one_question": one,
        "chars": len(q),
        "words": len(q.split()),
        "hard_to_read": hard,
        "reason": reason,
    }


def check_text(
    question: str, lf: Node, support: list[dict[str, Any]], world: World, refs: dict[str, str]
) -> dict[str, Any]:
    """The question's text against its logical form: the same answer type, every entity it
    names in the form and in a supporting fact, every value and relation of the form stated.

    A rewrite that drifts from the form (a new name, a city asked for a person, a dropped
    detail) fails, so a record's text and form always say the same thing.
    """
    problems: list[str] = []
    asked = asked_type(question)
    if not type_matches(asked, lf["type"]):
        wants = "a year or a number" if asked == "value" else asked or "something it does not name"
        problems.append(f"the question asks for {wants}, the answer is a {lf['type']}")
    named = named_entities(question, world)
    in_form = entity_ids(lf)
    supported = {f.subject for f in _facts(support, world)} | {
        f.object for f in _facts(support, world) if isinstance(f.object, str)
    }
    for eid in sorted(named - in_form):
        problems.append(f"names {world.entities[eid].name}, which the logical form does not")
    for eid in sorted((named & in_form) - supported):
        problems.append(f"names {world.entities[eid].name}, found in no supporting fact")
    for holder, node in form_leaves(lf):
        if node["kind"] == "entity":
            if node["id"] not in named:
                problems.append(f"does not name {node['name']}, which the logical form does")
        elif node["kind"] in ("literal", "range") and not states_value(
            question, node, holder["rel"], refs
        ):
            problems.append(f"does not state {node.get('text') or node.get('value')!s}")
        if not is_label(holder) and not states_relation(question, holder["rel"], holder["dir"]):
            problems.append(f"does not state the relation {holder['rel']}")
    return {
        "passed": not problems,
        "asked_type": asked,
        "problems": problems[:6],
        "reason": "text and logical form disagree: " + problems[0] if problems else "",
    }


def _facts(support: list[dict[str, Any]], world: World) -> list[Any]:
    return [world.facts[s["fact"]] for s in support if s.get("fact") is not None]


def check_quality(
    question: str,
    answer_id: str,
    aliases: Iterable[str],
    lf: Node,
    support: list[dict[str, Any]],
    doc_text: Callable[[str], str | None],
    world: World | None,
    max_chars: int = MAX_CHARS,
    refs: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Stage 1: the form checks, the text states the logical form (`check_text`), every
    supporting sentence is in its doc, and the answer follows from them."""
    out = check_form(question, aliases, max_chars)
    if world is not None:
        text = check_text(question, lf, support, world, refs or {})
        out["text"] = text
        if not text["passed"]:
            out["passed"] = False
            out["reason"] = out["reason"] or text["reason"]
    ungrounded = []
    cache: dict[str, str | None] = {}
    for s in support:
        if s["doc_id"] not in cache:
            cache[s["doc_id"]] = doc_text(s["doc_id"])
        doc = cache[s["doc_id"]]
        if doc is None or s["text"] not in doc:
            ungrounded.append(s["doc_id"])
    out["grounded"] = f"{len(support) - len(ungrounded)}/{len(support)}"
    out["ungrounded"] = ungrounded
    follows = None
    if world is not None:
        triples = []
        for s in support:
            f = world.facts[s["fact"]] if s.get("fact") is not None else None
            if f is not None:
                triples.append((f.subject, f.relation, f.object))
        types = {
            e: world.entities[e].type
            for t in triples
            for e in (t[0], t[2])
            if isinstance(e, str) and e in world.entities
        }
        follows = answer_id in FactIndex(triples, types).evaluate(lf)
    out["answer_follows"] = follows
    if ungrounded and not out["reason"]:
        out["reason"] = f"supporting fact not found in doc {ungrounded[0]}"
    if follows is False and not out["reason"]:
        out["reason"] = "the supporting facts do not entail the answer"
    out["passed"] = bool(out["passed"] and not ungrounded and follows is not False)
    return out


def check_uniqueness(
    lf: Node, answer_id: str, index: FactIndex, clauses: bool = False
) -> dict[str, Any]:
    """Stage 3: evaluate the form over every fact; exactly one entity, the answer, must fit.

    With `clauses`, every clause must also do work (`droppable_clauses`, `vacuous_blurs`): a
    question that stays unique without one of its details teaches a policy to ignore it.
    """
    found = index.evaluate(lf)
    ok = found == {answer_id}
    reason = "" if ok else (f"{len(found)} entities fit" if found else "no entity fits")
    out: dict[str, Any] = {"passed": ok, "candidates": len(found), "reason": reason}
    if clauses and ok:
        droppable = [clause_text(lf, p) for p in droppable_clauses(lf, answer_id, index)]
        vacuous = [clause_text(lf, p) for p in vacuous_blurs(lf, index)]
        out["droppable"] = droppable
        out["vacuous_blurs"] = vacuous
        if droppable:
            out["passed"] = False
            out["reason"] = f"{IDLE_CLAUSE} {droppable[0]}"
        elif vacuous:
            out["passed"] = False
            out["reason"] = f"the blurred value {vacuous[0]} excludes no entity"
    return out


def droppable_clauses(
    lf: Node, answer_id: str, index: FactIndex, paths: Iterable[Path] | None = None
) -> list[Path]:
    """The clauses (all, or those at `paths`) the form can lose and still fit the answer alone.

    Every edit only widens a form (a range holds the value it blurs, a description the entity
    it replaces), so a clause that does work keeps doing it: the agent checks each new clause
    once, and the final stage checks them all.
    """
    todo = clause_paths(lf) if paths is None else list(paths)
    return [p for p in todo if index.evaluate(drop_clause(lf, p)) == {answer_id}]


def vacuous_blurs(lf: Node, index: FactIndex) -> list[Path]:
    """The blurred values (ranges) that every entity of their subject's type with that
    relation fits: "more than 30 minutes" when every film runs 72 to 210 minutes."""
    out = []
    for path, node, holder in walk(lf):
        if holder is None or node["kind"] != "range":
            continue
        subject = get(lf, path[:-1])["type"]
        having = {s for s, _ in index.pairs.get(holder["rel"], ()) if index.types.get(s) == subject}
        if having <= index.evaluate(query_node(subject, [holder])):
            out.append(path)
    return out


def clause_text(lf: Node, path: Path) -> str:
    """A clause in a few words, for reasons and figures: `founded: the 1930s`."""
    holder = get(lf, path[:-1])["where"][path[-1]]
    value = holder["value"]
    if value["kind"] == "entity":
        said = value["name"]
    elif value["kind"] == "range":
        said = value["text"]
    elif value["kind"] == "literal":
        said = str(value["value"])
    else:
        said = f"a {value['type']} described by {len(value['where'])} clause(s)"
    return f"{holder['rel']}: {said}"


def shortcut_candidates(lf: Node, index: FactIndex) -> tuple[int, int]:
    """`(hops, entities that fit the strongest sub-question of fewer hops)` of a form.

    A one-hop form has no shorter sub-question; its count is every entity of its type.
    """
    hops = depth(lf)
    if hops <= 1:
        return hops, len(index.by_type.get(lf["type"], ()))
    return hops, len(index.evaluate(truncate(lf, hops - 1)))


def check_shortcut(
    lf: Node,
    index: FactIndex,
    tool_calls: int | None = None,
    min_candidates: int = MIN_SUB_CANDIDATES,
    one_search_hit: bool | None = None,
) -> dict[str, Any]:
    """Stage 4: no sub-question of fewer hops than the full chain identifies the answer, and
    the tool solver needed at least one call per hop.

    A question whose top-level clauses (or any shallower part of it) already leave one
    entity looks multi-hop but is answered by one search: a policy trained on it learns to
    skip the chain. A shallower sub-question must leave at least `min_candidates` entities.
    `tool_calls` is the solver's count (None: not solved here, not checked);
    `one_search_hit` says whether one search for the question's text returned the answer's
    article first (a one-call solution, whatever the hops).
    """
    hops, fits = shortcut_candidates(lf, index)
    one_hop = len(index.evaluate(truncate(lf, 1))) if hops > 1 else fits
    reason = ""
    if hops > 1 and fits <= 1:
        reason = f"a sub-question of {_count(hops - 1, 'hop')} already identifies the answer"
    elif hops > 1 and fits < min_candidates:
        reason = (
            f"a sub-question of {_count(hops - 1, 'hop')} leaves only {fits} candidates "
            f"(at least {min_candidates} needed)"
        )
    elif one_search_hit and hops > 1:
        reason = "one search for the question's text returns the answer's article first"
    elif tool_calls is not None and tool_calls < hops:
        reason = f"the tool solver needed {_count(tool_calls, 'call')} for {_count(hops, 'hop')}"
    return {
        "passed": not reason,
        "hops": hops,
        "sub_question_candidates": fits,
        "one_hop_candidates": one_hop,
        "min_tool_calls": 1 if one_search_hit else tool_calls,
        "one_search_hit": one_search_hit,
        "reason": reason,
    }


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")
