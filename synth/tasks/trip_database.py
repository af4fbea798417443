"""The seeded travel database a trip-planning task is made on: its tables and their data."""

from __future__ import annotations

import datetime as dt
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np

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
