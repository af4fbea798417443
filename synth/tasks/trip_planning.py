"""Trip planning: a multi-day trip through cities with hotels, restaurants and attractions.

The published example at level 2: a 3-day trip from a start city, nothing repeated, every
item in its day's city, and day-2 rules that depend on the hotel's price tier. Hardening adds
weather, inter-city transport budgets, cuisine variety, ratings, ticket caps, daily budgets,
metro access, tier rules on every day, tighter tiers and more days.
"""

from __future__ import annotations

import copy
import datetime as dt
import re
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from gemkit.synth.tasks import trip_planning_solution as rules
from gemkit.synth.tasks.base import (
    STRUCTURE,
    Category,
    Database,
    Task,
    Verdict,
    parse_json_answer,
)

CITY_NAMES = [
    "Lisbon", "Porto", "Seville", "Valencia", "Lyon", "Marseille", "Geneva", "Turin",
    "Bologna", "Florence", "Naples", "Ljubljana", "Zagreb", "Vienna", "Prague", "Krakow",
    "Budapest", "Salzburg", "Munich", "Hamburg", "Antwerp", "Utrecht", "Bergen", "Gdansk",
]  # fmt: skip
CUISINES = ["Italian", "Japanese", "Mexican", "Indian", "French", "Thai", "Lebanese", "Spanish"]
HOTEL_WORDS = (
    ["Grand", "Royal", "Harbour", "Garden", "Old Town", "Riverside", "Golden", "Silver", "Park",
     "Central", "Imperial", "Linden", "Maple", "Opera", "Station", "Lantern"],
    ["Hotel", "Inn", "Suites", "Lodge", "Residence", "Palace", "House"],
)  # fmt: skip
RESTAURANT_WORDS = (
    ["Blue", "Red", "Little", "Happy", "Wild", "Copper", "Olive", "Salt", "Saffron", "Fig",
     "Juniper", "Ember", "Cedar", "Clover", "Pepper", "Amber", "Ivy", "Basil"],
    ["Table", "Kitchen", "Bistro", "Spoon", "Oven", "Garden", "Corner", "Plate", "Pantry"],
)  # fmt: skip
ATTRACTION_WORDS = (
    ["Old", "Royal", "National", "Hidden", "Upper", "Sunken", "Crystal", "Northern", "Painted",
     "Ancient", "Floating", "Winter", "Stone", "Glass"],
    [("Museum", "indoor"), ("Gallery", "indoor"), ("Cathedral", "indoor"), ("Aquarium", "indoor"),
     ("Library", "indoor"), ("Garden", "outdoor"), ("Park", "outdoor"), ("Lighthouse", "outdoor"),
     ("Harbour Walk", "outdoor"), ("Castle Ruins", "outdoor"), ("Botanical Garden", "outdoor")],
)  # fmt: skip
WEATHER = ["sunny", "cloudy", "rainy"]
MODES = ["train", "bus", "flight"]
MAX_DAYS = 5

BASE_TOOLS = [
    "get_all_cities",
    "get_all_hotels_by_city",
    "get_all_restaurants_by_city",
    "get_all_attractions_by_city",
    "get_city_by_hotel",
    "get_city_by_restaurant",
    "get_city_by_attraction",
    "get_infos_by_city",
    "get_infos_by_hotel",
    "get_infos_by_restaurant",
    "get_infos_by_attraction",
    "submit_result",
]
#: rule type -> the extra tool a task with that rule needs
RULE_TOOLS = {
    "weather": "get_weather_by_city_date",
    "transport": "get_inter_city_transport",
    "metro": "get_city_transport",
}
DAY_KEYS = [
    "time",
    "city",
    "hotel",
    "afternoon_restaurant",
    "afternoon_attraction",
    "evening_restaurant",
]
ANSWER_FORMAT = (
    "A JSON list with one object per day, in order: "
    '[{"time": "YYYY-MM-DD", "city": "...", "hotel": "...", "afternoon_restaurant": "...", '
    '"afternoon_attraction": "...", "evening_restaurant": "..."}, ...]. '
    "Submit it with submit_result(plan) or as your final answer."
)

#: a plan of the wrong shape earns no partial credit: its missing days break no rule
GATES = (*STRUCTURE, "n_days")


# -- database -------------------------------------------------------------------------------

