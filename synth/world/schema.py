"""What the world holds: entity types, relations, and the English templates for each relation.

Every relation has one template per use: the sentence that states a fact in the subject's
article (`sentence`), the sentence that mentions it in the object's article (`inverse`), and
the phrases a question uses to describe its answer through the relation: `out_vp`/`out_pp`
("was founded by {O}" / "founded by {O}") for the subject, `in_vp`/`in_noun`
("founded {S}" / "the founder of {S}") for the object. `{aO}` is the object with "a"/"an".
"""

from __future__ import annotations

import re
from dataclasses import dataclass

YEAR, NUMBER, LABEL = "year", "number", "label"


@dataclass(frozen=True)
class EntityType:
    """A kind of entity: its noun, its share of the world, and how its names are made."""

    key: str
    noun: str
    share: float
    names: tuple[str, ...]  # formats for NameGenerator.pattern, or "person"/"place"/"country"
    the: bool = False  # referred to as "the X" in running text
    minimum: int = 4


TYPES: dict[str, EntityType] = {
    t.key: t
    for t in (
        EntityType("country", "country", 0.012, ("country",), minimum=6),
        EntityType("city", "city", 0.12, ("place",), minimum=12),
        EntityType("person", "person", 0.33, ("person",), minimum=30),
        EntityType(
            "company",
            "company",
            0.08,
            ("{w} Holdings", "{w} Works", "{w} Group", "{w}corp", "{w} & {w2}"),
            minimum=8,
        ),
        EntityType(
            "university",
            "university",
            0.04,
            ("{w} Institute", "{w} College", "{w} University"),
            the=True,
            minimum=6,
        ),
        EntityType(
            "railway",
            "railway",
            0.03,
            ("{w} Railway", "{w} Line", "{w} Valley Railway"),
            the=True,
            minimum=4,
        ),
        EntityType("river", "river", 0.03, ("{w} River",), the=True, minimum=4),
        EntityType("mountain", "mountain", 0.03, ("Mount {w}", "{w} Peak", "{w}horn"), minimum=4),
        EntityType(
            "book",
            "book",
            0.1,
            (
                "The {w} Letters",
                "The House of {w}",
                "{w}",
                "A Winter in {w}",
                "The {w} Affair",
                "Songs of {w}",
            ),
            minimum=8,
        ),
        EntityType(
            "film",
            "film",
            0.08,
            ("{w}", "Return to {w}", "The {w} Road", "{w} Nights", "Beyond {w}"),
            minimum=8,
        ),
        EntityType(
            "band",
            "band",
            0.04,
            ("The {w} Ensemble", "{w} Collective", "{w} Quartet", "{w} Orchestra"),
            minimum=4,
        ),
        EntityType(
            "award", "award", 0.02, ("{w} Prize", "{w} Medal", "{w} Award"), the=True, minimum=4
        ),
        EntityType(
            "event",
            "event",
            0.05,
            ("{w} Festival", "{w} Summit", "{w} Regatta", "{w} Fair"),
            the=True,
            minimum=6,
        ),
    )
}


@dataclass(frozen=True)
class Relation:
    """A binary relation from `subjects` to `obj` (an entity type, YEAR, NUMBER or LABEL)."""

    key: str
    subjects: tuple[str, ...]
    obj: str
    sentence: str
    out_vp: str
    out_pp: str | None = None
    inverse: str | None = None
    in_vp: str | None = None
    in_noun: str | None = None
    unit: str = (
        ""  # plural noun a number counts: "people", "students" ("fewer than" vs "less than")
    )
    label_mode: str = ""  # LABEL relations: "adj" ("a shipping company") or "noun" ("an architect")
    functional_in: bool = True  # each object has one subject for this relation (for "the X of")

    @property
    def is_entity(self) -> bool:
        """Whether the object is an entity (not a year, number or label)."""
        return self.obj in TYPES


def _r(*args: object, **kwargs: object) -> Relation:
    return Relation(*args, **kwargs)  # type: ignore[arg-type]


