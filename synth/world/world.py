"""The world: entities, facts with the sentences that state them, articles, and fact indexes."""

from __future__ import annotations

import json
import os
import re
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from gemkit.synth.world.schema import (
    LABEL,
    NUMBER,
    RELATIONS,
    TYPES,
    YEAR,
    format_number,
    with_article,
)

T = TypeVar("T")

URL_ROOT = "https://world.gemkit.invalid"
_SENTENCE_SPLIT = re.compile(r"(?<=[.!?])\s+")

_A_NOUN = {k: with_article(t.noun) for k, t in TYPES.items()}
Value = str | int  # an entity id, a year or number, or a label


@dataclass(slots=True)
class Entity:
    """A named thing of the world; `ref` is how running text refers to it ("the X River")."""

    id: str
    type: str
    name: str
    ref: str
    popularity: float = 0.0

    @property
    def aliases(self) -> list[str]:
        """Every surface form that names this entity."""
        return [self.name] if self.ref == self.name else [self.name, self.ref]


@dataclass(slots=True)
class Fact:
    """A triple `(subject, relation, object)` and every `(doc_id, sentence)` that states it."""

    index: int
    subject: str
    relation: str
    object: Value
    mentions: list[tuple[str, str]] = field(default_factory=list)

    @property
    def doc_id(self) -> str:
        """The doc of the first mention (the subject's article)."""
        return self.mentions[0][0]

    @property
    def sentence(self) -> str:
        """The sentence of the first mention."""
        return self.mentions[0][1]


def split_sentences(text: str) -> list[str]:
    """Split article text into sentences (the world's sentences hold no inner full stop)."""
    return [s.strip() for s in _SENTENCE_SPLIT.split(text.replace("\n", " ")) if s.strip()]