SCHEMA = """
CREATE TABLE cities (name TEXT PRIMARY KEY, region TEXT, population INTEGER, description TEXT,
                     best_season TEXT);
CREATE TABLE hotels (name TEXT PRIMARY KEY, city TEXT, price INTEGER, rating REAL,
                     stars INTEGER, address TEXT);
CREATE TABLE restaurants (name TEXT PRIMARY KEY, city TEXT, cuisine TEXT, price INTEGER,
                          rating REAL, opening_hours TEXT);
CREATE TABLE attractions (name TEXT PRIMARY KEY, city TEXT, kind TEXT, ticket INTEGER,
                          rating REAL, duration_hours REAL);
CREATE TABLE city_transport (city TEXT PRIMARY KEY, metro INTEGER, bus INTEGER,
                             taxi_per_km REAL, day_pass INTEGER);
CREATE TABLE inter_city_transport (from_city TEXT, to_city TEXT, mode TEXT, price INTEGER,
                                   duration_hours REAL);
CREATE TABLE weather (city TEXT, date TEXT, condition TEXT, temperature INTEGER);
"""


def _unique_names(rng: np.random.Generator, words: tuple[list, list], n: int) -> list[Any]:
    first, second = words
    pairs = [(a, b) for a in first for b in second]
    picks = rng.choice(len(pairs), size=n, replace=False)
    return [pairs[int(i)] for i in picks]