RELATIONS: dict[str, Relation] = {
    r.key: r
    for r in (
        # -- labels: what kind of thing the subject is ---------------------------------------
        _r("occupation", ("person",), LABEL, "{S} was {aO}.", "was {aO}", label_mode="noun"),
        _r(
            "industry",
            ("company",),
            LABEL,
            "{S} is {aO} company.",
            "is {aO} company",
            label_mode="adj",
        ),
        _r(
            "railway_kind",
            ("railway",),
            LABEL,
            "{S} is {aO} railway.",
            "is {aO} railway",
            label_mode="adj",
        ),
        _r("book_genre", ("book",), LABEL, "{S} is {aO}.", "is {aO}", label_mode="noun"),
        _r("film_genre", ("film",), LABEL, "{S} is {aO} film.", "is {aO} film", label_mode="adj"),
        _r("band_genre", ("band",), LABEL, "{S} is {aO} band.", "is {aO} band", label_mode="adj"),
        _r(
            "award_field",
            ("award",),
            LABEL,
            "{S} is {aO} award.",
            "is {aO} award",
            label_mode="adj",
        ),
        _r("event_kind", ("event",), LABEL, "{S} is {aO}.", "is {aO}", label_mode="noun"),
        # -- places --------------------------------------------------------------------------
        _r(
            "located_in",
            ("city", "mountain", "railway"),
            "country",
            "{S} is {aN} in {O}.",
            "is in {O}",
            "in {O}",
            "{S} is {aN} in {O}.",
            "contains {S}",
            "the country where {S} lies",
            functional_in=False,
        ),
        _r(
            "capital",
            ("country",),
            "city",
            "The capital of {S} is {O}.",
            "has {O} as its capital",
            "whose capital is {O}",
            "{O} is the capital of {S}.",
            "is the capital of {S}",
            "the capital of {S}",
        ),
        _r(
            "university_city",
            ("university",),
            "city",
            "{S} is a university in {O}.",
            "is in {O}",
            "in {O}",
            "{S} is a university in {O}.",
            "is home to {S}",
            "the city where {S} stands",
            functional_in=False,
        ),
        _r(
            "born_in",
            ("person",),
            "city",
            "{S} was born in {O}.",
            "was born in {O}",
            "born in {O}",
            "{S} was born in {O}.",
            "is the birthplace of {S}",
            "the birthplace of {S}",
            functional_in=False,
        ),
        _r(
            "educated_at",
            ("person",),
            "university",
            "{S} studied at {O}.",
            "studied at {O}",
            None,
            "{S} studied at {O}.",
            "was attended by {S}",
            "the university where {S} studied",
            functional_in=False,
        ),
        _r(
            "headquartered_in",
            ("company",),
            "city",
            "{S} is headquartered in {O}.",
            "is headquartered in {O}",
            "headquartered in {O}",
            "{S} is headquartered in {O}.",
            "hosts the headquarters of {S}",
            "the city where {S} is headquartered",
            functional_in=False,
        ),
        _r(
            "formed_in",
            ("band",),
            "city",
            "{S} was formed in the city of {O}.",
            "was formed in {O}",
            "formed in {O}",
            "{S} was formed in the city of {O}.",
            "is the home city of {S}",
            "the city where {S} was formed",
            functional_in=False,
        ),
        _r(
            "held_in",
            ("event",),
            "city",
            "{S} was held in {O}.",
            "was held in {O}",
            "held in {O}",
            "{S} was held in {O}.",
            "hosted {S}",
            "the city that hosted {S}",
            functional_in=False,
        ),
        _r(
            "terminates_in",
            ("railway",),
            "city",
            "{S} terminates in {O}.",
            "terminates in {O}",
            "terminating in {O}",
            "{S} terminates in {O}.",
            "is the terminus of {S}",
            "the terminus of {S}",
            functional_in=False,
        ),
        _r(
            "flows_through",
            ("river",),
            "country",
            "{S} flows through {O}.",
            "flows through {O}",
            "flowing through {O}",
            "{S} flows through {O}.",
            "is crossed by {S}",
            None,
            functional_in=False,
        ),
        _r(
            "rises_on",
            ("river",),
            "mountain",
            "{S} rises on the slopes of {O}.",
            "rises on {O}",
            "rising on {O}",
            "{S} rises on the slopes of {O}.",
            "is the source of {S}",
            "the mountain where {S} rises",
            functional_in=False,
        ),
        # -- people and works ----------------------------------------------------------------
        _r(
            "founded_by",
            ("company", "university", "band"),
            "person",
            "{S} was founded by {O}.",
            "was founded by {O}",
            "founded by {O}",
            "{O} founded {S}.",
            "founded {S}",
            "the founder of {S}",
            functional_in=False,
        ),
        _r(
            "written_by",
            ("book",),
            "person",
            "{S} was written by {O}.",
            "was written by {O}",
            "written by {O}",
            "{O} wrote {S}.",
            "wrote {S}",
            "the author of {S}",
            functional_in=False,
        ),
        _r(
            "directed_by",
            ("film",),
            "person",
            "{S} was directed by {O}.",
            "was directed by {O}",
            "directed by {O}",
            "{O} directed {S}.",
            "directed {S}",
            "the director of {S}",
            functional_in=False,
        ),
        _r(
            "based_on",
            ("film",),
            "book",
            "{S} is based on {O}.",
            "is based on {O}",
            "based on {O}",
            "{O} was adapted into the film {S}.",
            "was adapted into {S}",
            "the book on which {S} is based",
            functional_in=False,
        ),
        _r(
            "set_in",
            ("book",),
            "city",
            "{S} is set in {O}.",
            "is set in {O}",
            "set in {O}",
            "{S} is set in {O}.",
            "is the setting of {S}",
            "the city where {S} is set",
            functional_in=False,
        ),
        _r(
            "published_by",
            ("book",),
            "company",
            "{S} was published by {O}.",
            "was published by {O}",
            "published by {O}",
            "{O} published {S}.",
            "published {S}",
            "the publisher of {S}",
            functional_in=False,
        ),
        _r(
            "filmed_in",
            ("film",),
            "city",
            "{S} was filmed in {O}.",
            "was filmed in {O}",
            "filmed in {O}",
            "{S} was filmed in {O}.",
            "is where {S} was filmed",
            "the city where {S} was filmed",
            functional_in=False,
        ),
        _r(
            "starring",
            ("film",),
            "person",
            "{S} stars {O}.",
            "stars {O}",
            "starring {O}",
            "{O} starred in {S}.",
            "starred in {S}",
            None,
            functional_in=False,
        ),
        _r(
            "first_climbed_by",
            ("mountain",),
            "person",
            "{S} was first climbed by {O}.",
            "was first climbed by {O}",
            "first climbed by {O}",
            "{O} made the first ascent of {S}.",
            "made the first ascent of {S}",
            "the first person to climb {S}",
            functional_in=False,
        ),
        _r(
            "organised_by",
            ("event",),
            "company",
            "{S} was organised by {O}.",
            "was organised by {O}",
            "organised by {O}",
            "{O} organised {S}.",
            "organised {S}",
            "the organiser of {S}",
            functional_in=False,
        ),
        _r(
            "presented_by",
            ("award",),
            "university",
            "{S} is presented by {O}.",
            "is presented by {O}",
            "presented by {O}",
            "{O} presents {S}.",
            "presents {S}",
            "the institution that presents {S}",
            functional_in=False,
        ),
        _r(
            "worked_for",
            ("person",),
            "company",
            "{S} worked for {O}.",
            "worked for {O}",
            None,
            "{S} worked for {O}.",
            "employed {S}",
            "the company that {S} worked for",
            functional_in=False,
        ),
        _r(
            "member_of",
            ("person",),
            "band",
            "{S} was a member of {O}.",
            "was a member of {O}",
            None,
            "{S} was a member of {O}.",
            "counted among its members {S}",
            "the band that {S} played in",
            functional_in=False,
        ),
        _r(
            "received",
            ("person",),
            "award",
            "{S} received {O}.",
            "received {O}",
            None,
            "{S} received {O}.",
            "was awarded to {S}",
            "the award that {S} received",
            functional_in=False,
        ),
        # -- years ---------------------------------------------------------------------------
        _r(
            "independence",
            ("country",),
            YEAR,
            "{S} became independent in {O}.",
            "became independent in {O}",
        ),
        _r(
            "founded",
            ("city", "company", "university"),
            YEAR,
            "{S} was founded in {O}.",
            "was founded in {O}",
            "founded in {O}",
        ),
        _r("born", ("person",), YEAR, "{S} was born in {O}.", "was born in {O}", "born in {O}"),
        _r("opened", ("railway",), YEAR, "{S} opened in {O}.", "opened in {O}", "opened in {O}"),
        _r(
            "published",
            ("book",),
            YEAR,
            "{S} was published in {O}.",
            "was published in {O}",
            "published in {O}",
        ),
        _r(
            "released",
            ("film",),
            YEAR,
            "{S} was released in {O}.",
            "was released in {O}",
            "released in {O}",
        ),
        _r(
            "formed",
            ("band",),
            YEAR,
            "{S} was formed in {O}.",
            "was formed in {O}",
            "formed in {O}",
        ),
        _r(
            "established",
            ("award",),
            YEAR,
            "{S} was established in {O}.",
            "was established in {O}",
            "established in {O}",
        ),
        _r("took_place", ("event",), YEAR, "{S} took place in {O}.", "took place in {O}", None),
        _r(
            "first_ascent",
            ("mountain",),
            YEAR,
            "{S} was first climbed in {O}.",
            "was first climbed in {O}",
            "first climbed in {O}",
        ),
        # -- numbers -------------------------------------------------------------------------
        _r(
            "population",
            ("country", "city"),
            NUMBER,
            "{S} has a population of {O}.",
            "has a population of {O}",
            "with a population of {O}",
            unit="people",
        ),
        _r(
            "employees",
            ("company",),
            NUMBER,
            "{S} employs {O} people.",
            "employs {O} people",
            "with {O} employees",
            unit="people",
        ),
        _r(
            "students",
            ("university",),
            NUMBER,
            "{S} has {O} students.",
            "has {O} students",
            "with {O} students",
            unit="students",
        ),
        _r(
            "length_km",
            ("railway", "river"),
            NUMBER,
            "{S} is {O} kilometres long.",
            "is {O} kilometres long",
            "{O} kilometres long",
        ),
        _r(
            "elevation_m",
            ("mountain",),
            NUMBER,
            "{S} rises to {O} metres.",
            "rises to {O} metres",
            "rising to {O} metres",
        ),
        _r(
            "pages",
            ("book",),
            NUMBER,
            "{S} has {O} pages.",
            "has {O} pages",
            "with {O} pages",
            unit="pages",
        ),
        _r(
            "runtime_min",
            ("film",),
            NUMBER,
            "{S} runs for {O} minutes.",
            "runs for {O} minutes",
            "running for {O} minutes",
        ),
    )
}

