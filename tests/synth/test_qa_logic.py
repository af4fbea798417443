"""Logical forms: evaluation over facts, English rendering, fuzz ladders."""

from __future__ import annotations

import asyncio
import re

import numpy as np
import pytest

from gemkit.synth.qa.edits import fuzz_number, fuzz_year
from gemkit.synth.qa.logic import (
    FactIndex,
    constraint,
    entity_node,
    literal_node,
    noun_phrase,
    query_node,
    question_text,
    range_node,
)
from gemkit.synth.world.schema import with_article

TYPES = {
    "c1": "company",
    "c2": "company",
    "p1": "person",
    "p2": "person",
    "u1": "university",
    "x1": "city",
}
TRIPLES = [
    ("c1", "founded", 1934),
    ("c1", "founded_by", "p1"),
    ("c1", "industry", "shipping"),
    ("c2", "founded", 1936),
    ("c2", "founded_by", "p2"),
    ("c2", "industry", "shipping"),
    ("u1", "founded_by", "p1"),
    ("p1", "born_in", "x1"),
    ("p2", "born_in", "x1"),
]
REFS = {"u1": "the Kelvar Institute", "p1": "Arlen Voss", "x1": "Dravon"}


@pytest.fixture
def index():
    return FactIndex(TRIPLES, TYPES)


def founder_of_kelvar():
    return query_node(
        "person",
        [constraint("founded_by", "in", entity_node("u1", "Kelvar Institute", "university"))],
    )


def test_a_nested_description_resolves_through_the_facts(index):
    lf = query_node("company", [constraint("founded_by", "out", founder_of_kelvar())])
    assert index.evaluate(lf) == {"c1"}


def test_a_blurred_year_can_make_a_question_ambiguous(index):
    exact = query_node("company", [constraint("founded", "out", literal_node(1934))])
    blurred = query_node(
        "company", [constraint("founded", "out", range_node(1930, 1939, "the 1930s"))]
    )
    assert index.evaluate(exact) == {"c1"}
    assert index.evaluate(blurred) == {"c1", "c2"}


def test_question_reads_as_one_english_question():
    lf = query_node(
        "company",
        [
            constraint("industry", "out", literal_node("shipping")),
            constraint("founded", "out", literal_node(1934)),
            constraint("founded_by", "out", founder_of_kelvar()),
        ],
    )
    assert question_text(lf, REFS) == (
        "Which shipping company was founded in 1934 by the founder of the Kelvar Institute?"
    )


def test_descriptions_use_participles_relative_clauses_and_articles():
    city_in = query_node(
        "city", [constraint("located_in", "out", entity_node("k", "Mereth", "country"))]
    )
    assert noun_phrase(city_in, {}) == "a city in Mereth"
    engineer = query_node(
        "person",
        [
            constraint("occupation", "out", literal_node("engineer")),
            constraint("born_in", "out", entity_node("x1", "Dravon", "city")),
        ],
    )
    assert noun_phrase(engineer, REFS) == "an engineer born in Dravon"
    two = query_node(
        "person",
        [
            constraint("born_in", "out", entity_node("x1", "Dravon", "city")),
            constraint("worked_for", "out", entity_node("c1", "Lazas Group", "company")),
        ],
    )
    assert noun_phrase(two, REFS) == "a person who was born in Dravon and worked for Lazas Group"
    railway = query_node("railway", [constraint("railway_kind", "out", literal_node("mountain"))])
    assert noun_phrase(railway, {}) == "a mountain railway"


def test_year_fuzz_climbs_a_ladder_of_blurrier_ranges():
    steps = [literal_node(1931)]
    while (nxt := fuzz_year(steps[-1])) is not None:
        steps.append(nxt)
    assert [s.get("text") for s in steps[1:]] == [
        "the early 1930s",
        "the 1930s",
        "the first half of the 20th century",
    ]
    assert all(s["lo"] <= 1931 <= s["hi"] for s in steps[1:])
    assert fuzz_year(literal_node(1934))["text"] == "the mid-1930s"


@pytest.mark.parametrize("value", [7, 43_817, 40_000, 999, 1_155])
def test_number_fuzz_always_contains_the_true_value(value):
    rng = np.random.default_rng(0)
    node = literal_node(value)
    for _ in range(3):
        node = fuzz_number(node, "people", rng)
        assert node is not None
        assert (node["lo"] is None or node["lo"] <= value) and (
            node["hi"] is None or value <= node["hi"]
        )
        assert any(w in node["text"] for w in ("more than", "fewer than", "between"))


# -- grammar of generated questions -------------------------------------------------------------

VOWEL_SOUND = re.compile(r"\b(a|an) (\w+)", re.IGNORECASE)


def grammar_problems(question: str) -> list[str]:
    problems = []
    asking = question.rsplit(". ", 1)[-1]
    # a fronted phrase may come first: "Founded in 1934, which company ...?"
    asking = re.sub(r"^[A-Z](?:[^,]|,(?! ))*, (?=(?:which|what|who) )", "", asking)
    if not (
        re.match(r"(Which|What|Who|which|what|who) ", asking)
        and question.endswith("?")
        and question.count("?") == 1
    ):
        problems.append("not one 'Which/What/Who ...?' question")
    if re.search(r"\{|\}|  | ,|,,", question) or re.search(r"\b(\w+) \1\b", question, re.I):
        problems.append("template debris or doubled words")
    if question.count(" where ") > 1:
        problems.append("'where' inside 'where'")
    for det, word in VOWEL_SOUND.findall(question):
        if det.lower() != with_article(word).split()[0]:
            problems.append(f"{det} {word}")
    return problems


@pytest.fixture(scope="module")
def grown_questions(tmp_path_factory):
    from gemkit.search.index import SearchIndex
    from gemkit.synth.qa.agent import RuleAgent, make_seed
    from gemkit.synth.world import build_world
    from gemkit.tools.search import SearchTool

    world = build_world(800, seed=21)
    tmp = tmp_path_factory.mktemp("grammar")
    index = SearchIndex.open(world.write_corpus(tmp / "c.jsonl"), cache_dir=tmp)
    agent = RuleAgent(world, SearchTool(index=index))
    questions, replaced = [], []

    async def grow_all():
        for k in range(30):
            rng = np.random.default_rng([9, k])
            state = make_seed(world, FactIndex.of_world(world), rng)
            questions.append(state.question)
            await agent.grow(state, rng)
            questions.extend(e["question"] for e in state.edits)
            replaced.append([e["before"] for e in state.edits if e["op"] == "inject"])

    asyncio.run(grow_all())
    return questions, replaced


def test_descriptions_never_loop_back_to_an_entity_already_replaced(grown_questions):
    _, replaced = grown_questions
    assert sum(map(len, replaced)) > 30
    for names in replaced:
        assert len(names) == len(set(names)), names


def test_generated_questions_are_single_grammatical_questions(grown_questions):
    grown_questions, _ = grown_questions
    assert len(grown_questions) > 60
    bad = {q: p for q in grown_questions if (p := grammar_problems(q))}
    assert bad == {}


def test_the_grammar_check_catches_broken_questions():
    assert grammar_problems("Which company was founded by a engineer?") == ["a engineer"]
    assert grammar_problems("Which company was founded in {O}?")
    assert grammar_problems("What is it")
