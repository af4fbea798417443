"""Build a world from a size and a seed: same arguments, same world, in any process."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from gemkit.errors import GemkitError
from gemkit.synth.world.names import Dice, NameGenerator
from gemkit.synth.world.schema import LABELS, RANGES, ROLE_OCCUPATIONS, TYPES
from gemkit.synth.world.world import Entity, Value, World

#: smallest world the generator accepts (below it some types would be empty)
MIN_SIZE = 150
#: year ranges of types whose `founded` differs from companies'
CITY_FOUNDED = (1050, 1900)
COUNTRY_POPULATION = (400_000, 90_000_000)
LAST_YEAR = 2024


def _counts(size: int) -> dict[str, int]:
    counts = {k: max(t.minimum, round(size * t.share)) for k, t in TYPES.items()}
    # people absorb the rounding, so the world has exactly `size` entities
    counts["person"] += size - sum(counts.values())
    if counts["person"] < TYPES["person"].minimum:
        raise GemkitError(f"world size {size} is too small; use at least {MIN_SIZE}")
    return counts


def _name(gen: NameGenerator, kind: str) -> str:
    t = TYPES[kind]
    fmt = t.names[gen.dice.below(len(t.names))]
    if fmt == "person":
        return gen.person()
    if fmt == "place":
        return gen.place()
    if fmt == "country":
        return gen.country()
    return gen.pattern(fmt)


class _Builder:
    def __init__(self, size: int, seed: int):
        self.rng = Dice(np.random.default_rng([seed, 0x51A7]))
        self.names = NameGenerator(self.rng)
        self.entities: list[Entity] = []
        self.ids: dict[str, list[str]] = {}
        self.triples: list[tuple[str, str, Value]] = []
        self.attr: dict[tuple[str, str], Value] = {}
        self.weights: dict[str, np.ndarray] = {}
        n = 0
        for kind, count in _counts(size).items():
            ids = []
            for _ in range(count):
                name = _name(self.names, kind)
                ref = f"the {name}" if TYPES[kind].the and not name.startswith("The ") else name
                ids.append(f"e{n}")
                self.entities.append(Entity(f"e{n}", kind, name, ref))
                n += 1
            self.ids[kind] = ids
            # Zipf-like popularity: some entities are linked far more often than others,
            # which gives the closed-book baselines a real prior to guess from.
            w = 1.0 / (np.arange(count) + 10.0) ** 0.7
            self.weights[kind] = np.cumsum(w / w.sum())

    def add(self, s: str, r: str, o: Value) -> None:
        self.triples.append((s, r, o))
        self.attr.setdefault((s, r), o)

    def pick(self, kind: str, among: list[str] | None = None) -> str:
        if among:
            return among[self.rng.below(len(among))]
        ids = self.ids[kind]
        i = int(np.searchsorted(self.weights[kind], self.rng.random(), side="right"))
        return ids[min(i, len(ids) - 1)]

    def year(self, rel: str, lo: int | None = None) -> int:
        a, b = RANGES[rel]
        a = max(a, lo) if lo is not None else a
        return self.rng.between(min(a, LAST_YEAR - 1), max(min(b, LAST_YEAR), a + 1) + 1)

    def number(self, rel: str, lo: int | None = None, hi: int | None = None) -> int:
        a, b = (lo, hi) if lo is not None and hi is not None else RANGES[rel]
        # log-uniform: populations and lengths span orders of magnitude
        la, lb = math.log(a), math.log(b)
        return int(round(math.exp(la + (lb - la) * self.rng.random())))

    def label(self, rel: str) -> str:
        options = LABELS[rel]
        return options[self.rng.below(len(options))]

    def chance(self, p: float) -> bool:
        return bool(self.rng.random() < p)

    def build(self) -> tuple[list[Entity], list[tuple[str, str, Value]], dict[str, str]]:
        ids, rng = self.ids, self.rng
        intros: dict[str, str] = {}
        cities_of: dict[str, list[str]] = {c: [] for c in ids["country"]}
        for c in ids["country"]:
            intros[c] = f"{self.entities[int(c[1:])].name} is a country."
        for city in ids["city"]:
            country = self.pick("country")
            cities_of[country].append(city)
            self.add(city, "located_in", country)
            self.add(city, "founded", rng.between(*CITY_FOUNDED))
            self.add(city, "population", self.number("population"))
        for c in ids["country"]:
            capital = cities_of[c][0] if cities_of[c] else self.pick("city")
            self.add(c, "capital", capital)
            self.add(c, "independence", self.year("independence"))
            self.add(c, "population", self.number("population", *COUNTRY_POPULATION))
        born: dict[str, int] = {}
        occupation_of: dict[str, list[str]] = {}
        for p in ids["person"]:
            occ = self.label("occupation")
            occupation_of.setdefault(occ, []).append(p)
            self.add(p, "occupation", occ)
            born[p] = self.year("born")
            self.add(p, "born", born[p])
            self.add(p, "born_in", self.pick("city"))
        for u in ids["university"]:
            self.add(u, "university_city", self.pick("city"))
            year = self.year("founded")
            if self.chance(0.5):
                founder = self.pick("person")
                year = min(LAST_YEAR, born[founder] + rng.between(28, 60))
                self.add(u, "founded_by", founder)
            self.add(u, "founded", year)
            self.add(u, "students", self.number("students"))
        for p in ids["person"]:
            if self.chance(0.8):
                self.add(p, "educated_at", self.pick("university"))
        for a in ids["award"]:
            self.add(a, "award_field", self.label("award_field"))
            self.add(a, "established", self.year("established"))
            self.add(a, "presented_by", self.pick("university"))
        for p in ids["person"]:
            if self.chance(0.25):
                self.add(p, "received", self.pick("award"))
        for co in ids["company"]:
            founder = self.pick("person")
            self.add(co, "industry", self.label("industry"))
            self.add(co, "founded", min(LAST_YEAR, born[founder] + rng.between(24, 58)))
            self.add(co, "founded_by", founder)
            self.add(co, "headquartered_in", self.pick("city"))
            self.add(co, "employees", self.number("employees"))
        for p in ids["person"]:
            if self.chance(0.45):
                self.add(p, "worked_for", self.pick("company"))
            if self.chance(0.12):
                self.add(p, "member_of", self.pick("band"))
        for m in ids["mountain"]:
            country = self.pick("country")
            self.add(m, "located_in", country)
            self.add(m, "elevation_m", self.number("elevation_m"))
            climbers = occupation_of.get("mountaineer", [])
            if climbers and self.chance(0.7):
                who = self.pick("person", climbers)
                self.add(m, "first_climbed_by", who)
                self.add(m, "first_ascent", min(LAST_YEAR, born[who] + rng.between(19, 45)))
            else:
                self.add(m, "first_ascent", self.year("first_ascent"))
        for r in ids["river"]:
            countries = {self.pick("country") for _ in range(rng.between(1, 3))}
            for c in sorted(countries):
                self.add(r, "flows_through", c)
            if self.chance(0.6):
                self.add(r, "rises_on", self.pick("mountain"))
            self.add(r, "length_km", self.number("length_km"))
        for rw in ids["railway"]:
            country = self.pick("country")
            self.add(rw, "railway_kind", self.label("railway_kind"))
            self.add(rw, "located_in", country)
            self.add(rw, "terminates_in", self.pick("city", cities_of[country]))
            self.add(rw, "opened", self.year("opened"))
            self.add(rw, "length_km", self.number("length_km", 3, 900))
        for b in ids["book"]:
            author = self.pick("person", self._role("written_by", occupation_of))
            self.add(b, "book_genre", self.label("book_genre"))
            self.add(b, "written_by", author)
            self.add(b, "published", min(LAST_YEAR, born[author] + rng.between(22, 70)))
            self.add(b, "pages", self.number("pages"))
            if self.chance(0.6):
                self.add(b, "set_in", self.pick("city"))
            if self.chance(0.5):
                self.add(b, "published_by", self.pick("company"))
        for f in ids["film"]:
            director = self.pick("person", self._role("directed_by", occupation_of))
            self.add(f, "film_genre", self.label("film_genre"))
            self.add(f, "directed_by", director)
            year = min(LAST_YEAR, max(1925, born[director] + rng.between(24, 65)))
            self.add(f, "released", year)
            if self.chance(0.3):
                book = self.pick("book")
                if int(self.attr[(book, "published")]) < year:
                    self.add(f, "based_on", book)
            self.add(f, "runtime_min", self.number("runtime_min"))
            if self.chance(0.6):
                self.add(f, "filmed_in", self.pick("city"))
            actors = self._role("starring", occupation_of)
            if actors:
                for who in sorted({self.pick("person", actors) for _ in range(rng.between(1, 3))}):
                    self.add(f, "starring", who)
        for b in ids["band"]:
            self.add(b, "band_genre", self.label("band_genre"))
            self.add(b, "formed_in", self.pick("city"))
            year = self.year("formed")
            if self.chance(0.5):
                founder = self.pick("person")
                year = min(LAST_YEAR, max(year, born[founder] + 17))
                self.add(b, "founded_by", founder)
            self.add(b, "formed", year)
        for ev in ids["event"]:
            self.add(ev, "event_kind", self.label("event_kind"))
            self.add(ev, "held_in", self.pick("city"))
            self.add(ev, "took_place", self.year("took_place"))
            if self.chance(0.5):
                self.add(ev, "organised_by", self.pick("company"))
        return self.entities, self.triples, intros

    def _role(self, relation: str, occupation_of: dict[str, list[str]]) -> list[str]:
        pool: list[str] = []
        for occ in ROLE_OCCUPATIONS[relation]:
            pool += occupation_of.get(occ, [])
        return pool


def build_world(size: int = 10_000, seed: int = 0) -> World:
    """A fictional encyclopedia of `size` entities; the same `(size, seed)` gives the same world."""
    if not isinstance(size, int) or size < MIN_SIZE:
        raise GemkitError(f"world size must be an integer >= {MIN_SIZE}, got {size!r}")
    entities, triples, intros = _Builder(size, seed).build()
    return World(entities, triples, seed=seed, intros=intros)


def describe(world: World) -> dict[str, Any]:
    """A short summary of a world for logs and the CLI."""
    return world.stats()
