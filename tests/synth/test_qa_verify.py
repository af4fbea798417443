"""Each verification stage rejects what it should, and keeps what it should."""

from __future__ import annotations

import asyncio
import copy

import numpy as np
import pytest

from gemkit.search.index import SearchIndex
from gemkit.synth.qa.agent import QAState, RuleAgent, difficulty, make_seed, support_of
from gemkit.synth.qa.edits import Candidate
from gemkit.synth.qa.logic import (
    FactIndex,
    constraint,
    entity_node,
    literal_node,
    query_node,
    question_text,
    range_node,
)
from gemkit.synth.qa.solver import ClosedBook, ToolSolver
from gemkit.synth.qa.verify import check_form, check_quality, check_uniqueness
from gemkit.synth.world import build_world
from gemkit.tools.search import AccessTool, SearchTool


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("qa")
    world = build_world(800, seed=11)
    corpus = world.write_corpus(tmp / "corpus.jsonl")
    index = SearchIndex.open(corpus, cache_dir=tmp / "idx")
    search = SearchTool(index=index)
    access = AccessTool(backend=search.backend)
    return world, index, search, access


def doc_text(index):
    return lambda doc_id: (index.access(doc_id) or {}).get("text")


def seed_state(world, k=0):
    return make_seed(world, FactIndex.of_world(world), np.random.default_rng([5, k]))


def test_a_seed_question_passes_quality_and_uniqueness(env):
    world, index, _, _ = env
    s = seed_state(world)
    q = check_quality(s.question, s.answer_id, s.aliases, s.lf, s.support, doc_text(index), world)
    assert q["passed"], q
    assert q["grounded"] == f"{len(s.support)}/{len(s.support)}"
    assert q["answer_follows"] is True
    assert check_uniqueness(s.lf, s.answer_id, FactIndex.of_world(world)) == {
        "passed": True,
        "candidates": 1,
        "reason": "",
    }


def test_quality_rejects_a_leaked_answer(env):
    world, index, _, _ = env
    s = seed_state(world)
    leaked = s.question[:-1] + f" (not {s.answer})?"
    q = check_quality(leaked, s.answer_id, s.aliases, s.lf, s.support, doc_text(index), world)
    assert not q["passed"]
    assert q["answer_leaked"] and "answer leaked" in q["reason"]


def test_quality_rejects_an_ungrounded_fact(env):
    world, index, _, _ = env
    s = seed_state(world)
    support = copy.deepcopy(s.support)
    support[0]["text"] = support[0]["text"].replace(".", " in secret.")
    q = check_quality(s.question, s.answer_id, s.aliases, s.lf, support, doc_text(index), world)
    assert not q["passed"]
    assert q["ungrounded"] == [support[0]["doc_id"]]


def test_quality_rejects_supporting_facts_that_do_not_entail_the_answer(env):
    world, index, _, _ = env
    s = seed_state(world)
    q = check_quality(
        s.question, s.answer_id, s.aliases, s.lf, s.support[:1], doc_text(index), world
    )
    assert q["answer_follows"] is False and not q["passed"]


@pytest.mark.parametrize("text", ["Which city is it? And where?", "Name the city.", "Which?"])
def test_quality_rejects_anything_but_one_question(text):
    assert not check_form(text, ["Dravon"])["passed"]


def _two_companies_same_industry(world):
    by_key = {}
    for cid in world.by_type["company"]:
        industry = world.objects(cid, "industry")[0]
        year = world.objects(cid, "founded")[0]
        by_key.setdefault(industry, []).append((year, cid))
    for industry, items in by_key.items():
        items.sort()
        for (y1, c1), (y2, c2) in zip(items, items[1:], strict=False):
            if y1 != y2 and y2 - y1 < 50:
                return industry, (y1, c1), (y2, c2)
    raise AssertionError("no pair")


def test_uniqueness_rejects_a_fuzz_that_lets_two_entities_fit(env):
    world, _, search, _ = env
    industry, (y1, c1), (y2, _) = _two_companies_same_industry(world)
    index = FactIndex.of_world(world)
    lf = query_node(
        "company",
        [
            constraint("industry", "out", literal_node(industry)),
            constraint("founded", "out", literal_node(y1)),
        ],
    )
    wide = range_node(y1, y2, f"between {y1} and {y2}")
    blurred = query_node("company", [lf["where"][0], constraint("founded", "out", wide)])
    assert len(index.evaluate(blurred)) >= 2
    e = world.entity(c1)
    state = QAState(
        question_text(lf), c1, e.name, e.aliases, lf, [], {"question": "", "answer": e.name}
    )
    assert not RuleAgent(world, search).try_edit(state, Candidate("fuzz", (1,), wide))
    assert state.rejected[-1]["stage"] == "uniqueness"
    assert state.rejected[-1]["reason"] == f"{len(index.evaluate(blurred))} entities fit"
    assert state.edits == [] and state.lf == lf


