"""Baseline agents: tool-using, rule-reading, greedy (no backtracking across days or steps).

Each reads the rules from the prompt, gathers facts through the tools in a few batched
actions, then builds its answer greedily with random choices among the options that pass
the rules it can check locally. It never looks ahead, so cross-step rules (transport links,
budgets over a whole basket, room availability later in the week) make it fail more often
as tasks get harder: weaker than the reference solution, by design.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from gemkit.envs.toolworld import basket_rules as shop_rules
from gemkit.envs.toolworld import meeting_rules, trip_rules
from gemkit.envs.toolworld.agent import GeneratorAgent, Plan, ToolError
from gemkit.envs.toolworld.meeting_tools import DAYS as MEETING_DAYS
from gemkit.envs.toolworld.meeting_tools import HOURS as MEETING_HOURS
from gemkit.envs.toolworld.trip_planning import parse_trip_prompt


class TripBaseline(GeneratorAgent):
    """Greedy trip planner: for each day, a few random cities and a few random days in each.

    It reads every rule and checks each sampled day fully, but samples only `samples` days
    in at most `cities_per_day` cities and never backtracks: the rarer valid days get (the
    harder the level), the more often it submits a plan that breaks a rule.
    """

    samples = 4
    cities_per_day = 2

    def plan(self, prompt: str, rng: np.random.Generator) -> Plan:
        """Day by day: pick candidate cities, read what it needs about them, sample days."""
        spec = parse_trip_prompt(prompt)
        if spec is None:
            return []
        kinds = set(trip_rules.rule_types(spec))
        (cities,) = yield [("get_all_cities", {})]
        if isinstance(cities, ToolError) or not cities:
            return []
        facts: dict[tuple[str, str], list[dict[str, Any]]] = {}
        weather: dict[tuple[str, str], str] = {}
        metro: dict[str, bool] = {}
        legs: dict[tuple[str, str], list[Any]] = {}
        plan: list[dict[str, Any]] = []
        for n in range(1, spec["n_days"] + 1):
            date = spec["dates"][n - 1]
            used = {d["city"] for d in plan}
            here = plan[-1]["city"] if plan else None
            if here is not None and "transport" in kinds and (here, here) not in legs:
                others = [c for c in cities if c != here]
                got = yield [
                    ("get_inter_city_transport", {"from_city": here, "to_city": c}) for c in others
                ]
                legs.update({(here, c): _list(r) for c, r in zip(others, got, strict=True)})
                legs[(here, here)] = []
            options = (
                [spec["start_city"]]
                if n == 1
                else [cities[int(i)] for i in rng.permutation(len(cities))]
            )
            options = [
                c
                for c in options
                if c not in used
                and not (
                    here is not None
                    and trip_rules.leg_violations(spec, n, here, c, legs.get((here, c), []))
                )
            ][: self.cities_per_day]
            if not options:
                break  # dead end: submit what we have
            yield from self._learn(spec, kinds, options, date, facts, weather, metro)
            day = None
            for city in options:
                day = _sample_day(
                    spec, n, city, date, facts, weather.get((city, date)), metro.get(city, True),
                    rng, self.samples,
                )  # fmt: skip
                if day["valid"]:
                    break
            assert day is not None  # there was an option to sample
            plan.append(day["day"])
        return plan

    def _learn(
        self,
        spec: dict[str, Any],
        kinds: set[str],
        cities: list[str],
        date: str,
        facts: dict[tuple[str, str], list[dict[str, Any]]],
        weather: dict[tuple[str, str], str],
        metro: dict[str, bool],
    ) -> Plan:
        """Read the items (and facts) of cities not seen yet, and the weather on `date`."""
        tables = ("hotels", "restaurants", "attractions")
        new = [c for c in cities if (c, "hotels") not in facts]
        lists = (
            (yield [(f"get_all_{t}_by_city", {"city": c}) for c in new for t in tables])
            if new
            else []
        )
        keys = {
            "hotels": ("get_infos_by_hotel", "hotel", trip_rules.HOTEL_KEYS),
            "restaurants": ("get_infos_by_restaurant", "restaurant", trip_rules.RESTAURANT_KEYS),
            "attractions": ("get_infos_by_attraction", "attraction", trip_rules.ATTRACTION_KEYS),
        }
        asks = [
            (c, t, name)
            for i, (c, t) in enumerate((c, t) for c in new for t in tables)
            for name in _list(lists[i])
        ]
        calls = [(keys[t][0], {"info_keywords": keys[t][2], keys[t][1]: m}) for _, t, m in asks]
        wx = [c for c in cities if "weather" in kinds and (c, date) not in weather]
        calls += [("get_weather_by_city_date", {"city": c, "date": date}) for c in wx]
        mt = [c for c in new if "metro" in kinds]
        calls += [("get_city_transport", {"city": c}) for c in mt]
        if not calls:
            return
        results = iter((yield calls))
        for c in new:
            for t in tables:
                facts.setdefault((c, t), [])
        for c, t, name in asks:
            info = next(results)
            if isinstance(info, dict):
                facts[(c, t)].append({**info, "name": name, "city": c})
        for c in wx:
            w = next(results)
            weather[(c, date)] = w.get("condition", "sunny") if isinstance(w, dict) else "sunny"
        for c in mt:
            t = next(results)
            metro[c] = bool(t.get("metro")) if isinstance(t, dict) else False


def _pick(rng: np.random.Generator, items: list[Any]) -> Any:
    return items[int(rng.integers(len(items)))]


def _sample_day(
    spec: dict[str, Any],
    n: int,
    city: str,
    date: str,
    facts: dict[tuple[str, str], list[dict[str, Any]]],
    weather: str | None,
    metro: bool,
    rng: np.random.Generator,
    samples: int,
) -> dict[str, Any]:
    hotels = facts.get((city, "hotels"), [])
    atts = facts.get((city, "attractions"), [])
    rests = facts.get((city, "restaurants"), [])
    if not hotels or not atts or len(rests) < 2:
        return {"valid": False, "day": {"time": date, "city": city}}
    valid = False
    for _ in range(samples):
        h, a = _pick(rng, hotels), _pick(rng, atts)
        i, j = rng.choice(len(rests), size=2, replace=False)
        r1, r2 = rests[int(i)], rests[int(j)]
        day = {
            "hotel": h,
            "afternoon_attraction": a,
            "afternoon_restaurant": r1,
            "evening_restaurant": r2,
            "weather": weather or "sunny",
            "city": {"name": city, "metro": metro},
        }
        if not trip_rules.day_violations(spec, n, day, True):
            valid = True
            break
    return {
        "valid": valid,
        "day": {
            "time": date,
            "city": city,
            "hotel": h["name"],
            "afternoon_restaurant": r1["name"],
            "afternoon_attraction": a["name"],
            "evening_restaurant": r2["name"],
        },
    }


def parse_meeting_prompt(prompt: str) -> dict[str, Any] | None:
    """Recover a meeting task's spec from its prompt (what a rule-reading agent sees)."""
    meetings = [
        {"name": name, "attendees": [p.strip() for p in people.split(",")]}
        for name, people in re.findall(r"'([^']+)' with ([^()']+) \(1 hour\)", prompt)
    ]
    if not meetings:
        return None
    rules: list[dict[str, Any]] = []
    for kind, text in re.findall(r"^\d+\. (\w+): (.*)$", prompt, re.M):
        if kind == "video":
            m = re.search(r"'(.+)' is in a room", text)
            rules += [{"type": kind, "meeting": m.group(1)}] if m else []
        elif kind == "order":
            m = re.search(r"'(.+)' takes place before '(.+)'", text)
            rules += [{"type": kind, "first": m.group(1), "second": m.group(2)}] if m else []
        elif kind in ("working_hours", "one_per_day"):
            rules.append({"type": kind})
        elif kind == "no_lunch":
            m = re.search(r"starts at (\d+):00", text)
            rules += [{"type": kind, "hour": int(m.group(1))}] if m else []
        elif kind == "min_floor":
            m = re.search(r"floor (\d+)", text)
            rules += [{"type": kind, "floor": int(m.group(1))}] if m else []
    return {"days": list(MEETING_DAYS), "hours": list(MEETING_HOURS), "meetings": meetings,
            "rules": rules}  # fmt: skip