def slug(name: str) -> str:
    """A URL-safe form of a name."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


class World:
    """Entities, facts and the rendered corpus, with the lookups the QA agent needs."""

    def __init__(
        self,
        entities: list[Entity],
        triples: Iterable[tuple[str, str, Value]],
        *,
        seed: int = 0,
        intros: dict[str, str] | None = None,
    ):
        self.seed = seed
        self.entities = {e.id: e for e in entities}
        self.by_type: dict[str, list[str]] = defaultdict(list)
        for e in entities:
            self.by_type[e.type].append(e.id)
        self.facts: list[Fact] = [Fact(i, s, r, o) for i, (s, r, o) in enumerate(triples)]
        self.by_subject: dict[str, list[int]] = defaultdict(list)
        self.by_object: dict[str, list[int]] = defaultdict(list)
        self.by_relation: dict[str, list[int]] = defaultdict(list)
        for f in self.facts:
            self.by_subject[f.subject].append(f.index)
            self.by_relation[f.relation].append(f.index)
            if RELATIONS[f.relation].is_entity:
                self.by_object[f.object].append(f.index)  # type: ignore[index]
        self.docs = self._render(intros or {})
        self.sentence_facts: dict[tuple[str, str], list[int]] = defaultdict(list)
        for f in self.facts:
            for m in f.mentions:
                self.sentence_facts[m].append(f.index)
        by_name: dict[str, str] = {}
        for e in entities:
            by_name.setdefault(e.name.lower(), e.id)
        self.by_name = by_name
        for e in entities:
            e.popularity = len(self.by_subject[e.id]) + 2 * len(self.by_object[e.id])
        self._derived: dict[str, Any] = {}

    def derived(self, key: str, build: Callable[[World], T]) -> T:
        """A lookup built from this world once (`build(world)`) and kept under `key`."""
        if key not in self._derived:
            self._derived[key] = build(self)
        return self._derived[key]

    # -- rendering -------------------------------------------------------------------------------

    def render_value(self, relation: str, value: Value) -> str:
        """How a fact's object reads in a sentence."""
        kind = RELATIONS[relation].obj
        if kind == YEAR:
            return str(value)
        if kind == NUMBER:
            return format_number(int(value))
        if kind == LABEL:
            return str(value)
        return self.entities[str(value)].ref

    def fact_sentence(self, fact: Fact, inverse: bool = False) -> str:
        """The sentence stating `fact` in the subject's article (or the object's, `inverse`)."""
        rel = RELATIONS[fact.relation]
        subj = self.entities[fact.subject]
        template = rel.inverse if inverse and rel.inverse else rel.sentence
        if "{aO}" in template:
            text = template.format(S=subj.ref, aO=with_article(str(fact.object)))
        elif "{aN}" in template:
            text = template.format(
                S=subj.ref, O=self.render_value(fact.relation, fact.object), aN=_A_NOUN[subj.type]
            )
        else:
            text = template.format(S=subj.ref, O=self.render_value(fact.relation, fact.object))
        return text[:1].upper() + text[1:]

    def _render(self, intros: dict[str, str]) -> list[dict[str, str]]:
        own: dict[str, list[str]] = defaultdict(list)
        mentioned: dict[str, list[str]] = defaultdict(list)
        for f in self.facts:
            sentence = self.fact_sentence(f)
            own[f.subject].append(sentence)
            f.mentions.append((f.subject, sentence))
            rel = RELATIONS[f.relation]
            if rel.is_entity and rel.inverse:
                inverse = self.fact_sentence(f, inverse=True)
                mentioned[str(f.object)].append(inverse)
                f.mentions.append((str(f.object), inverse))
        docs = []
        for e in self.entities.values():
            lead = ([intros[e.id]] if e.id in intros else []) + own[e.id]
            paragraphs = [" ".join(lead)]
            if mentioned[e.id]:
                paragraphs.append(" ".join(mentioned[e.id]))
            docs.append(
                {
                    "id": e.id,
                    "title": e.name,
                    "text": "\n\n".join(p for p in paragraphs if p),
                    "url": f"{URL_ROOT}/{e.type}/{slug(e.name)}",
                }
            )
        return docs

    # -- lookups ---------------------------------------------------------------------------------

    def entity(self, entity_id: str) -> Entity:
        """The entity with this id."""
        return self.entities[entity_id]

    def facts_about(self, entity_id: str) -> list[Fact]:
        """Facts with the entity as subject or (entity-valued) object."""
        idx = self.by_subject.get(entity_id, []) + self.by_object.get(entity_id, [])
        return [self.facts[i] for i in idx]

    def objects(self, subject: str, relation: str) -> list[Value]:
        """Objects of `(subject, relation, ?)`."""
        return [
            self.facts[i].object
            for i in self.by_subject.get(subject, ())
            if self.facts[i].relation == relation
        ]

    def facts_in(self, doc_id: str, sentence: str) -> list[Fact]:
        """The facts a sentence of a doc states (none for a sentence the world did not write)."""
        return [self.facts[i] for i in self.sentence_facts.get((doc_id, sentence), ())]

    def doc(self, doc_id: str) -> dict[str, str]:
        """The article with this id."""
        return self.docs_by_id[doc_id]

    @property
    def docs_by_id(self) -> dict[str, dict[str, str]]:
        """Articles by id (built on first use)."""
        cached = getattr(self, "_docs_by_id", None)
        if cached is None:
            cached = {d["id"]: d for d in self.docs}
            self._docs_by_id = cached
        return cached

    def stats(self) -> dict[str, Any]:
        """Counts of entities per type, facts and docs."""
        return {
            "entities": len(self.entities),
            "facts": len(self.facts),
            "docs": len(self.docs),
            "types": {t: len(ids) for t, ids in sorted(self.by_type.items())},
        }

    def write_corpus(self, path: str | os.PathLike[str]) -> Path:
        """Write the articles as `{id, title, text, url}` JSONL (atomically) and return the path."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        with tmp.open("w", encoding="utf-8") as f:
            for d in self.docs:
                f.write(json.dumps(d, ensure_ascii=False) + "\n")
        os.replace(tmp, path)
        return path
