"""The synthesis agent: a seed question grown by inject and fuzz edits, then verified.

State = question, answer, supporting facts, logical form, edit history. Each step picks an
edit (inject needs the search tool), checks it (form + uniqueness), and keeps or rejects it.
At the end the full three-stage verification decides whether the record is kept.
"""

from __future__ import annotations

import copy
import itertools
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gemkit.synth.qa.edits import (
    Candidate,
    fuzz_candidates,
    fuzz_number,
    fuzz_year,
    inject_candidates,
)
from gemkit.synth.qa.logic import (
    FactIndex,
    Node,
    constraint,
    entity_ids,
    entity_node,
    get,
    literal_node,
    node_text,
    query_node,
    replace,
    walk,
)
from gemkit.synth.qa.realize import realize
from gemkit.synth.qa.solver import ClosedBook, ToolSolver, grade
from gemkit.synth.qa.verify import (
    IDLE_CLAUSE,
    MAX_CHARS,
    check_form,
    check_quality,
    check_shortcut,
    check_text,
    check_uniqueness,
    clause_text,
    droppable_clauses,
)
from gemkit.synth.world.schema import LABEL, NUMBER, RELATIONS, YEAR, search_key
from gemkit.synth.world.world import Fact, World
from gemkit.tools.search import SearchArgs, SearchTool

#: answer types a seed question may ask for, with their weights (few countries/awards exist,
#: so a closed-book guess would hit them too often)
SEED_TYPES = {
    "person": 3.0,
    "company": 1.5,
    "university": 1.0,
    "book": 1.5,
    "film": 1.5,
    "band": 1.0,
    "railway": 1.0,
    "mountain": 0.8,
    "river": 0.8,
    "event": 1.0,
    "city": 1.0,
}


class EditCounts:
    """Counts of the accepted edits of a question (shared by both agents' states)."""

    edits: list[dict[str, Any]]

    @property
    def n_inject(self) -> int:
        """Accepted injections."""
        return sum(e["op"] == "inject" for e in self.edits)

    @property
    def n_fuzz(self) -> int:
        """Accepted fuzzes."""
        return sum(e["op"] == "fuzz" for e in self.edits)

    def still_needed(self, target: dict[str, int]) -> dict[str, int]:
        """How many of each edit kind `target` still asks for."""
        return {"inject": target["inject"] - self.n_inject, "fuzz": target["fuzz"] - self.n_fuzz}


def choose_op(need: dict[str, int], ops: list[str], rng: np.random.Generator) -> str:
    """An edit kind among `ops`, weighted by how many of each are still needed."""
    weights = np.array([need[op] for op in ops], dtype=float)
    return ops[int(rng.choice(len(ops), p=weights / weights.sum()))]


@dataclass
class QAState(EditCounts):
    """Everything the agent knows about the question it is growing."""

    question: str
    answer_id: str
    answer: str
    aliases: list[str]
    lf: Node
    support: list[dict[str, Any]]
    seed: dict[str, str]
    edits: list[dict[str, Any]] = field(default_factory=list)
    rejected: list[dict[str, Any]] = field(default_factory=list)
    seen: set[str] = field(default_factory=set)  # every entity the question has named
    style: int = 0  # the realizer's seed: one wording per question, stable across edits
    construction: str = "which"  # the frame the question is written in ("model": a model's)

    def __post_init__(self) -> None:
        self.seen |= entity_ids(self.lf) | {self.answer_id}


@dataclass
class AgentConfig:
    """Knobs of the agent: how many edits it aims for and what it may try per step."""

    min_inject: int = 4
    min_fuzz: int = 2
    extra_inject: float = 0.3  # chance of one injection beyond the minimum
    extra_fuzz: float = 0.1
    tries_per_step: int = 8
    max_steps: int = 24
    max_chars: int = MAX_CHARS
    closed_book_samples: int = 3
    solver_max_calls: int = 120
    max_fits: int = 16  # an injected description may fit at most this many entities

    def edit_targets(self, rng: np.random.Generator) -> dict[str, int]:
        """How many injections and fuzzes to aim for (drawn once per question)."""
        return {
            "inject": self.min_inject + int(rng.random() < self.extra_inject),
            "fuzz": self.min_fuzz + int(rng.random() < self.extra_fuzz),
        }


def support_of(fact: Fact, mention: tuple[str, str] | None = None) -> dict[str, Any]:
    """A supporting-fact entry: the doc and sentence, and the fact's index in the world."""
    doc_id, text = mention or fact.mentions[0]
    return {"doc_id": doc_id, "text": text, "fact": fact.index}


def world_refs(world: World) -> dict[str, str]:
    """How each entity is referred to in running text (cached on the world)."""
    return world.derived("refs", lambda w: {e.id: e.ref for e in w.entities.values()})


