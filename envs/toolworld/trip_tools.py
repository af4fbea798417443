"""Trip planning's fifteen tools: cities, hotels, restaurants, attractions, transport, weather.

Each reads the episode's travel database (read-only) and returns plain data; a name the
database lacks is a `ValueError` whose message says how to list the right ones.
`submit_result` ends the episode with the plan as the answer the verifier checks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gemkit.envs.toolworld.category import SUBMITTED, Database
from gemkit.tools.base import ToolResult

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
    rows = db.query(f"SELECT * FROM {table} WHERE name = ?", (name,))
    if not rows:
        lister = "get_all_cities" if table == "cities" else f"get_all_{table}_by_city(city)"
        raise ValueError(f"no {_KIND[table]} named {name!r}; list them with {lister}")
    wanted = _keywords(info_keywords) or _INFO_COLUMNS[table]
    unknown = [k for k in wanted if k not in _INFO_COLUMNS[table]]
    if unknown:
        raise ValueError(
            f"unknown info keyword(s) {unknown}; {_KIND[table]} infos are "
            f"{', '.join(_INFO_COLUMNS[table])}"
        )
    row = rows[0]
    return {k: row[k] for k in wanted}


def _city_check(db: Database, city: str) -> None:
    if not db.query("SELECT 1 FROM cities WHERE name = ?", (city,)):
        raise ValueError(f"no city named {city!r}; get_all_cities lists them")


def trip_functions(db: Callable[[], Database]) -> dict[str, Callable[..., Any]]:
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

    def submit_result(plan: list[dict[str, Any]] | str) -> ToolResult:
        """Submit the final plan (a JSON list with one object per day); this ends the task.

        Args:
            plan: the list of days, each with time, city, hotel, afternoon_restaurant, afternoon_attraction, evening_restaurant.
        """
        return ToolResult.final_answer(plan, SUBMITTED)

    fns: list[Callable[..., Any]] = [
        get_all_cities, get_all_hotels_by_city, get_all_restaurants_by_city,
        get_all_attractions_by_city, get_city_by_hotel, get_city_by_restaurant,
        get_city_by_attraction, get_city_transport, get_inter_city_transport, get_infos_by_city,
        get_infos_by_hotel, get_infos_by_restaurant, get_infos_by_attraction,
        get_weather_by_city_date, submit_result,
    ]  # fmt: skip
    return {f.__name__: f for f in fns}