class MeetingBaseline(GeneratorAgent):
    """Greedy scheduler: for each meeting in turn, a few random slots; never moves a placed one."""

    submit_argument = "schedule"
    samples = 40

    def plan(self, prompt: str, rng: np.random.Generator) -> Plan:
        """Read calendars and rooms in two batches, then place meetings one by one."""
        spec = parse_meeting_prompt(prompt)
        if spec is None:
            return []
        kinds = {r["type"] for r in spec["rules"]}
        (rooms,) = yield [("get_all_rooms", {})]
        if isinstance(rooms, ToolError):
            return []
        people = sorted({p for m in spec["meetings"] for p in m["attendees"]})
        days = spec["days"]
        calls = [("get_busy_hours", {"person": p, "day": d}) for p in people for d in days]
        if "working_hours" in kinds:
            calls += [("get_working_hours", {"person": p}) for p in people]
        calls += [("get_room_info", {"info_keywords": [], "room": r}) for r in rooms]
        calls += [("get_room_bookings", {"room": r, "day": d}) for r in rooms for d in days]
        got = iter((yield calls))
        facts: dict[str, Any] = {"busy": {}, "booked": {}, "rooms": {}, "work": {}}
        for p in people:
            for d in days:
                facts["busy"].setdefault(p, {})[d] = _list(next(got))
        if "working_hours" in kinds:
            for p in people:
                w = next(got)
                facts["work"][p] = w if isinstance(w, dict) else {"start_hour": 0, "end_hour": 24}
        for r in rooms:
            info = next(got)
            facts["rooms"][r] = (
                info if isinstance(info, dict) else {"capacity": 0, "floor": 0, "video": False}
            )
        for r in rooms:
            for d in days:
                facts["booked"].setdefault(r, {})[d] = _list(next(got))
        placed: list[dict[str, Any]] = []
        for m in spec["meetings"]:
            option = None
            for _ in range(self.samples):
                option = {
                    "day": _pick(rng, days),
                    "hour": _pick(rng, spec["hours"]),
                    "room": _pick(rng, rooms),
                }
                if not meeting_rules.option_violations(spec, m, option, facts) and not any(
                    meeting_rules.pair_violations(spec, spec["meetings"][j], placed[j], m, option)
                    for j in range(len(placed))
                ):
                    break
            assert option is not None  # `samples` is at least 1
            placed.append(option)
        return [{"meeting": m["name"], **o} for m, o in zip(spec["meetings"], placed, strict=True)]


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def parse_shop_prompt(prompt: str) -> dict[str, Any] | None:
    """Recover a shopping task's spec from its prompt."""
    head = re.search(r"one product from each of these categories: ([^.]+)\.", prompt)
    budget = re.search(r"budget: the products cost at most ([\d.]+) in total", prompt)
    if head is None or budget is None:
        return None
    rules: list[dict[str, Any]] = []
    for kind, text in re.findall(r"^\d+\. (\w+): (.*)$", prompt, re.M):
        number = re.search(r"(\d+)", text)
        if kind == "diet":
            tag = re.search(r"every product is ([\w-]+)\.", text)
            rules += [{"type": kind, "tag": tag.group(1).replace("-", "_")}] if tag else []
        elif kind in ("min_protein", "max_calories", "max_stores") and number:
            rules.append({"type": kind, "value": int(number.group(1))})
    return {
        "categories": [c.strip() for c in head.group(1).split(",")],
        "budget": float(budget.group(1)),
        "rules": rules,
    }


