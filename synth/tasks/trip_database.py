"""The seeded travel database a trip-planning task is made on: its tables and their data."""

from __future__ import annotations

import datetime as dt
import sqlite3
from pathlib import Path

import numpy as np

from gemkit.synth.world.names import NameGenerator

CUISINES = ["Italian", "Japanese", "Mexican", "Indian", "French", "Thai", "Lebanese", "Spanish"]
#: name formats per table; `{w}` is a fresh made-up word and `{a}` a word from `ADJECTIVES`,
#: so 1,000 databases (100,000 names) rarely share a name (the QA world's generator)
ADJECTIVES = (
    "Grand", "Royal", "Harbour", "Garden", "Old Town", "Riverside", "Golden", "Silver", "Park",
    "Central", "Imperial", "Linden", "Maple", "Opera", "Station", "Lantern", "Blue", "Copper",
    "Olive", "Saffron", "Juniper", "Cedar", "Amber", "Northern", "Painted", "Stone", "Glass",
)  # fmt: skip
HOTEL_FORMATS = (
    "{w} Hotel", "Hotel {w}", "{w} Inn", "The {w} Lodge", "{w} Suites", "{w} Palace",
    "{w} House", "{a} {w} Hotel", "{w} Residence", "The {a} {w}",
)  # fmt: skip
RESTAURANT_FORMATS = (
    "{w} Kitchen", "{w} Bistro", "Café {w}", "Chez {w}", "{w} Table", "{w} Corner",
    "Trattoria {w}", "{w} Grill", "The {a} {w}", "{w} Pantry", "{a} {w} Diner",
)  # fmt: skip
ATTRACTION_FORMATS = (
    ("{w} Museum", "indoor"), ("Museum of {w}", "indoor"), ("{w} Gallery", "indoor"),
    ("{w} Cathedral", "indoor"), ("{w} Aquarium", "indoor"), ("{w} Library", "indoor"),
    ("{w} Gardens", "outdoor"), ("{w} Park", "outdoor"), ("{w} Lighthouse", "outdoor"),
    ("{w} Harbour Walk", "outdoor"), ("{w} Castle Ruins", "outdoor"),
    ("{a} {w} Botanical Garden", "outdoor"),
)  # fmt: skip
WEATHER = ["sunny", "cloudy", "rainy"]
MODES = ["train", "bus", "flight"]
MAX_DAYS = 5


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


def _name(names: NameGenerator, formats: tuple[str, ...]) -> str:
    fmt = formats[names.dice.below(len(formats))]
    return names.pattern(fmt.replace("{a}", ADJECTIVES[names.dice.below(len(ADJECTIVES))]))


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
        # names from their own stream: the rest of the database draws as it did
        names = NameGenerator(np.random.default_rng(rng.integers(2**63)))
        cities = [names.place() for _ in range(n_cities)]
        n_h = [int(rng.integers(3, 5)) for _ in cities]
        n_r = [int(rng.integers(4, 6)) for _ in cities]
        n_a = [int(rng.integers(3, 5)) for _ in cities]
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
                hotel = _name(names, HOTEL_FORMATS)
                low, high = [(120, 200), (200, 500), (500, 800), (800, 1400)][int(rng.integers(4))]
                conn.execute(
                    "INSERT INTO hotels VALUES (?,?,?,?,?,?)",
                    (
                        hotel,
                        city,
                        int(rng.integers(low // 10, high // 10)) * 10,
                        round(float(rng.uniform(2.8, 5.0)), 1),
                        int(rng.integers(2, 6)),
                        f"{int(rng.integers(1, 200))} {names.word(2, 2)} Street",
                    ),
                )
            for _ in range(n_r[ci]):
                conn.execute(
                    "INSERT INTO restaurants VALUES (?,?,?,?,?,?)",
                    (
                        _name(names, RESTAURANT_FORMATS),
                        city,
                        CUISINES[int(rng.integers(len(CUISINES)))],
                        int(rng.integers(8, 55)) * 5,
                        round(float(rng.uniform(2.8, 5.0)), 1),
                        ["11:00-22:00", "12:00-23:00", "17:00-23:30"][int(rng.integers(3))],
                    ),
                )
            for _ in range(n_a[ci]):
                fmt, kind = ATTRACTION_FORMATS[names.dice.below(len(ATTRACTION_FORMATS))]
                conn.execute(
                    "INSERT INTO attractions VALUES (?,?,?,?,?,?)",
                    (
                        _name(names, (fmt,)),
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
