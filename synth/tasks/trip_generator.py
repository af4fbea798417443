"""How trip-planning tasks are made: a seeded database, a level-1 trip, harder and harder rules.

Hardening adds weather, inter-city transport budgets, cuisine variety, ratings, ticket caps,
daily budgets, metro access, tier rules on every day, tighter tiers and more days; each
candidate is kept only while the reference solution still finds a plan and the fraction of
valid plans (counted exactly, here) falls. The played side (prompt, tools, verifier) is
`gemkit.envs.toolworld.trip_planning`.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np

from gemkit.envs.toolworld import trip_rules as rules
from gemkit.envs.toolworld.category import Database, Task
from gemkit.envs.toolworld.trip_planning import TripPlanning, rule_text, snapshot
from gemkit.synth.tasks.base import TaskGenerator
from gemkit.synth.tasks.trip_database import MAX_DAYS, build_trip_database

#: the rules a level-1 trip may carry: each needs a fact that only a tool call returns
FIRST_RULES = (
    "weather", "min_rating", "max_ticket", "cuisine_variety", "daily_budget", "metro",
    "tier_rules", "transport",
)  # fmt: skip


def new_rule(
    kind: str, snap: dict[str, Any], rng: np.random.Generator, item: str = "restaurant"
) -> dict[str, Any]:
    """A rule of `kind` with its limits drawn for this database."""
    if kind == "tier_rules":
        return {"type": "tier_rules", "days": [2], "tiers": rules.DEFAULT_TIERS}
    if kind == "transport":
        prices = sorted(min(c["price"] for c in v) for v in snap["legs"].values())
        cap = int(np.quantile(prices, float(rng.uniform(0.4, 0.8)))) if prices else 300
        return {"type": "transport", "max_leg_price": cap}
    if kind == "min_rating":
        return {"type": "min_rating", "item": item, "value": round(float(rng.uniform(3.2, 3.8)), 1)}
    if kind == "max_ticket":
        return {"type": "max_ticket", "value": int(rng.integers(8, 25)) * 5}
    if kind == "daily_budget":
        return {"type": "daily_budget", "max": int(rng.integers(90, 160)) * 10}
    return {"type": kind}


class TripGenerator(TaskGenerator, TripPlanning):
    """Makes trip-planning tasks: database, proposal, hardening, exact counts."""

    solution_file = "gemkit.envs.toolworld.trip_rules"

    def build_database(self, path: Path, rng: np.random.Generator) -> None:
        """Write the seeded travel database."""
        build_trip_database(path, rng)

    def propose(self, db: Database, rng: np.random.Generator) -> Task:
        """A 3-day trip from a random start city, with one rule that only a tool answers.

        Without it any well-formed in-city plan passes (a valid fraction of 1), and a level-1
        task teaches nothing; `synthesize` refuses such a proposal and asks for another.
        """
        cities = [r["name"] for r in db.query("SELECT name FROM cities ORDER BY name")]
        snap = db.cached("snapshot", lambda: snapshot(db))
        kind = FIRST_RULES[int(rng.integers(len(FIRST_RULES)))]
        item = ("restaurant", "hotel", "attraction")[int(rng.integers(3))]
        rule = new_rule(kind, snap, rng, item)
        spec = {
            "n_days": 3,
            "start_city": cities[int(rng.integers(len(cities)))],
            "start_date": "2025-06-01",
            "rules": [rule],
        }
        base = "base: 3 days, start city, no repeats, items in city"
        return self.make_task(spec, 1, [base, rule_text(rule, 3)])

    def _steps(self, db: Database, task: Task, rng: np.random.Generator) -> list[tuple[str, dict]]:
        spec = task.spec
        kinds = {r["type"] for r in spec["rules"]}
        snap = db.cached("snapshot", lambda: snapshot(db))
        steps: list[tuple[str, dict]] = []
        if "tier_rules" not in kinds:
            # the published example comes first
            return [("tier_rules", new_rule("tier_rules", snap, rng))]
        for kind in ("weather", "transport", "cuisine_variety", "metro"):
            if kind not in kinds:
                steps.append((kind, new_rule(kind, snap, rng)))
        for item in ("restaurant", "hotel", "attraction"):
            if not any(r["type"] == "min_rating" and r["item"] == item for r in spec["rules"]):
                steps.append(("min_rating", new_rule("min_rating", snap, rng, item)))
        if "max_ticket" not in kinds:
            steps.append(("max_ticket", new_rule("max_ticket", snap, rng)))
        budget = next((r for r in spec["rules"] if r["type"] == "daily_budget"), None)
        rule = new_rule("daily_budget", snap, rng)
        if budget is not None:
            rule["max"] = int(budget["max"] * 0.85)
        steps.append(("daily_budget", rule))
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

    def count_space(self, db: Database, task: Task) -> int:
        """Well-formed plans: distinct cities from the start city, any items of each city."""
        bare = copy.copy(task)
        bare.spec = {**task.spec, "rules": []}
        key = f"space:{task.spec['start_city']}:{task.spec['n_days']}"
        return int(db.cached(key, lambda: self.count_solutions(db, bare)))

    def count_solutions(self, db: Database, task: Task) -> int:
        """Exact count: city routes (distinct, linked) times each day's valid choices."""
        snap = db.cached("snapshot", lambda: snapshot(db))
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