class ShopBaseline(GeneratorAgent):
    """Greedy shopper: a few random baskets of items that pass the per-item rules."""

    submit_argument = "basket"
    samples = 8

    def plan(self, prompt: str, rng: np.random.Generator) -> Plan:
        """List each category, read every product, then try a few random baskets."""
        spec = parse_shop_prompt(prompt)
        if spec is None:
            return []
        kinds = {r["type"] for r in spec["rules"]}
        lists = yield [("get_products_by_category", {"category": c}) for c in spec["categories"]]
        names = [_list(x) for x in lists]
        flat = [(i, n) for i, row in enumerate(names) for n in row]
        calls = [("get_product_info", {"info_keywords": [], "product_name": n}) for _, n in flat]
        nutrition = bool(kinds & {"min_protein", "max_calories"})
        if nutrition:
            calls += [("get_product_nutrition", {"product_name": n}) for _, n in flat]
        if "diet" in kinds:
            calls += [("get_product_labels", {"product_name": n}) for _, n in flat]
        got = yield calls
        k = len(flat)
        options: list[list[dict[str, Any]]] = [[] for _ in spec["categories"]]
        for j, (i, n) in enumerate(flat):
            item = {"name": n, **(got[j] if isinstance(got[j], dict) else {"stock": 0})}
            if nutrition and isinstance(got[k + j], dict):
                item.update(got[k + j])
            if "diet" in kinds and isinstance(got[-k + j], dict):
                item.update(got[-k + j])
            item.setdefault("price", 0.0)
            item.setdefault("store", "")
            if not shop_rules.item_violations(spec, item):
                options[i].append(item)
        basket: list[dict[str, Any]] = []
        for _ in range(self.samples):
            if any(not row for row in options):
                break
            basket = [_pick(rng, row) for row in options]
            if not shop_rules.basket_violations(spec, basket):
                break
        return [b["name"] for b in basket]


