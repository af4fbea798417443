"""The procedural world: deterministic, unique names, every fact stated in its article."""

from __future__ import annotations

import json

import pytest

from gemkit.errors import GemkitError
from gemkit.synth.world import RELATIONS, TYPES, build_world, split_sentences


@pytest.fixture(scope="module")
def world():
    return build_world(600, seed=7)


def test_same_size_and_seed_give_the_same_world(world):
    again = build_world(600, seed=7)
    assert again.docs == world.docs
    assert [(f.subject, f.relation, f.object) for f in again.facts] == [
        (f.subject, f.relation, f.object) for f in world.facts
    ]


def test_another_seed_gives_another_world(world):
    other = build_world(600, seed=8)
    assert {e.name for e in other.entities.values()} != {e.name for e in world.entities.values()}


def test_world_has_the_requested_size_and_every_type(world):
    assert len(world.entities) == 600
    assert set(world.by_type) == set(TYPES)


def test_entity_names_are_unique(world):
    names = [e.name for e in world.entities.values()]
    assert len(names) == len(set(names))


def test_every_fact_sentence_appears_in_the_doc_it_cites(world):
    for fact in world.facts:
        for doc_id, sentence in fact.mentions:
            assert sentence in split_sentences(world.doc(doc_id)["text"])


def test_sentences_map_back_to_their_facts(world):
    fact = next(f for f in world.facts if f.relation == "founded_by")
    for doc_id, sentence in fact.mentions:
        assert fact in world.facts_in(doc_id, sentence)
    assert world.facts_in(fact.doc_id, "A sentence the world never wrote.") == []


def test_entity_facts_are_mentioned_in_both_articles(world):
    fact = next(f for f in world.facts if f.relation == "written_by")
    docs = {doc_id for doc_id, _ in fact.mentions}
    assert docs == {fact.subject, fact.object}


def test_facts_respect_the_relation_schema(world):
    for f in world.facts:
        rel = RELATIONS[f.relation]
        assert world.entity(f.subject).type in rel.subjects
        if rel.is_entity:
            assert world.entity(f.object).type == rel.obj


def test_corpus_is_jsonl_with_id_title_text_url(world, tmp_path):
    path = world.write_corpus(tmp_path / "corpus.jsonl")
    lines = path.read_text().splitlines()
    assert len(lines) == len(world.entities)
    doc = json.loads(lines[0])
    assert set(doc) == {"id", "title", "text", "url"}
    assert doc["url"].startswith("https://")


def test_too_small_a_world_is_refused_with_the_minimum():
    with pytest.raises(GemkitError, match="at least|>="):
        build_world(10)


def test_articles_read_as_english_sentences(world):
    company = world.entity(world.by_type["company"][0])
    text = world.doc(company.id)["text"]
    assert text.startswith(f"{company.name} is a")
    assert all(s.endswith(".") and s[0].isupper() for s in split_sentences(text))