def _value(world: World, rel: str, value: Any) -> Node:
    if isinstance(value, str) and value in world.entities and RELATIONS[rel].obj != LABEL:
        e = world.entities[value]
        return entity_node(e.id, e.name, e.type)
    return literal_node(value)


def make_seed(
    world: World, index: FactIndex, rng: np.random.Generator, tries: int = 20
) -> QAState | None:
    """A seed question about a random entity: one fact naming another entity, one year or number.

    Facts are added (up to four) until the answer is the only entity that fits.
    """
    types = [t for t in SEED_TYPES if world.by_type.get(t)]
    w = np.array([SEED_TYPES[t] for t in types])
    refs = world_refs(world)
    for _ in range(tries):
        t = types[int(rng.choice(len(types), p=w / w.sum()))]
        ids = world.by_type[t]
        eid = ids[int(rng.integers(len(ids)))]
        out_facts = [world.facts[i] for i in world.by_subject.get(eid, ())]
        in_facts = [
            world.facts[i]
            for i in world.by_object.get(eid, ())
            if RELATIONS[world.facts[i].relation].in_vp
        ]
        linked = [(f, "out") for f in out_facts if RELATIONS[f.relation].is_entity] + [
            (f, "in") for f in in_facts
        ]
        literal = [(f, "out") for f in out_facts if RELATIONS[f.relation].obj in (YEAR, NUMBER)]
        labels = [(f, "out") for f in out_facts if RELATIONS[f.relation].obj == LABEL]
        if not linked or not literal:
            continue
        order = [linked[int(rng.integers(len(linked)))], literal[int(rng.integers(len(literal)))]]
        others = [x for x in linked if x[0].relation != order[0][0].relation]
        if others and rng.random() < 0.6:
            # a second named entity gives the question a second branch to grow
            order.insert(1, others[int(rng.integers(len(others)))])
        rest = [x for x in linked + literal + labels if x not in order]
        rng.shuffle(rest)
        if labels and rng.random() < 0.5:
            order.append(labels[0])
        where: list[dict[str, Any]] = []
        support = []
        used: set[tuple[str, str]] = set()
        for f, d in order + rest:
            if (f.relation, d) in used:
                continue
            used.add((f.relation, d))
            other = f.object if d == "out" else f.subject
            where.append(constraint(f.relation, d, _value(world, f.relation, other)))
            support.append(support_of(f, f.mentions[0] if d == "out" else f.mentions[-1]))
            lf = query_node(t, copy.deepcopy(where))
            if len(where) >= min(len(order), 3) and index.evaluate(lf) == {eid}:
                break
        else:
            continue
        if len(where) > 4:
            continue
        needed = minimal_clauses(t, where, support, eid, index)
        if needed is None:
            continue
        where, support = needed
        lf = query_node(t, where)
        if not blurrable(lf, eid, index):
            continue
        e = world.entities[eid]
        style = int(rng.integers(2**31))
        q, construction = realize(lf, refs, style)
        if not check_form(q, e.aliases)["passed"]:
            continue
        return QAState(
            q,
            eid,
            e.name,
            e.aliases,
            lf,
            support,
            {"question": q, "answer": e.name},
            style=style,
            construction=construction,
        )
    return None


def blurrable(lf: Node, answer_id: str, index: FactIndex) -> bool:
    """Whether some year or number of a seed can be blurred one step and the answer stay the
    only one that fits. Every clause of a seed is needed, so a blur often lets a second
    entity in; a seed where none can be blurred rarely reaches its fuzzes (the work of its
    searches and injections would be spent for nothing)."""
    for path, node, holder in walk(lf):
        if holder is None or node["kind"] != "literal":
            continue
        obj = RELATIONS[holder["rel"]].obj
        if obj == YEAR:
            blurs = [fuzz_year(node)]
        elif obj == NUMBER:
            unit = RELATIONS[holder["rel"]].unit
            blurs = [fuzz_number(node, unit, np.random.default_rng(0), mode) for mode in (3, 2)]
        else:
            continue
        for new in blurs:
            if new is not None and index.evaluate(replace(lf, path, new)) == {answer_id}:
                return True
    return False


def minimal_clauses(
    type_: str,
    where: list[dict[str, Any]],
    support: list[dict[str, Any]],
    answer_id: str,
    index: FactIndex,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]] | None:
    """The largest set of the seed's clauses (with their facts) that fits the answer alone and
    needs every clause it holds: drop any one and another entity fits. None if there is none
    with a named entity and a year or number, so the seed can grow both ways.

    A clause the others make redundant does no work: it survives the edits as a detail a
    policy learns to ignore (and once its sibling is injected into a chain, as a top-level
    shortcut that names the answer alone). Every later edit only widens the form, so a seed
    whose every clause is needed keeps them all needed.
    """
    n = len(where)
    for size in range(n, 1, -1):
        for keep in itertools.combinations(range(n), size):
            chosen = [where[j] for j in keep]
            if not any(c["value"]["kind"] == "entity" for c in chosen):
                continue
            if not any(RELATIONS[c["rel"]].obj in (YEAR, NUMBER) for c in chosen):
                continue
            lf = query_node(type_, chosen)
            if index.evaluate(lf) != {answer_id}:
                continue
            if droppable_clauses(lf, answer_id, index):
                continue
            return chosen, [support[j] for j in keep]
    return None