def test_difficulty_rejects_a_question_the_closed_book_baseline_answers(env):
    world, _, search, access = env
    # the most linked company is exactly what the popularity prior guesses
    popular = max(world.by_type["company"], key=lambda c: world.entity(c).popularity)
    fact = next(
        world.facts[i] for i in world.by_subject[popular] if world.facts[i].relation == "founded_by"
    )
    lf = query_node(
        "company",
        [
            constraint(
                "founded_by",
                "out",
                entity_node(fact.object, world.entity(fact.object).name, "person"),
            )
        ],
    )
    e = world.entity(popular)
    state = QAState(
        question_text(lf, {fact.object: world.entity(fact.object).ref}),
        popular,
        e.name,
        e.aliases,
        lf,
        [support_of(fact)],
        {"question": "", "answer": e.name},
    )
    verdict = asyncio.run(
        difficulty(
            state, world, ClosedBook(world), ToolSolver(search, access), np.random.default_rng(0)
        )
    )
    assert verdict["closed_book_correct"] >= 1
    assert not verdict["passed"] and "closed-book" in verdict["reason"]


def test_the_tool_solver_answers_a_seed_question_through_the_tools(env):
    world, _, search, access = env
    s = seed_state(world, 3)
    solver = ToolSolver(search, access)
    result = asyncio.run(solver.solve(s.lf))
    assert result.answer == s.answer
    assert result.tool_calls >= 2  # at least one search and one page read


def test_the_tool_solver_fails_when_its_budget_is_too_small(env):
    world, _, search, access = env
    s = seed_state(world, 3)
    result = asyncio.run(ToolSolver(search, access, max_calls=1).solve(s.lf))
    assert result.answer is None and result.exhausted


def test_a_place_is_never_blurred_into_an_entity_the_question_already_described(env):
    from gemkit.synth.qa.edits import fuzz_candidates

    world = env[0]
    city = world.entity(world.by_type["city"][0])
    (country,) = world.objects(city.id, "located_in")
    lf = query_node(
        "person", [constraint("born_in", "out", entity_node(city.id, city.name, "city"))]
    )

    def place_fuzzes(seen):
        found = fuzz_candidates(lf, world, np.random.default_rng(0), seen)
        return [c for c in found if c.fact is not None]

    assert [c.fact.object for c in place_fuzzes(set())] == [country]
    assert place_fuzzes({country}) == []


# -- the text must say what the logical form says ---------------------------------------------


def text_of(world, k):
    from gemkit.synth.qa.agent import world_refs
    from gemkit.synth.qa.verify import check_text

    s = seed_state(world, k)
    refs = world_refs(world)
    return s, (lambda q: check_text(q, s.lf, s.support, world, refs))


def first_entity(s, world):
    from gemkit.synth.qa.logic import entity_ids

    return world.entities[sorted(entity_ids(s.lf))[0]]


def test_template_questions_pass_the_text_check(env):
    world = env[0]
    for k in range(40):
        s, check = text_of(world, k)
        verdict = check(s.question)
        assert verdict["passed"], (s.question, verdict["problems"])


def test_a_question_asking_for_another_type_is_rejected(env):
    world = env[0]
    s, check = text_of(world, 0)
    wrong = "city" if s.lf["type"] != "city" else "person"
    head = s.question.split(" ", 2)  # "Which <noun> <rest>"
    verdict = check(f"In which {wrong} {head[2]}")
    assert not verdict["passed"]
    assert f"asks for {wrong}, the answer is a {s.lf['type']}" in verdict["reason"]
    assert not check("In what year " + head[2])["passed"]


def test_a_name_outside_the_form_or_the_facts_is_rejected(env):
    world = env[0]
    s, check = text_of(world, 1)
    from gemkit.synth.qa.logic import entity_ids

    named = entity_ids(s.lf) | {s.answer_id}
    stranger = next(e for e in world.entities.values() if e.id not in named and e.type == "person")
    verdict = check(s.question[:-1] + f" and knew {stranger.name}?")
    assert not verdict["passed"]
    assert f"names {stranger.name}, which the logical form does not" in verdict["problems"]


def test_a_dropped_entity_or_value_is_rejected(env):
    world = env[0]
    s, check = text_of(world, 2)
    e = first_entity(s, world)
    ref = next(a for a in (e.ref, e.name) if a in s.question)
    verdict = check(s.question.replace(ref, "somewhere"))
    assert not verdict["passed"] and any(e.name in p for p in verdict["problems"])
    years = [w for w in s.question.replace("?", "").split() if w.isdigit() and len(w) == 4]
    if years:
        assert not check(s.question.replace(years[0], "some year"))["passed"]


def test_a_name_in_the_form_but_no_supporting_fact_is_rejected(env):
    world = env[0]
    from gemkit.synth.qa.agent import world_refs
    from gemkit.synth.qa.verify import check_text

    s = seed_state(world, 3)
    verdict = check_text(s.question, s.lf, [], world, world_refs(world))
    assert not verdict["passed"] and "found in no supporting fact" in verdict["reason"]


def test_check_quality_rejects_text_that_disagrees_with_the_form(env):
    world, index, _, _ = env
    s = seed_state(world, 4)
    drifted = "In which year " + s.question.split(" ", 2)[2]
    q = check_quality(drifted, s.answer_id, s.aliases, s.lf, s.support, doc_text(index), world)
    assert not q["passed"] and q["reason"].startswith("text and logical form disagree")
