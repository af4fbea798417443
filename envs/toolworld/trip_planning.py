"""Trip planning, as an episode plays it: the task's text, and the verifier of a plan.

A multi-day trip through cities with hotels, restaurants and attractions: the published
example at level 2 is a 3-day trip from a start city, nothing repeated, every item in its
day's city, and day-2 rules that depend on the hotel's price tier; harder tasks add weather,
inter-city transport budgets, cuisine variety, ratings, ticket caps, daily budgets, metro
access, tier rules on every day, tighter tiers and more days. The rule checks are in
`trip_rules` (shared with the reference solution), the tools in `trip_tools`; how tasks are
made is `gemkit.synth.tasks.trip_generator`.
"""

from __future__ import annotations

import copy
import datetime as dt
import re
from collections.abc import Callable
from typing import Any

from gemkit.envs.toolworld import trip_rules as rules
from gemkit.envs.toolworld.category import (
    STRUCTURE,
    Category,
    Database,
    Task,
    Verdict,
    parse_json_answer,
    respell,
    spelling,
)
from gemkit.envs.toolworld.trip_tools import trip_functions

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


def snapshot(db: Database) -> dict[str, Any]:
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


#: the table each named field of a day is looked up in
DAY_TABLES = {
    "city": "cities",
    "hotel": "hotels",
    "afternoon_restaurant": "restaurants",
    "evening_restaurant": "restaurants",
    "afternoon_attraction": "attractions",
}


def spellings(snap: dict[str, Any]) -> dict[str, dict[str, str]]:
    """Per table, `name_key -> the database's spelling` (see `name_key`)."""
    return {table: spelling(snap[table]) for table in set(DAY_TABLES.values())}


def spelled(
    day: dict[str, Any], snap: dict[str, Any], names: dict[str, dict[str, str]]
) -> dict[str, Any]:
    """A day with each name in the database's spelling (an unknown name is left as written)."""
    out = dict(day)
    out["time"] = " ".join(day["time"].split())
    for key, table in DAY_TABLES.items():
        out[key] = respell(day[key], snap[table], names[table])
    return out


def dates(start: str, n: int) -> list[str]:
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
    spec["dates"] = dates(spec["start_date"], spec["n_days"])
    return spec


class TripPlanning(Category):
    """Plan a multi-day trip that satisfies conditional rules over a travel database."""

    name = "trip_planning"
    env_name = "TripPlanning"
    description = "Plan a multi-day trip under tier, weather, transport and budget rules."

    def functions(self, db: Callable[[], Database]) -> dict[str, Callable[..., Any]]:
        """The fifteen trip-planning tool functions."""
        return trip_functions(db)

    # -- tasks ------------------------------------------------------------------------------

    def make_task(self, spec: dict[str, Any], level: int, added: list[str]) -> Task:
        """A task from its spec: prompt, constraints and tools follow from the rules."""
        spec = copy.deepcopy(spec)
        spec["dates"] = dates(spec["start_date"], spec["n_days"])
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
        snap = db.cached("snapshot", lambda: snapshot(db))
        names = db.cached("spellings", lambda: spellings(snap))
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
            day = spelled(day, snap, names)
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