LABELS: dict[str, tuple[str, ...]] = {
    "occupation": (
        "architect",
        "painter",
        "engineer",
        "novelist",
        "film director",
        "composer",
        "physicist",
        "actor",
        "chemist",
        "politician",
        "sculptor",
        "economist",
        "botanist",
        "photographer",
        "poet",
        "historian",
        "mountaineer",
        "banker",
        "journalist",
    ),
    "industry": (
        "shipping",
        "brewing",
        "software",
        "mining",
        "textile",
        "aviation",
        "publishing",
        "insurance",
        "steel",
        "pharmaceutical",
        "telecommunications",
        "food",
    ),
    "railway_kind": (
        "mountain",
        "narrow-gauge",
        "heritage",
        "funicular",
        "high-speed",
        "light",
        "freight",
    ),
    "book_genre": (
        "novel",
        "poetry collection",
        "memoir",
        "travel book",
        "history book",
        "short story collection",
        "biography",
    ),
    "film_genre": (
        "documentary",
        "comedy",
        "drama",
        "crime",
        "war",
        "science-fiction",
        "animated",
        "musical",
    ),
    "band_genre": ("jazz", "punk", "folk", "rock", "electronic", "brass", "choral"),
    "award_field": (
        "literature",
        "physics",
        "architecture",
        "music",
        "film",
        "engineering",
        "journalism",
    ),
    "event_kind": (
        "music festival",
        "trade fair",
        "chess tournament",
        "film festival",
        "marathon",
        "peace conference",
        "art exhibition",
        "science congress",
    ),
}