BASELINES: dict[str, type[GeneratorAgent]] = {
    "trip_planning": TripBaseline,
    "meeting_scheduling": MeetingBaseline,
    "shopping_basket": ShopBaseline,
}


def baseline_for(category: str, seed: int | None = None) -> GeneratorAgent:
    """The baseline agent of a category."""
    return BASELINES[category](seed=seed)


# -- random but tool-using ---------------------------------------------------------------------
#
# What a policy that has learned to use the listing tools, and nothing about the rules, does:
# it reads the task's shape from the prompt (days, meetings, categories), lists the items
# with the tools, and picks among them at random. Each picks uniformly among the well-formed
# answers the task's valid fraction counts, so its pass rate estimates that fraction: a task
# it passes often rewards luck, not planning.


class RandomTrip(GeneratorAgent):
    """A random trip: the start city, then random unvisited cities, random items in each."""

    def plan(self, prompt: str, rng: np.random.Generator) -> Plan:
        """List the cities, then each day's city's items; pick at random."""
        spec = parse_trip_prompt(prompt)
        if spec is None:
            return []
        (cities,) = yield [("get_all_cities", {})]
        cities = _list(cities)
        route = [spec["start_city"]]
        others = [c for c in cities if c != spec["start_city"]]
        order = rng.permutation(len(others))
        route += [others[int(i)] for i in order][: spec["n_days"] - 1]
        tables = ("hotels", "restaurants", "attractions")
        got = yield [(f"get_all_{t}_by_city", {"city": c}) for c in route for t in tables]
        plan = []
        for n, city in enumerate(route):
            hotels, restaurants, attractions = (_list(x) for x in got[3 * n : 3 * n + 3])
            if not hotels or not attractions or not restaurants:
                break
            pair = rng.choice(len(restaurants), size=min(2, len(restaurants)), replace=False)
            r1, r2 = restaurants[int(pair[0])], restaurants[int(pair[-1])]
            plan.append({
                "time": spec["dates"][n], "city": city, "hotel": _pick(rng, hotels),
                "afternoon_restaurant": r1, "afternoon_attraction": _pick(rng, attractions),
                "evening_restaurant": r2,
            })  # fmt: skip
        return plan


class RandomMeetings(GeneratorAgent):
    """Random meetings: each at a random day, hour and room of the listed rooms."""

    submit_argument = "schedule"

    def plan(self, prompt: str, rng: np.random.Generator) -> Plan:
        """List the rooms; place every meeting at random."""
        spec = parse_meeting_prompt(prompt)
        if spec is None:
            return []
        (rooms,) = yield [("get_all_rooms", {})]
        rooms = _list(rooms)
        if not rooms:
            return []
        return [
            {
                "meeting": m["name"],
                "day": _pick(rng, spec["days"]),
                "hour": _pick(rng, spec["hours"]),
                "room": _pick(rng, rooms),
            }
            for m in spec["meetings"]
        ]


class RandomBasket(GeneratorAgent):
    """A random basket: one listed product of each category."""

    submit_argument = "basket"

    def plan(self, prompt: str, rng: np.random.Generator) -> Plan:
        """List each category's products; pick one of each at random."""
        spec = parse_shop_prompt(prompt)
        if spec is None:
            return []
        lists = yield [("get_products_by_category", {"category": c}) for c in spec["categories"]]
        rows = [_list(x) for x in lists]
        return [_pick(rng, row) for row in rows if row]


RANDOM_BASELINES: dict[str, type[GeneratorAgent]] = {
    "trip_planning": RandomTrip,
    "meeting_scheduling": RandomMeetings,
    "shopping_basket": RandomBasket,
}


def random_baseline_for(category: str, seed: int | None = None) -> GeneratorAgent | None:
    """The random but tool-using agent of a category (None for a category without one)."""
    agent = RANDOM_BASELINES.get(category)
    return None if agent is None else agent(seed=seed)
