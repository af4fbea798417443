"""Synthesized data worth training on: no shortcut questions, varied fluent wording.

A policy trained on a question that its top-level clauses already answer learns to skip the
chain; one trained on a single template learns the template. These tests attack the QA
pipeline's output as a data scientist would: every kept record is re-checked with the test's
own sub-question pruning over the fact store, and thousands of realized questions are read
for the patterns a template leaves (doubled verbs, "where ... where", one frame).
"""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from gemkit.synth.qa.logic import (
    FactIndex,
    constraint,
    depth,
    entity_node,
    literal_node,
    query_node,
)
from gemkit.synth.qa.realize import CONSTRUCTIONS, realize
from gemkit.synth.qa.run import RunConfig, read_records, run
from gemkit.synth.qa.verify import check_shortcut, check_text
from gemkit.synth.world import build_world


def prune(node: dict, hops: int) -> dict:
    """The test's own sub-question: every clause nested deeper than `hops` dropped."""
    if node["kind"] != "query":
        return node
    kept = []
    for c in node["where"]:
        if c["value"]["kind"] != "query":
            kept.append(c)
        elif hops > 1:
            kept.append({**c, "value": prune(c["value"], hops - 1)})
    return {**node, "where": kept}


@pytest.fixture(scope="module")
def qa_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict]]:
    out = tmp_path_factory.mktemp("qa")
    run(out, RunConfig(n=60, world_size=2000, seed=5), export=False)
    return out, read_records(out)


def test_no_kept_question_is_answered_by_a_sub_question_of_fewer_hops(qa_run):
    _, records = qa_run
    world = build_world(2000, 5)
    index = FactIndex.of_world(world)
    assert len(records) == 60
    shortcuts = []
    for r in records:
        lf, answer = r["logical_form"], world.by_name[r["answer"].lower()]
        hops = depth(lf)
        assert hops >= 2 and r["verification"]["shortcut"]["hops"] == hops
        for h in range(1, hops):
            fits = index.evaluate(prune(lf, h))
            assert answer in fits  # a sub-question is weaker: the answer still fits
            # one candidate left is a shortcut; two or three, a guess that often pays
            if len(fits) < 4:
                shortcuts.append((r["question"], h, len(fits)))
        assert r["verification"]["difficulty"]["tool_calls"] >= hops
    assert shortcuts == []


def test_the_shortcut_stage_refuses_a_question_its_top_level_clauses_answer():
    types = {"c1": "company", "c2": "company", "p1": "person", "p2": "person", "u1": "university"}
    triples = [
        ("c1", "founded", 1934),
        ("c2", "founded", 1950),
        ("c1", "founded_by", "p1"),
        ("c2", "founded_by", "p2"),
        ("u1", "founded_by", "p1"),
    ]
    index = FactIndex(triples, types)
    founder = query_node(
        "person", [constraint("founded_by", "in", entity_node("u1", "K", "university"))]
    )
    dressed_up = query_node(
        "company",
        [
            constraint("founded", "out", literal_node(1934)),
            constraint("founded_by", "out", founder),
        ],
    )
    assert index.evaluate(dressed_up) == {"c1"}  # unique, as the uniqueness stage sees it
    verdict = check_shortcut(dressed_up, index, tool_calls=6)
    assert not verdict["passed"] and verdict["sub_question_candidates"] == 1
    assert verdict["reason"] == "a sub-question of 1 hop already identifies the answer"
    needed = query_node("company", [constraint("founded_by", "out", founder)])
    # dropping the hop leaves both companies: a guess between two still pays half the time
    assert check_shortcut(needed, index, tool_calls=6)["reason"] == (
        "a sub-question of 1 hop leaves only 2 candidates (at least 4 needed)"
    )
    assert check_shortcut(needed, index, tool_calls=6, min_candidates=2)["passed"]
    # the solver's own count is the second half: a call per hop at least
    assert check_shortcut(needed, index, tool_calls=1, min_candidates=2)["reason"] == (
        "the tool solver needed 1 call for 2 hops"
    )


@pytest.fixture(scope="module")
def grown_forms(tmp_path_factory: pytest.TempPathFactory):
    from gemkit.search.index import SearchIndex
    from gemkit.synth.qa.agent import RuleAgent, make_seed, world_refs
    from gemkit.tools.search import SearchTool

    world = build_world(1500, seed=8)
    tmp = tmp_path_factory.mktemp("forms")
    search = SearchTool(index=SearchIndex.open(world.write_corpus(tmp / "c.jsonl"), cache_dir=tmp))
    agent = RuleAgent(world, search)
    states = []

    async def grow_all() -> None:
        for k in range(120):
            rng = np.random.default_rng([4, k])
            state = make_seed(world, FactIndex.of_world(world), rng)
            if state is not None:
                states.append(await agent.grow(state, rng))

    asyncio.run(grow_all())
    return world, world_refs(world), [s for s in states if s.edits]


def test_thousands_of_realized_questions_read_as_varied_fluent_english(grown_forms):
    world, refs, states = grown_forms
    seen: Counter[str] = Counter()
    problems = []
    styles = np.random.default_rng(0).integers(2**31, size=25)
    asked_who = Counter()
    for s in states:
        for style in styles:
            q, construction = realize(s.lf, refs, int(style))
            seen[construction] += 1
            if s.lf["type"] == "person":
                asked_who[construction == "who"] += 1
            if re.search(r"\b(\w+) \1\b", q, re.IGNORECASE):
                problems.append(("doubled word", q))
            if q.count(" where ") > 1:
                problems.append(("where inside where", q))
            if not (q.endswith("?") and q.count("?") == 1 and "{" not in q):
                problems.append(("not one question", q))
            text = check_text(q, s.lf, s.support, world, refs)
            if not text["passed"]:
                problems.append((text["reason"], q))
    total = sum(seen.values())
    assert total >= 2500
    assert problems == []
    assert set(seen) == set(CONSTRUCTIONS)
    # no frame dominates; every frame is common enough to be learned from
    assert max(seen.values()) / total < 0.4, seen
    assert min(n for c, n in seen.items() if c != "who") / total > 0.05, seen
    assert asked_who[True] / sum(asked_who.values()) > 0.1  # only people are asked "who"