#: year and number ranges per relation: (low, high)
RANGES: dict[str, tuple[int, int]] = {
    "independence": (1780, 1995),
    "founded": (1820, 2010),
    "born": (1840, 1995),
    "opened": (1850, 2015),
    "published": (1850, 2022),
    "released": (1925, 2023),
    "formed": (1950, 2020),
    "established": (1880, 2015),
    "took_place": (1900, 2023),
    "first_ascent": (1830, 1990),
    "population": (20_000, 9_000_000),
    "employees": (40, 250_000),
    "students": (800, 60_000),
    "length_km": (8, 2_400),
    "elevation_m": (900, 8_200),
    "pages": (90, 1_100),
    "runtime_min": (72, 210),
}

#: occupations a person needs to hold a role (authors write, directors direct, ...)
ROLE_OCCUPATIONS: dict[str, tuple[str, ...]] = {
    "written_by": ("novelist", "poet", "historian", "journalist"),
    "directed_by": ("film director",),
    "first_climbed_by": ("mountaineer",),
    "starring": ("actor",),
}


def article(word: str) -> str:
    """'a' or 'an' for the word that follows."""
    w = word.lower()
    if w.startswith(("uni", "use", "eu", "one")):
        return "a"
    return "an" if w[:1] in "aeiou" else "a"


def with_article(phrase: str) -> str:
    """The phrase with 'a'/'an' in front."""
    return f"{article(phrase)} {phrase}"


def format_number(n: int) -> str:
    """An integer with thousands separators (40000 -> '40,000')."""
    return f"{n:,}"


def _name_words() -> frozenset[str]:
    words: set[str] = set()
    for t in TYPES.values():
        for fmt in t.names:
            words |= {w.lower() for w in re.findall(r"[A-Za-z]+", re.sub(r"\{\w+\}", " ", fmt))}
    return frozenset(words | {"the", "a", "an", "of", "in", "and"})


#: words every name of some type shares ("Institute", "River", "Festival"): they match hundreds
#: of articles, so a searcher leaves them out of a query for one name
NAME_WORDS = _name_words()


def search_key(name: str) -> str:
    """The distinctive words of a name, as a searcher would type them ("Kelvar Institute" -> "Kelvar")."""
    words = [w for w in name.split() if w.lower().strip("&") not in NAME_WORDS and w != "&"]
    return " ".join(words) or name
