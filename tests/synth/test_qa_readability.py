"""Questions that read easily and clauses that do work, checked on hand-made cases.

The 2,000-record checks of the same rules are in `tests/redteam/test_synth_rules.py`; here
each rule meets the exact text or form that breaks it (the audit's own examples), and the
realizer meets forms built to tempt it into the old patterns.
"""

from __future__ import annotations

import random

import pytest

from gemkit.synth.qa.agent import minimal_clauses
from gemkit.synth.qa.logic import (
    FactIndex,
    clause_paths,
    constraint,
    drop_clause,
    entity_node,
    literal_node,
    query_node,
    range_node,
)
from gemkit.synth.qa.readability import (
    centre_embedded,
    clause_depth,
    frame_of,
    readability_problems,
    repeated_verbs,
)
from gemkit.synth.qa.realize import CONSTRUCTIONS, Realizer, constructions_for, realize
from gemkit.synth.qa.verify import (
    check_form,
    check_uniqueness,
    droppable_clauses,
    vacuous_blurs,
)

#: the audit's centre-embedded question (7.3% of its records had one)
AUDIT_CENTRE = (
    "Which river flows through a country that has a city that is the birthplace of a person "
    "who worked for a company that was founded by Gracre Seitraex as its capital?"
)


def test_a_clause_inside_has_as_its_capital_is_found():
    assert centre_embedded(AUDIT_CENTRE) == ["has ... as its capital"]
    right = (
        "Which river flows through a country whose capital is the birthplace of Gracre Seitraex?"
    )
    assert centre_embedded(right) == []
    assert centre_embedded("Which country has Sovaton as its capital?") == []


def test_a_clause_inside_a_middle_slot_is_found_but_a_relative_clause_after_is_not():
    inside = "Which city hosts the university where a person who founded X Works studied?"
    assert centre_embedded(inside) == ["the university where ... studied"]
    closed = "What is the name of the company that employs 40 people and employed a person who worked for Ilk Group?"
    assert centre_embedded(closed) == []


def test_a_repeated_main_verb_is_found_and_a_shared_one_is_not():
    assert repeated_verbs("Which person was born in the 1890s and was born in Sovaton?") == [
        "was born"
    ]
    assert repeated_verbs("Which person was born in the 1890s in Sovaton?") == []
    assert repeated_verbs("Which band was formed in the 1970s and was founded by Ilk Vor?") == []
    assert repeated_verbs("Which country has a population of 5,000 and has Ab as its capital?") == [
        "has"
    ]
    # the copula repeated in one clause, but not across a relative clause
    assert repeated_verbs("Which city is in Goulistan and is the birthplace of Ilk Vor?") == ["is"]
    assert repeated_verbs("What is the name of the city that is in Goulistan?") == []
    # a participle set off before the asked noun, then its verb again
    assert repeated_verbs("Formed in the 1960s, what band was formed in Ab?") == ["formed"]
    assert repeated_verbs("Which band, formed in 1960, was formed in Ab?") == ["formed"]
    assert repeated_verbs("Formed in the 1960s, what band was founded by Ab?") == []
    # sentences that go on about one subject count as one clause
    assert repeated_verbs("A film was released in 1990. It was released in Ab. Which film is it?")


def test_clause_depth_counts_relative_clauses_but_not_the_asking_word():
    assert clause_depth("Which company was founded in 1934?") == 0
    assert clause_depth(AUDIT_CENTRE) == 4
    assert clause_depth("Founded in 1934, which company employed a person who studied at X?") == 1
    two = "A person studied at a university that is in X. Which company employed this person?"
    assert clause_depth(two) == 1  # one sentence at a time


def test_readability_problems_name_each_problem_in_a_line():
    problems = readability_problems(AUDIT_CENTRE)
    assert problems == [
        "a clause inside 'has ... as its capital'",
        "4 relative clauses in one sentence (at most 2)",
    ]
    assert readability_problems("Which person was born in the 1890s in Sovaton?") == []


def test_the_quality_check_refuses_a_hard_question_saying_why():
    verdict = check_form(AUDIT_CENTRE, ["Nile"])
    assert not verdict["passed"]
    assert verdict["reason"] == "hard to read: a clause inside 'has ... as its capital'"
    assert verdict["hard_to_read"]


@pytest.mark.parametrize(
    "question, frame",
    [
        ("Which company was founded in 1934 and employs 40 people?", "which"),
        ("What company was founded in 1934 and employs 40 people?", "which"),
        ("What is the name of the company that was founded in 1934?", "what_name"),
        ("Who was born in 1934 and studied at X?", "who"),
        ("Which company, founded in 1934, employs 40 people?", "apposition"),
        ("Founded in 1934, which company employs 40 people?", "fronted"),
        ("With between 1,000 and 2,000 students, what university was founded in 1934?", "fronted"),
        ("A person studied at X. Which company did this person found?", "lead_in"),
        ("A company was founded in 1934. It employs 40 people. Which company is it?", "statements"),
        ("A person was born in 1934. This person studied at X. Who is this person?", "statements"),
    ],
)
def test_frames_are_told_apart_by_their_structure(question, frame):
    assert frame_of(question) == frame


# -- the realizer -----------------------------------------------------------------------------


def _person(rel: str, value: dict) -> dict:
    return query_node("person", [constraint(rel, "out", value)])