def build_trip_database(path: Path, rng: np.random.Generator, n_cities: int = 7) -> None:
    """Write a seeded trip database: cities, hotels, restaurants, attractions, transport, weather."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    conn = sqlite3.connect(tmp)
    try:
        # a fresh file written once: no journal, no fsync per statement
        conn.execute("PRAGMA journal_mode=OFF")
        conn.execute("PRAGMA synchronous=OFF")
        conn.executescript(SCHEMA)
        cities = [CITY_NAMES[int(i)] for i in rng.choice(len(CITY_NAMES), n_cities, replace=False)]
        n_h = [int(rng.integers(3, 5)) for _ in cities]
        n_r = [int(rng.integers(4, 6)) for _ in cities]
        n_a = [int(rng.integers(3, 5)) for _ in cities]
        hotel_names = iter(_unique_names(rng, HOTEL_WORDS, sum(n_h)))
        rest_names = iter(_unique_names(rng, RESTAURANT_WORDS, sum(n_r)))
        att_names = iter(_unique_names(rng, ATTRACTION_WORDS, sum(n_a)))
        start = dt.date(2025, 6, 1)
        for ci, city in enumerate(cities):
            conn.execute(
                "INSERT INTO cities VALUES (?,?,?,?,?)",
                (
                    city,
                    ["north", "south", "east", "west"][int(rng.integers(4))],
                    int(rng.integers(100, 3000)) * 1000,
                    f"{city} is known for its {['food', 'museums', 'old town', 'harbour'][ci % 4]}.",
                    ["spring", "summer", "autumn"][int(rng.integers(3))],
                ),
            )
            for _ in range(n_h[ci]):
                a, b = next(hotel_names)
                low, high = [(120, 200), (200, 500), (500, 800), (800, 1400)][int(rng.integers(4))]
                conn.execute(
                    "INSERT INTO hotels VALUES (?,?,?,?,?,?)",
                    (
                        f"{a} {b}",
                        city,
                        int(rng.integers(low // 10, high // 10)) * 10,
                        round(float(rng.uniform(2.8, 5.0)), 1),
                        int(rng.integers(2, 6)),
                        f"{int(rng.integers(1, 200))} {a} Street",
                    ),
                )
            for _ in range(n_r[ci]):
                a, b = next(rest_names)
                conn.execute(
                    "INSERT INTO restaurants VALUES (?,?,?,?,?,?)",
                    (
                        f"{a} {b}",
                        city,
                        CUISINES[int(rng.integers(len(CUISINES)))],
                        int(rng.integers(8, 55)) * 5,
                        round(float(rng.uniform(2.8, 5.0)), 1),
                        ["11:00-22:00", "12:00-23:00", "17:00-23:30"][int(rng.integers(3))],
                    ),
                )
            for _ in range(n_a[ci]):
                a, (b, kind) = next(att_names)
                conn.execute(
                    "INSERT INTO attractions VALUES (?,?,?,?,?,?)",
                    (
                        f"{a} {b}",
                        city,
                        kind,
                        int(rng.integers(0, 50)) * 5,
                        round(float(rng.uniform(3.0, 5.0)), 1),
                        float(rng.integers(1, 7)) / 2,
                    ),
                )
            conn.execute(
                "INSERT INTO city_transport VALUES (?,?,?,?,?)",
                (
                    city,
                    int(rng.random() < 0.6),
                    1,
                    round(float(rng.uniform(1.0, 3.5)), 1),
                    int(rng.integers(4, 20)),
                ),
            )
            for d in range(MAX_DAYS + 1):
                conn.execute(
                    "INSERT INTO weather VALUES (?,?,?,?)",
                    (
                        city,
                        (start + dt.timedelta(days=d)).isoformat(),
                        WEATHER[int(rng.choice(3, p=[0.4, 0.3, 0.3]))],
                        int(rng.integers(12, 34)),
                    ),
                )
        for i, a in enumerate(cities):
            for b in cities[i + 1 :]:
                if rng.random() >= 0.6:
                    continue
                for m in rng.choice(3, size=int(rng.integers(1, 3)), replace=False):
                    mode = MODES[int(m)]
                    price = int(rng.integers(4, 60)) * 10
                    hours = round(float(rng.uniform(0.8, 9.0)), 1)
                    conn.executemany(
                        "INSERT INTO inter_city_transport VALUES (?,?,?,?,?)",
                        [(a, b, mode, price, hours), (b, a, mode, price, hours)],
                    )
        conn.commit()
    finally:
        conn.close()
    tmp.replace(path)


# -- tools ----------------------------------------------------------------------------------

_INFO_COLUMNS = {
    "cities": ["region", "population", "description", "best_season"],
    "hotels": ["city", "price", "rating", "stars", "address"],
    "restaurants": ["city", "cuisine", "price", "rating", "opening_hours"],
    "attractions": ["city", "kind", "ticket", "rating", "duration_hours"],
}
_KIND = {
    "cities": "city",
    "hotels": "hotel",
    "restaurants": "restaurant",
    "attractions": "attraction",
}


def _keywords(info_keywords: list[str] | str) -> list[str]:
    if isinstance(info_keywords, str):
        info_keywords = info_keywords.split(",")
    return [k.strip().lower() for k in info_keywords if k.strip()]


def _infos(db: Database, table: str, info_keywords: list[str] | str, name: str) -> dict[str, Any]:
    key = "name"
    rows = db.query(f"SELECT * FROM {table} WHERE {key} = ?", (name,))
    if not rows:
        raise ValueError(
            f"no {_KIND[table]} named {name!r}; list them with "
            f"get_all_{table}_by_city" + ("" if table != "cities" else " / get_all_cities")
        )
    wanted = _keywords(info_keywords) or _INFO_COLUMNS[table]
    unknown = [k for k in wanted if k not in _INFO_COLUMNS[table]]
    if unknown:
        raise ValueError(
            f"unknown info keyword(s) {unknown}; {_KIND[table]} infos are "
            f"{', '.join(_INFO_COLUMNS[table])}"
        )
    row = rows[0]
    out = {k: row[k] for k in wanted}
    if "metro" in out:
        out["metro"] = bool(out["metro"])
    return out


def _city_check(db: Database, city: str) -> None:
    if not db.query("SELECT 1 FROM cities WHERE name = ?", (city,)):
        raise ValueError(f"no city named {city!r}; get_all_cities lists them")


def trip_functions(
    db: Callable[[], Database], submit: Callable[[Any], str] | None = None
) -> dict[str, Callable[..., Any]]:
    """The fifteen trip-planning tool functions over the database `db()` returns at call time."""

    def names(table: str, city: str) -> list[str]:
        _city_check(db(), city)
        rows = db().query(f"SELECT name FROM {table} WHERE city = ? ORDER BY name", (city,))
        return [r["name"] for r in rows]

    def city_of(table: str, name: str) -> str:
        rows = db().query(f"SELECT city FROM {table} WHERE name = ?", (name,))
        if not rows:
            raise ValueError(f"no {_KIND[table]} named {name!r}")
        return str(rows[0]["city"])

    def get_all_cities() -> list[str]:
        """List every city in the travel database."""
        return [r["name"] for r in db().query("SELECT name FROM cities ORDER BY name")]

    def get_all_hotels_by_city(city: str) -> list[str]:
        """List the hotels of a city.

        Args:
            city: the city name, as get_all_cities gives it.
        """
        return names("hotels", city)

    def get_all_restaurants_by_city(city: str) -> list[str]:
        """List the restaurants of a city.

        Args:
            city: the city name.
        """
        return names("restaurants", city)

    def get_all_attractions_by_city(city: str) -> list[str]:
        """List the attractions of a city.

        Args:
            city: the city name.
        """
        return names("attractions", city)

    def get_city_by_hotel(hotel: str) -> str:
        """The city a hotel is in.

        Args:
            hotel: the hotel name.
        """
        return city_of("hotels", hotel)

    def get_city_by_restaurant(restaurant: str) -> str:
        """The city a restaurant is in.

        Args:
            restaurant: the restaurant name.
        """
        return city_of("restaurants", restaurant)

    def get_city_by_attraction(attraction: str) -> str:
        """The city an attraction is in.

        Args:
            attraction: the attraction name.
        """
        return city_of("attractions", attraction)

    def get_city_transport(city: str) -> dict[str, Any]:
        """Public transport inside a city: metro (bool), bus (bool), taxi_per_km, day_pass.

        Args:
            city: the city name.
        """
        _city_check(db(), city)
        row = db().query("SELECT * FROM city_transport WHERE city = ?", (city,))[0]
        return {
            "metro": bool(row["metro"]),
            "bus": bool(row["bus"]),
            "taxi_per_km": row["taxi_per_km"],
            "day_pass": row["day_pass"],
        }

    def get_inter_city_transport(from_city: str, to_city: str) -> list[dict[str, Any]]:
        """Direct connections between two cities: mode, price, duration_hours ([] if none).

        Args:
            from_city: the city you leave.
            to_city: the city you arrive in.
        """
        _city_check(db(), from_city)
        _city_check(db(), to_city)
        return db().query(
            "SELECT mode, price, duration_hours FROM inter_city_transport "
            "WHERE from_city = ? AND to_city = ? ORDER BY price",
            (from_city, to_city),
        )

    def get_infos_by_city(info_keywords: list[str] | str, city: str) -> dict[str, Any]:
        """Facts about a city; keywords: region, population, description, best_season.

        Args:
            info_keywords: the facts wanted (a list, or comma-separated); empty for all.
            city: the city name.
        """
        return _infos(db(), "cities", info_keywords, city)

    def get_infos_by_hotel(info_keywords: list[str] | str, hotel: str) -> dict[str, Any]:
        """Facts about a hotel; keywords: city, price (per night), rating, stars, address.

        Args:
            info_keywords: the facts wanted (a list, or comma-separated); empty for all.
            hotel: the hotel name.
        """
        return _infos(db(), "hotels", info_keywords, hotel)

    def get_infos_by_restaurant(info_keywords: list[str] | str, restaurant: str) -> dict[str, Any]:
        """Facts about a restaurant; keywords: city, cuisine, price (per person), rating, opening_hours.

        Args:
            info_keywords: the facts wanted (a list, or comma-separated); empty for all.
            restaurant: the restaurant name.
        """
        return _infos(db(), "restaurants", info_keywords, restaurant)

    def get_infos_by_attraction(info_keywords: list[str] | str, attraction: str) -> dict[str, Any]:
        """Facts about an attraction; keywords: city, kind (indoor/outdoor), ticket, rating, duration_hours.

        Args:
            info_keywords: the facts wanted (a list, or comma-separated); empty for all.
            attraction: the attraction name.
        """
        return _infos(db(), "attractions", info_keywords, attraction)

    def get_weather_by_city_date(city: str, date: str) -> dict[str, Any]:
        """The weather forecast of a city on a date (YYYY-MM-DD): condition and temperature.

        Args:
            city: the city name.
            date: the date, YYYY-MM-DD.
        """
        _city_check(db(), city)
        rows = db().query(
            "SELECT condition, temperature FROM weather WHERE city = ? AND date = ?", (city, date)
        )
        if not rows:
            raise ValueError(f"no forecast for {city} on {date!r}; dates are YYYY-MM-DD")
        return {"city": city, "date": date, **rows[0]}

    def submit_result(plan: list[dict[str, Any]] | str) -> str:
        """Submit the final plan (a JSON list with one object per day); this ends the task.

        Args:
            plan: the list of days, each with time, city, hotel, afternoon_restaurant, afternoon_attraction, evening_restaurant.
        """
        if submit is None:
            return "Received the plan."
        return submit(plan)

    fns = [
        get_all_cities, get_all_hotels_by_city, get_all_restaurants_by_city,
        get_all_attractions_by_city, get_city_by_hotel, get_city_by_restaurant,
        get_city_by_attraction, get_city_transport, get_inter_city_transport, get_infos_by_city,
        get_infos_by_hotel, get_infos_by_restaurant, get_infos_by_attraction,
        get_weather_by_city_date, submit_result,
    ]  # fmt: skip
    return {f.__name__: f for f in fns}


# -- the category ---------------------------------------------------------------------------


def _snapshot(db: Database) -> dict[str, Any]:
    """Everything the verifier and the counter need, read once from the database."""

    def by_name(table: str) -> dict[str, dict[str, Any]]:
        return {r["name"]: r for r in db.query(f"SELECT * FROM {table}")}

    legs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in db.query("SELECT * FROM inter_city_transport"):
        legs.setdefault((r["from_city"], r["to_city"]), []).append(r)
    return {
        "cities": {
            r["name"]: {"name": r["name"], "metro": bool(r["metro"])}
            for r in db.query(
                "SELECT c.name, t.metro FROM cities c JOIN city_transport t ON t.city = c.name"
            )
        },
        "hotels": by_name("hotels"),
        "restaurants": by_name("restaurants"),
        "attractions": by_name("attractions"),
        "weather": {
            (r["city"], r["date"]): r["condition"] for r in db.query("SELECT * FROM weather")
        },
        "legs": legs,
    }


def _dates(start: str, n: int) -> list[str]:
    d0 = dt.date.fromisoformat(start)
    return [(d0 + dt.timedelta(days=i)).isoformat() for i in range(n)]


def rule_text(rule: dict[str, Any], n_days: int) -> str:
    """The human-readable sentence of one rule."""
    kind = rule["type"]
    if kind == "tier_rules":
        days = rule["days"]
        which = "every day" if len(days) == n_days else "day " + ", ".join(map(str, days))
        parts = []
        for t in sorted(rule["tiers"], key=lambda t: -t["min_price"]):
            need = []
            if "max_meal_total" in t:
                need.append(f"the two restaurants cost under {t['max_meal_total']} in total")
            if "min_rating_both" in t:
                need.append(f"both restaurants are rated >= {t['min_rating_both']}")
            if "min_rating_one" in t:
                need.append(f"at least one restaurant is rated >= {t['min_rating_one']}")
            if "max_ticket" in t:
                need.append(f"the afternoon ticket costs under {t['max_ticket']}")
            parts.append(f"if the hotel costs >= {t['min_price']}/night: " + ", ".join(need))
        return (
            f"tier_rules: on {which}, depending on that day's hotel price: "
            + "; ".join(parts)
            + " (the highest tier that applies counts; cheaper hotels have no extra rule)."
        )
    if kind == "weather":
        return "weather: no outdoor attraction on a day when it rains in that day's city."
    if kind == "transport":
        return (
            "transport: consecutive days' cities must be linked by a direct inter-city "
            f"connection costing at most {rule['max_leg_price']}."
        )
    if kind == "cuisine_variety":
        return "cuisine_variety: each day's two restaurants serve different cuisines."
    if kind == "min_rating":
        return f"min_rating: every {rule['item']} is rated at least {rule['value']}."
    if kind == "max_ticket":
        return f"max_ticket: every attraction ticket costs at most {rule['value']}."
    if kind == "daily_budget":
        return (
            "daily_budget: each day's hotel night + both restaurants (price per person) + "
            f"attraction ticket cost at most {rule['max']}."
        )
    if kind == "metro":
        return "metro: every city visited after day 1 has a metro."
    raise ValueError(f"unknown rule type {kind!r}")


_INT = r"(\d+(?:\.\d+)?)"


def _num(text: str) -> int | float:
    value = float(text)
    return int(value) if value.is_integer() and "." not in text else value


def parse_trip_prompt(prompt: str) -> dict[str, Any] | None:
    """Recover the task spec from a prompt `make_task` wrote (what a rule-reading agent sees)."""
    head = re.search(r"Plan a (\d+)-day trip starting in (.+?) on (\d{4}-\d\d-\d\d)\.", prompt)
    if head is None:
        return None
    spec: dict[str, Any] = {
        "n_days": int(head.group(1)),
        "start_city": head.group(2),
        "start_date": head.group(3),
        "rules": [],
    }
    for line in re.findall(r"^\d+\. (\w+): (.*)$", prompt, re.M):
        kind, text = line
        if kind == "tier_rules":
            days_m = re.search(r"on (every day|day [\d, ]+),", text)
            days = (
                list(range(1, spec["n_days"] + 1))
                if days_m is None or days_m.group(1) == "every day"
                else [int(d) for d in re.findall(r"\d+", days_m.group(1))]
            )
            tiers = []
            for part in re.findall(r"if the hotel costs >= (\d+)/night: ([^;(]*)", text):
                tier: dict[str, Any] = {"min_price": int(part[0])}
                for key, pattern in (
                    ("max_meal_total", r"cost under " + _INT + " in total"),
                    ("min_rating_both", r"both restaurants are rated >= " + _INT),
                    ("min_rating_one", r"at least one restaurant is rated >= " + _INT),
                    ("max_ticket", r"ticket costs under " + _INT),
                ):
                    m = re.search(pattern, part[1])
                    if m:
                        tier[key] = _num(m.group(1))
                tiers.append(tier)
            spec["rules"].append({"type": "tier_rules", "days": days, "tiers": tiers})
        elif kind in ("weather", "cuisine_variety", "metro"):
            spec["rules"].append({"type": kind})
        elif kind == "transport":
            m = re.search(r"costing at most " + _INT, text)
            spec["rules"].append({"type": kind, "max_leg_price": _num(m.group(1)) if m else 0})
        elif kind == "min_rating":
            m = re.search(r"every (\w+) is rated at least " + _INT, text)
            if m:
                spec["rules"].append({"type": kind, "item": m.group(1), "value": _num(m.group(2))})
        elif kind in ("max_ticket", "daily_budget"):
            m = re.search(r"at most " + _INT, text)
            key = "value" if kind == "max_ticket" else "max"
            spec["rules"].append({"type": kind, key: _num(m.group(1)) if m else 0})
    spec["dates"] = _dates(spec["start_date"], spec["n_days"])
    return spec


class TripPlanning(Category):
    """Plan a multi-day trip that satisfies conditional rules over a travel database."""

    name = "trip_planning"
    env_name = "TripPlanning"
    description = "Plan a multi-day trip under tier, weather, transport and budget rules."
    solution_file = "trip_planning_solution"

    def build_database(self, path: Path, rng: np.random.Generator) -> None:
        """Write the seeded travel database."""
        build_trip_database(path, rng)

    def functions(
        self, db: Callable[[], Database], submit: Callable[[Any], str] | None = None
    ) -> dict[str, Callable[..., Any]]:
        """The fifteen trip-planning tool functions."""
        return trip_functions(db, submit)

    # -- tasks ------------------------------------------------------------------------------

    def make_task(self, spec: dict[str, Any], level: int, added: list[str]) -> Task:
        """A task from its spec: prompt, constraints and tools follow from the rules."""
        spec = copy.deepcopy(spec)
        spec["dates"] = _dates(spec["start_date"], spec["n_days"])
        n = spec["n_days"]
        constraints = [
            f"n_days: the trip lasts {n} days, {spec['dates'][0]} to {spec['dates'][-1]}; "
            "each day's `time` is its date.",
            f"start_city: day 1 is spent in {spec['start_city']}.",
            "no_repeat: no city, hotel, attraction or restaurant appears twice in the plan.",
            "in_city: each day's hotel, restaurants and attraction are in that day's city.",
        ] + [rule_text(r, n) for r in spec["rules"]]
        tools = list(BASE_TOOLS)
        for r in spec["rules"]:
            extra = RULE_TOOLS.get(r["type"])
            if extra and extra not in tools:
                tools.insert(-1, extra)
        prompt = (
            f"Plan a {n}-day trip starting in {spec['start_city']} on {spec['dates'][0]}. "
            "Each day has a city, a hotel for the night, an afternoon restaurant, an afternoon "
            "attraction and an evening restaurant. Use the tools to look up cities, hotels, "
            "restaurants, attractions and their facts. The plan must satisfy every rule:\n"
            + "\n".join(f"{i + 1}. {c}" for i, c in enumerate(constraints))
            + f"\n\nAnswer format: {ANSWER_FORMAT}"
        )
        return Task(self.name, level, spec, prompt, ANSWER_FORMAT, constraints, tools, added)

    def propose(self, db: Database, rng: np.random.Generator) -> Task:
        """A 3-day trip from a random start city with only the structural rules."""
        cities = [r["name"] for r in db.query("SELECT name FROM cities ORDER BY name")]
        spec = {
            "n_days": 3,
            "start_city": cities[int(rng.integers(len(cities)))],
            "start_date": "2025-06-01",
            "rules": [],
        }
        return self.make_task(spec, 1, ["base: 3 days, start city, no repeats, items in city"])

    def _steps(self, db: Database, task: Task, rng: np.random.Generator) -> list[tuple[str, dict]]:
        spec = task.spec
        kinds = {r["type"] for r in spec["rules"]}
        snap = db.cached("snapshot", lambda: _snapshot(db))
        steps: list[tuple[str, dict]] = []
        if "tier_rules" not in kinds:
            # the published example comes first
            return [
                ("tier_rules", {"type": "tier_rules", "days": [2], "tiers": rules.DEFAULT_TIERS})
            ]
        if "weather" not in kinds:
            steps.append(("weather", {"type": "weather"}))
        if "transport" not in kinds:
            prices = sorted(min(c["price"] for c in v) for v in snap["legs"].values())
            cap = int(np.quantile(prices, float(rng.uniform(0.4, 0.8)))) if prices else 300
            steps.append(("transport", {"type": "transport", "max_leg_price": cap}))
        if "cuisine_variety" not in kinds:
            steps.append(("cuisine_variety", {"type": "cuisine_variety"}))
        if "metro" not in kinds:
            steps.append(("metro", {"type": "metro"}))
        for item in ("restaurant", "hotel", "attraction"):
            if not any(r["type"] == "min_rating" and r["item"] == item for r in spec["rules"]):
                value = round(float(rng.uniform(3.2, 3.8)), 1)
                steps.append(("min_rating", {"type": "min_rating", "item": item, "value": value}))
        if "max_ticket" not in kinds:
            value = int(rng.integers(8, 25)) * 5
            steps.append(("max_ticket", {"type": "max_ticket", "value": value}))
        budget = next((r for r in spec["rules"] if r["type"] == "daily_budget"), None)
        cap = int(rng.integers(90, 160)) * 10 if budget is None else int(budget["max"] * 0.85)
        steps.append(("daily_budget", {"type": "daily_budget", "max": cap}))
        tiers = next(r for r in spec["rules"] if r["type"] == "tier_rules")
        if len(tiers["days"]) < spec["n_days"]:
            steps.append(("tier_rules_all_days", {}))
        steps.append(("tighten_tiers", {}))
        if spec["n_days"] < MAX_DAYS:
            steps.append(("add_day", {}))
        order = rng.permutation(len(steps))
        return [steps[int(i)] for i in order]

    def harden(self, db: Database, task: Task, rng: np.random.Generator) -> list[Task]:
        """One-step-harder candidates: a new rule, a tighter rule, or one more day."""
        out = []
        for step, rule in self._steps(db, task, rng):
            spec = copy.deepcopy(task.spec)
            spec.pop("dates", None)
            tiers = next((r for r in spec["rules"] if r["type"] == "tier_rules"), None)
            if step == "tier_rules_all_days" and tiers is not None:
                tiers["days"] = list(range(1, spec["n_days"] + 1))
                note = "tier rules on every day"
            elif step == "tighten_tiers" and tiers is not None:
                tiers["tiers"] = [_tighten(t) for t in tiers["tiers"]]
                note = "tighter tier limits"
            elif step == "add_day":
                spec["n_days"] += 1
                if tiers is not None and len(tiers["days"]) == spec["n_days"] - 1 > 1:
                    tiers["days"] = list(range(1, spec["n_days"] + 1))
                note = f"one more day ({spec['n_days']} days)"
            else:
                spec["rules"] = [
                    r
                    for r in spec["rules"]
                    if not (r["type"] == rule["type"] and r.get("item") == rule.get("item"))
                ] + [rule]
                note = rule_text(rule, spec["n_days"])
            out.append(self.make_task(spec, task.level + 1, [note]))
        return out

    # -- checking ---------------------------------------------------------------------------

    def constraint_ids(self, task: Task) -> list[str]:
        """The ids of the task's constraints (the prefixes of violation messages)."""
        base = ["format", "n_days", "start_city", "no_repeat", "in_city", "unknown_item"]
        return base + sorted({r["type"] for r in task.spec["rules"]})

    def verify(self, db: Database, task: Task, answer: Any) -> Verdict:
        """Check a plan against every rule; each violation names its rule."""
        ids = self.constraint_ids(task)
        plan, error = parse_json_answer(answer)
        if isinstance(plan, dict):
            plan = plan.get("plan", plan.get("days"))
        if error or not isinstance(plan, list):
            return Verdict.from_violations(
                [f"format: {error or 'the plan must be a JSON list'}"], ids
            )
        snap = db.cached("snapshot", lambda: _snapshot(db))
        spec = task.spec
        out: list[str] = []
        if len(plan) != spec["n_days"]:
            out.append(f"n_days: the plan has {len(plan)} days, expected {spec['n_days']}")
        seen: dict[str, dict[str, int]] = {
            k: {} for k in ("city", "hotel", "attraction", "restaurant")
        }
        prev_city: str | None = None
        for i, day in enumerate(plan[: spec["n_days"]]):
            n = i + 1
            if not isinstance(day, dict):
                out.append(f"format: day {n} is not an object with the keys {DAY_KEYS}")
                continue
            missing = [k for k in DAY_KEYS if not isinstance(day.get(k), str)]
            if missing:
                out.append(f"format: day {n} lacks (or has non-text) {missing}")
                continue
            if day["time"] != spec["dates"][i]:
                out.append(
                    f"n_days: day {n}'s time is {day['time']!r}, expected {spec['dates'][i]}"
                )
            city = day["city"]
            if city not in snap["cities"]:
                out.append(f"unknown_item: day {n}: no city named {city!r}")
                continue
            if n == 1 and city != spec["start_city"]:
                out.append(f"start_city: day 1 is in {city}, expected {spec['start_city']}")
            facts: dict[str, Any] = {"city": snap["cities"][city]}
            ok = True
            for key, table, label in (
                ("hotel", "hotels", "hotel"),
                ("afternoon_restaurant", "restaurants", "restaurant"),
                ("evening_restaurant", "restaurants", "restaurant"),
                ("afternoon_attraction", "attractions", "attraction"),
            ):
                item = snap[table].get(day[key])
                if item is None:
                    out.append(f"unknown_item: day {n}: no {label} named {day[key]!r}")
                    ok = False
                    continue
                if item["city"] != city:
                    out.append(
                        f"in_city: day {n}: {label} {day[key]!r} is in {item['city']}, not {city}"
                    )
                facts[key] = item
            for kind, name in (
                ("city", city),
                ("hotel", day["hotel"]),
                ("attraction", day["afternoon_attraction"]),
            ):
                if name in seen[kind]:
                    out.append(
                        f"no_repeat: {kind} {name!r} appears on day {seen[kind][name]} and day {n}"
                    )
                seen[kind].setdefault(name, n)
            for name in {day["afternoon_restaurant"], day["evening_restaurant"]}:
                if name in seen["restaurant"] and seen["restaurant"][name] != n:
                    out.append(
                        f"no_repeat: restaurant {name!r} appears on day "
                        f"{seen['restaurant'][name]} and day {n}"
                    )
                seen["restaurant"].setdefault(name, n)
            if prev_city is not None and prev_city != city:
                out += rules.leg_violations(
                    spec, n, prev_city, city, snap["legs"].get((prev_city, city), [])
                )
            prev_city = city
            if ok:
                facts["weather"] = snap["weather"].get((city, spec["dates"][i]), "sunny")
                out += rules.day_violations(spec, n, facts)
        return Verdict.from_violations(out, ids, GATES)

    def count_space(self, db: Database, task: Task) -> int:
        """Well-formed plans: distinct cities from the start city, any items of each city."""
        bare = copy.copy(task)
        bare.spec = {**task.spec, "rules": []}
        key = f"space:{task.spec['start_city']}:{task.spec['n_days']}"
        return int(db.cached(key, lambda: self.count_solutions(db, bare)))

    def count_solutions(self, db: Database, task: Task) -> int:
        """Exact count: city routes (distinct, linked) times each day's valid choices."""
        snap = db.cached("snapshot", lambda: _snapshot(db))
        spec = task.spec
        by_city: dict[str, dict[str, list[dict[str, Any]]]] = {}
        for table in ("hotels", "restaurants", "attractions"):
            for item in snap[table].values():
                by_city.setdefault(item["city"], {}).setdefault(table, []).append(item)
        cache: dict[tuple[Any, ...], int] = {}
        tier_days = {d for r in spec["rules"] if r["type"] == "tier_rules" for d in r["days"]}

        def day_count(city: str, n: int) -> int:
            # a day's rules depend on its number only through these three facts
            weather = snap["weather"].get((city, spec["dates"][n - 1]), "sunny")
            key = (city, n in tier_days, weather, n > 1)
            if key not in cache:
                items = by_city.get(city, {})
                facts: dict[str, Any] = {"city": snap["cities"][city], "weather": weather}
                count = 0
                for h in items.get("hotels", []):
                    facts["hotel"] = h
                    for a in items.get("attractions", []):
                        facts["afternoon_attraction"] = a
                        for r1 in items.get("restaurants", []):
                            facts["afternoon_restaurant"] = r1
                            for r2 in items.get("restaurants", []):
                                if r2 is r1:
                                    continue
                                facts["evening_restaurant"] = r2
                                if not rules.day_violations(spec, n, facts, True):
                                    count += 1
                cache[key] = count
            return cache[key]

        cities = sorted(snap["cities"])

        def routes(route: list[str]) -> int:
            n = len(route) + 1
            if n > spec["n_days"]:
                return 1
            total = 0
            for city in cities if route else [spec["start_city"]]:
                if city in route:
                    continue
                if route and rules.leg_violations(
                    spec, n, route[-1], city, snap["legs"].get((route[-1], city), [])
                ):
                    continue
                c = day_count(city, n)
                if c:
                    total += c * routes([*route, city])
            return total

        if spec["start_city"] not in snap["cities"]:
            return 0
        return routes([])


def _tighten(tier: dict[str, Any]) -> dict[str, Any]:
    t = dict(tier)
    if "max_meal_total" in t:
        t["max_meal_total"] = int(t["max_meal_total"] * 0.85)
    if "max_ticket" in t:
        t["max_ticket"] = int(t["max_ticket"] * 0.8)
    for key in ("min_rating_both", "min_rating_one"):
        if key in t:
            t[key] = round(min(4.8, t[key] + 0.2), 1)
    if not any(k in t for k in ("max_meal_total", "min_rating_both")):
        t["max_meal_total"] = 400
    return t