def edit_texts(lf: Node, cand: Candidate, refs: dict[str, str]) -> tuple[str, str]:
    """The phrase a candidate replaces and its replacement, as a question states them."""
    rel = get(lf, cand.path[:-1])["where"][cand.path[-1]]["rel"] if cand.path else ""
    return node_text(get(lf, cand.path), rel, refs), node_text(cand.new, rel, refs)


class RuleAgent:
    """The offline agent: picks edits by rule and writes questions from templates."""

    def __init__(self, world: World, search: SearchTool, config: AgentConfig | None = None):
        self.world = world
        self.search = search
        self.config = config or AgentConfig()
        self.index = FactIndex.of_world(world)
        self.refs = world_refs(world)
        self.search_calls = 0

    # -- proposals ------------------------------------------------------------------------------

    def inject_targets(self, state: QAState, rng: np.random.Generator) -> list[tuple[Any, ...]]:
        """Paths of the named entities an injection may replace, deepest first."""
        paths = [p for p, n, h in walk(state.lf) if n["kind"] == "entity" and h is not None]
        # deeper entities first: injecting there grows a chain, as in the published questions
        order = rng.permutation(len(paths))
        return sorted((paths[i] for i in order), key=len, reverse=True)

    async def inject_options_for(
        self, state: QAState, path: tuple[Any, ...], want_entity: bool
    ) -> list[Candidate]:
        """Injection candidates for the entity at `path`, from what a search for its name returns."""
        name = get(state.lf, path)["name"]
        self.search_calls += 1
        result = await self.search.call(SearchArgs(query=search_key(name), topk=5))
        docs = result.metadata.get("docs") or []
        used = {s["fact"] for s in state.support if s.get("fact") is not None}
        cands = inject_candidates(
            state.lf,
            path,
            docs,
            self.world,
            self.index,
            state.answer_id,
            want_entity,
            state.seen,
            used,
            self.config.max_fits,
        )
        if want_entity and len(entity_ids(state.lf)) <= 1:
            # the last named entity: a description without one would end the chain
            cands = [c for c in cands if c.new["where"][0]["value"]["kind"] == "entity"]
        return cands

    async def inject_options(
        self, state: QAState, rng: np.random.Generator, want_entity: bool, max_entities: int = 3
    ) -> list[Candidate]:
        """Injection candidates for up to `max_entities` entities of the form, found by search."""
        out: list[Candidate] = []
        for path in self.inject_targets(state, rng)[:max_entities]:
            out += await self.inject_options_for(state, path, want_entity)
        return out

    def fuzz_options(
        self, state: QAState, rng: np.random.Generator, keep_entities: int = 0
    ) -> list[Candidate]:
        """Fuzz candidates in random order.

        Blurring a name ("a textile company") removes a named entity; while injections are
        still due, at least `keep_entities` named entities must be left to inject.
        """
        cands = fuzz_candidates(state.lf, self.world, rng, state.seen)
        named = len(entity_ids(state.lf))
        if named <= keep_entities:
            cands = [c for c in cands if c.fact is None]
        order = rng.permutation(len(cands))
        return [cands[i] for i in order]

    # -- applying -------------------------------------------------------------------------------

    def render(self, lf: Node, style: int = 0) -> tuple[str, str]:
        """The question text of a form, and the construction it is written in."""
        return realize(lf, self.refs, style)

    def try_edit(self, state: QAState, cand: Candidate, question: str | None = None) -> bool:
        """Check one candidate (form + uniqueness) and apply it to `state` when it passes."""
        new_lf = replace(state.lf, cand.path, cand.new)
        q, construction = (question, "model") if question else self.render(new_lf, state.style)
        before, after = edit_texts(state.lf, cand, self.refs)
        entry = {
            "op": cand.op,
            "before": before,
            "after": after,
            "fact": {"doc_id": cand.mention[0], "text": cand.mention[1]} if cand.mention else None,
        }
        form = check_form(q, state.aliases, self.config.max_chars)
        if not form["passed"]:
            state.rejected.append({**entry, "stage": "quality", "reason": form["reason"]})
            return False
        new_support = (
            [{"doc_id": cand.mention[0], "text": cand.mention[1], "fact": cand.fact.index}]
            if cand.fact is not None and cand.mention is not None
            else []
        )
        if question is not None:  # a model's rewrite: it must say what the new form says
            text = check_text(q, new_lf, state.support + new_support, self.world, self.refs)
            if not text["passed"]:
                state.rejected.append(
                    {**entry, "stage": "quality", "reason": text["reason"], "question": q}
                )
                return False
        uniq = check_uniqueness(new_lf, state.answer_id, self.index)
        if not uniq["passed"]:
            state.rejected.append({**entry, "stage": "uniqueness", "reason": uniq["reason"]})
            return False
        # the clause the edit adds (or blurs) must do work: every other one still does
        new = [(*cand.path, 0)] if cand.new["kind"] == "query" else [cand.path]
        idle = droppable_clauses(new_lf, state.answer_id, self.index, new)
        if idle:
            reason = f"{IDLE_CLAUSE} {clause_text(new_lf, idle[0])}"
            state.rejected.append({**entry, "stage": "uniqueness", "reason": reason})
            return False
        state.lf = new_lf
        state.question = q
        state.construction = construction
        state.seen |= entity_ids(new_lf)
        state.support.extend(new_support)
        state.edits.append({**entry, "question": q})
        return True

    async def grow(self, state: QAState, rng: np.random.Generator) -> QAState:
        """Apply inject and fuzz edits until the targets are met or no edit passes."""
        cfg = self.config
        target = cfg.edit_targets(rng)
        stuck: set[str] = set()
        for _ in range(cfg.max_steps):
            need = state.still_needed(target)
            ops = [op for op, k in need.items() if k > 0 and op not in stuck]
            if not ops:
                break
            op = choose_op(need, ops, rng)
            if op == "inject":
                done = False
                # search one entity at a time: most steps succeed on the first
                for path in self.inject_targets(state, rng)[:3]:
                    cands = await self.inject_options_for(state, path, need["inject"] > 1)
                    if any(self.try_edit(state, c) for c in cands[: cfg.tries_per_step]):
                        done = True
                        break
            else:
                cands = self.fuzz_options(state, rng, keep_entities=1 if need["inject"] > 0 else 0)
                done = any(self.try_edit(state, c) for c in cands[: cfg.tries_per_step])
            if not done:
                stuck.add(op)
            elif stuck:
                # the form changed: an edit kind that found no candidate before may find one now
                stuck.clear()
        return state