def chain_country() -> dict:
    """A river through a country whose capital is a long description (the audit's case)."""
    founder = query_node(
        "person", [constraint("founded_by", "in", entity_node("c1", "Ilk Works", "company"))]
    )
    worker = query_node(
        "person",
        [
            constraint(
                "worked_for",
                "out",
                query_node("company", [constraint("founded_by", "out", founder)]),
            )
        ],
    )
    city = query_node("city", [constraint("born_in", "in", worker)])
    country = query_node("country", [constraint("capital", "out", city)])
    return query_node(
        "river",
        [
            constraint("length_km", "out", range_node(40, None, "more than 40")),
            constraint("flows_through", "out", country),
        ],
    )


def test_a_long_capital_is_never_wrapped_in_has_as_its_capital():
    lf = chain_country()
    for style in range(200):
        q, _ = realize(lf, {}, style)
        assert centre_embedded(q) == [], q
        assert readability_problems(q) == [], q


def test_two_clauses_with_one_verb_share_it():
    lf = query_node(
        "person",
        [
            constraint("born", "out", range_node(1920, 1929, "the 1920s")),
            constraint("born_in", "out", entity_node("x1", "Dravon", "city")),
        ],
    )
    written = {realize(lf, {}, style)[0] for style in range(60)}
    assert any("was born in the 1920s in Dravon" in q for q in written), written
    assert not any(repeated_verbs(q) for q in written), written


def test_every_frame_is_drawn_and_each_reads_as_itself():
    lf = query_node(
        "person",
        [
            constraint("born", "out", literal_node(1934)),
            constraint(
                "educated_at",
                "out",
                query_node(
                    "university",
                    [
                        constraint(
                            "university_city",
                            "out",
                            query_node(
                                "city",
                                [
                                    constraint(
                                        "born_in", "in", entity_node("p9", "Ilk Vor", "person")
                                    )
                                ],
                            ),
                        )
                    ],
                ),
            ),
        ],
    )
    assert set(constructions_for(lf)) <= set(CONSTRUCTIONS)
    seen = {}
    for style in range(300):
        q, construction = realize(lf, {}, style)
        seen.setdefault(construction, q)
        assert frame_of(q) == construction, (construction, q)
        assert readability_problems(q) == [], q
    assert len(seen) >= 6, seen


def test_a_frame_is_only_drawn_when_its_cheapest_wording_fits_the_clause_limit():
    lf = chain_country()  # the worker "who worked for" opens a clause in every wording
    assert Realizer({}, random.Random(0), max_clauses=0).frames(lf) == {}
    fits = Realizer({}, random.Random(0), max_clauses=2).frames(lf)
    assert fits and all(max(needs) <= 2 for needs in fits.values())


# -- clauses that do work ---------------------------------------------------------------------

TYPES = {"e1": "event", "e2": "event", "e3": "event", "x1": "city", "x2": "city"}
TRIPLES = [
    ("e1", "held_in", "x1"), ("e1", "took_place", 1919),
    ("e2", "held_in", "x1"), ("e2", "took_place", 1917),
    ("e3", "held_in", "x2"), ("e3", "took_place", 1919),
]  # fmt: skip


@pytest.fixture
def index():
    return FactIndex(TRIPLES, TYPES)


def held(city: str) -> dict:
    return constraint("held_in", "out", entity_node(city, city, "city"))


def year(node: dict) -> dict:
    return constraint("took_place", "out", node)


def test_a_clause_the_answer_does_not_need_is_found(index):
    needed = query_node("event", [held("x1"), year(literal_node(1919))])
    assert droppable_clauses(needed, "e1", index) == []
    # x2 held one event only: the year does no work there
    idle = query_node("event", [held("x2"), year(literal_node(1919))])
    assert droppable_clauses(idle, "e3", index) == [(1,)]
    verdict = check_uniqueness(idle, "e3", index, clauses=True)
    assert not verdict["passed"] and verdict["droppable"] == ["took_place: 1919"]
    assert verdict["reason"] == "the answer stays unique without the clause took_place: 1919"
    assert check_uniqueness(needed, "e1", index, clauses=True)["passed"]


def test_a_blur_every_entity_fits_is_vacuous(index):
    wide = query_node("event", [held("x1"), year(range_node(1900, 1999, "the 20th century"))])
    tight = query_node("event", [held("x1"), year(range_node(1918, 1919, "the late 1910s"))])
    assert vacuous_blurs(wide, index) == [(1,)]
    assert vacuous_blurs(tight, index) == []


def test_a_seed_keeps_only_clauses_that_do_work_or_is_refused(index):
    where = [held("x1"), year(literal_node(1919))]
    support = [{"doc_id": "a"}, {"doc_id": "b"}]
    assert minimal_clauses("event", where, support, "e1", index) == (where, support)
    # the year alone is not enough and the place alone is unique: no seed with both kinds
    where = [held("x2"), year(literal_node(1919))]
    assert minimal_clauses("event", where, support, "e3", index) is None


def test_dropping_a_nested_clause_keeps_the_relation():
    lf = query_node(
        "event",
        [
            constraint(
                "held_in",
                "out",
                query_node(
                    "city", [constraint("located_in", "out", entity_node("k", "K", "country"))]
                ),
            )
        ],
    )
    assert clause_paths(lf) == [(0,), (0, 0)]
    assert drop_clause(lf, (0, 0)) == query_node(
        "event", [constraint("held_in", "out", query_node("city", []))]
    )
    assert drop_clause(lf, (0,)) == query_node("event", [])