def test_a_style_seed_gives_one_wording_and_other_seeds_give_others(grown_forms):
    _, refs, states = grown_forms
    lf = max(states, key=lambda s: depth(s.lf)).lf
    assert realize(lf, refs, 3) == realize(lf, refs, 3)
    assert len({realize(lf, refs, style)[0] for style in range(40)}) >= 10


def test_no_kept_question_is_answered_by_searching_its_own_text(qa_run, tmp_path):
    from gemkit.search.index import SearchIndex

    out, records = qa_run
    index = SearchIndex.open(out / "corpus.jsonl", cache_dir=tmp_path)
    first = [index.search(r["question"], 1) for r in records]
    hits = [
        r["question"]
        for r, docs in zip(records, first, strict=True)
        if docs and docs[0]["title"].lower() == r["answer"].lower()
    ]
    assert hits == []
    assert all(r["verification"]["shortcut"]["one_search_hit"] is False for r in records)


def test_kept_records_say_how_their_question_is_built(qa_run):
    _, records = qa_run
    shares = Counter(r["construction"] for r in records)
    assert set(shares) <= set(CONSTRUCTIONS)
    assert len(shares) >= 4


# -- task tuples ----------------------------------------------------------------------------------


def _synthesized(category: str, tmp: Path, level: int, seed: int):
    from gemkit.envs.toolworld.category import Database
    from gemkit.synth.tasks import get_category, synthesize

    cat = get_category(category)
    syn = synthesize(cat, tmp / f"{category}-{seed}.sqlite", np.random.default_rng([seed]), level)
    assert syn is not None
    return cat, syn, Database(tmp / f"{category}-{seed}.sqlite")


def _respell(name: str, how: int) -> str:
    return (name.lower(), name.upper(), f"  {name} ", name.replace(" ", "  "))[how % 4]


@pytest.mark.parametrize("category", ["trip_planning", "meeting_scheduling", "shopping_basket"])
def test_a_correct_answer_in_another_case_or_spacing_still_passes(category, tmp_path):
    cat, syn, db = _synthesized(category, tmp_path, 3, 2)
    answer = syn.reference_answer
    assert cat.verify(db, syn.task, answer).passed
    for how in range(4):
        if category == "shopping_basket":
            respelled = [_respell(name, how) for name in answer]
        elif category == "meeting_scheduling":
            respelled = [
                {
                    **e,
                    "meeting": _respell(e["meeting"], how),
                    "room": _respell(e["room"], how),
                    "day": _respell(e["day"], how),
                }
                for e in answer
            ]
        else:
            respelled = [
                {k: v if k == "time" else _respell(v, how) for k, v in d.items()} for d in answer
            ]
        verdict = cat.verify(db, syn.task, respelled)
        assert verdict.passed, (how, verdict.violations)


def test_two_spellings_of_one_name_are_one_name_to_the_rules(tmp_path):
    cat, syn, db = _synthesized("trip_planning", tmp_path, 2, 3)
    plan = [dict(d) for d in syn.reference_answer]
    # the same city, hotel and attraction on two days, once in the database's spelling
    plan[1] = {
        **plan[0],
        "time": plan[1]["time"],
        **{k: _respell(plan[0][k], 0) for k in ("city", "hotel", "afternoon_attraction")},
    }
    verdict = cat.verify(db, syn.task, plan)
    assert not verdict.passed and "no_repeat" in verdict.failed
    assert any("city" in v and "day 1 and day 2" in v for v in verdict.violations)
    cat, syn, db = _synthesized("shopping_basket", tmp_path, 2, 3)
    basket = [*syn.reference_answer, syn.reference_answer[0].upper()]
    verdict = cat.verify(db, syn.task, basket)
    assert not verdict.passed and "one_per_category" in verdict.failed


def test_every_level_one_trip_needs_a_tool_answer(tmp_path):
    fractions, rules = [], Counter()
    for seed in range(30):
        _, syn, _ = _synthesized("trip_planning", tmp_path, 1, 100 + seed)
        (level_one,) = syn.history
        fractions.append(level_one["valid_fraction"])
        rules.update(r["type"] for r in level_one["spec"]["rules"])
    # any well-formed in-city plan passing (a fraction of 1) would teach nothing
    assert max(fractions) < 1 and min(fractions) > 0
    assert len(rules) >= 5  # the first rule varies


def test_a_thousand_trip_databases_rarely_repeat_a_name(tmp_path):
    import sqlite3

    from gemkit.synth.tasks.trip_database import build_trip_database

    seen: Counter[str] = Counter()
    for i in range(1000):
        path = tmp_path / "db.sqlite"
        build_trip_database(path, np.random.default_rng([0, i]))
        with sqlite3.connect(path) as conn:
            names = {
                n
                for t in ("cities", "hotels", "restaurants", "attractions")
                for (n,) in conn.execute(f"SELECT name FROM {t}")
            }
        seen.update(names)
    repeated = sum(n for n in seen.values() if n > 1)
    assert sum(seen.values()) > 80_000
    assert repeated / sum(seen.values()) < 0.02, seen.most_common(5)
    assert seen.most_common(1)[0][1] <= 5
