"""A procedural world: a seeded fictional encyclopedia of entities, facts and articles.

world = build_world(size=10_000, seed=0)
world.write_corpus("corpus.jsonl")      # {id, title, text, url} per line
world.facts[0].mentions                 # [(doc_id, sentence), ...] stating the fact
"""

from gemkit.synth.world.generate import MIN_SIZE, build_world
from gemkit.synth.world.schema import RELATIONS, TYPES, Relation
from gemkit.synth.world.world import Entity, Fact, World, split_sentences

__all__ = [
    "MIN_SIZE",
    "RELATIONS",
    "TYPES",
    "Entity",
    "Fact",
    "Relation",
    "World",
    "build_world",
    "split_sentences",
]