async def difficulty(
    state: QAState,
    world: World,
    closed_book: ClosedBook,
    solver: ToolSolver,
    rng: np.random.Generator,
) -> dict[str, Any]:
    """Stage 2: closed-book baselines must all fail; the tool solver must find the answer."""
    guesses = closed_book.guesses(state.question, state.lf["type"], rng)
    flat = [g for gs in guesses.values() for g in gs]
    correct = sum(grade(g, state.aliases) for g in flat)
    solved = await solver.solve(state.lf)
    success = solved.answer is not None and grade(solved.answer, state.aliases)
    reason = ""
    if correct:
        reason = "a closed-book baseline answered it"
    elif not success:
        reason = (
            "the tool solver ran out of calls"
            if solved.exhausted
            else "the tool solver did not find it"
        )
    return {
        "passed": correct == 0 and success,
        "closed_book_correct": correct,
        "closed_book_tries": len(flat),
        "closed_book_guesses": guesses,
        "tool_solver_success": success,
        "tool_calls": solved.tool_calls,
        "reason": reason,
    }


async def verify_state(
    state: QAState,
    world: World,
    doc_text: Any,
    closed_book: ClosedBook,
    solver: ToolSolver,
    rng: np.random.Generator,
    max_chars: int = MAX_CHARS,
) -> dict[str, Any]:
    """Every stage on the final question, in order; later stages run even if one fails."""
    quality = check_quality(
        state.question,
        state.answer_id,
        state.aliases,
        state.lf,
        state.support,
        doc_text,
        world,
        max_chars,
        refs=world_refs(world),
    )
    diff = await difficulty(state, world, closed_book, solver, rng)
    index = FactIndex.of_world(world)
    uniq = check_uniqueness(state.lf, state.answer_id, index, clauses=True)
    hit = await one_search_answers(solver.search, state.question, state.aliases)
    short = check_shortcut(state.lf, index, diff["tool_calls"], one_search_hit=hit)
    return {"quality": quality, "difficulty": diff, "uniqueness": uniq, "shortcut": short}


async def one_search_answers(search: SearchTool, question: str, aliases: list[str]) -> bool:
    """Whether searching the question's own text returns the answer's article first: a
    policy that searches once and answers with the top title would need no hop at all."""
    result = await search.call(SearchArgs(query=question, topk=1))
    docs = result.metadata.get("docs") or []
    return bool(docs) and grade(str(docs[0].get("title") or ""), aliases)
