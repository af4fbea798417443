"""How shopping-basket tasks are made: a seeded shop, three categories, harder rules.

Hardening adds a diet, protein and calorie targets, a cap on the number of stores, a
tighter budget, or one more category. The played side is
`gemkit.envs.toolworld.shopping_basket`.
"""

from __future__ import annotations

import copy
import itertools
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np

from gemkit.envs.toolworld import basket_rules as rules
from gemkit.envs.toolworld.category import Database, Task
from gemkit.envs.toolworld.shopping_basket import ShoppingBasket, rule_text, shop_products
from gemkit.synth.tasks.base import TaskGenerator
from gemkit.synth.world.names import NameGenerator

CATEGORIES = {
    "fruit": ["Apples", "Bananas", "Pears", "Mango", "Grapes", "Berries", "Kiwi"],
    "vegetables": ["Carrots", "Spinach", "Broccoli", "Peppers", "Tomatoes", "Zucchini"],
    "dairy": ["Milk", "Yogurt", "Cheddar", "Feta", "Oat Drink", "Soy Yogurt"],
    "bakery": ["Sourdough", "Rye Bread", "Bagels", "Rice Cakes", "Croissants", "Gluten-free Loaf"],
    "protein": ["Chicken", "Tofu", "Lentils", "Salmon", "Eggs", "Tempeh", "Chickpeas"],
    "snacks": ["Almonds", "Granola Bar", "Crisps", "Dark Chocolate", "Popcorn", "Peanuts"],
    "pantry": ["Pasta", "Rice", "Oats", "Quinoa", "Olive Oil", "Peanut Butter"],
}
#: store name formats (`{w}` a made-up word): brands and stores differ from shop to shop
STORE_FORMATS = ("{w}Mart", "{w} Market", "{w} Grocers", "{w} Foods")
MAX_CATEGORIES = 6

SCHEMA = """
CREATE TABLE products (name TEXT PRIMARY KEY, category TEXT, price REAL, store TEXT,
                       stock INTEGER, calories INTEGER, protein INTEGER, vegan INTEGER,
                       gluten_free INTEGER, contains_nuts INTEGER);
CREATE TABLE stores (name TEXT PRIMARY KEY, address TEXT, delivery_fee REAL);
"""


def build_shop_database(path: Path, rng: np.random.Generator) -> None:
    """Write a seeded shop: products per category with prices, stock, nutrition and labels."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    conn = sqlite3.connect(tmp)
    try:
        conn.execute("PRAGMA journal_mode=OFF")
        conn.execute("PRAGMA synchronous=OFF")
        conn.executescript(SCHEMA)
        names = NameGenerator(np.random.default_rng(rng.integers(2**63)))
        brands = [names.unique(lambda: names.word(2, 2)) for _ in range(8)]
        stores = [names.pattern(STORE_FORMATS[i % len(STORE_FORMATS)]) for i in range(4)]
        for s in stores:
            conn.execute(
                "INSERT INTO stores VALUES (?,?,?)",
                (
                    s,
                    f"{int(rng.integers(1, 99))} Market Street",
                    round(float(rng.uniform(0, 5)), 2),
                ),
            )
        for category, kinds in CATEGORIES.items():
            picks = rng.choice(len(kinds), size=int(rng.integers(4, len(kinds) + 1)), replace=False)
            for i in picks:
                kind = kinds[int(i)]
                brand = brands[int(rng.integers(len(brands)))]
                animal = kind in ("Chicken", "Salmon", "Eggs", "Milk", "Yogurt", "Cheddar", "Feta")
                nuts = kind in ("Almonds", "Peanuts", "Peanut Butter") or rng.random() < 0.12
                gluten = kind in ("Sourdough", "Rye Bread", "Bagels", "Croissants", "Pasta")
                conn.execute(
                    "INSERT INTO products VALUES (?,?,?,?,?,?,?,?,?,?)",
                    (
                        f"{brand} {kind}",
                        category,
                        round(float(rng.uniform(0.8, 9.5)), 2),
                        stores[int(rng.integers(len(stores)))],
                        int(rng.integers(0, 30)) if rng.random() < 0.85 else 0,
                        int(rng.integers(40, 600)),
                        int(rng.integers(0, 30)),
                        int(not animal and rng.random() < 0.9),
                        int(not gluten and rng.random() < 0.8),
                        int(nuts),
                    ),
                )
        conn.commit()
    finally:
        conn.close()
    tmp.replace(path)


class BasketGenerator(TaskGenerator, ShoppingBasket):
    """Makes shopping-basket tasks: shop database, proposal, hardening, exact counts."""

    solution_file = "gemkit.envs.toolworld.basket_rules"

    def build_database(self, path: Path, rng: np.random.Generator) -> None:
        """Write the seeded shop database."""
        build_shop_database(path, rng)

    def propose(self, db: Database, rng: np.random.Generator) -> Task:
        """Three random categories and a generous budget."""
        names = sorted(CATEGORIES)
        cats = [names[int(i)] for i in rng.choice(len(names), size=3, replace=False)]
        spec = {"categories": cats, "budget": round(float(rng.uniform(18, 26)), 2), "rules": []}
        return self.make_task(spec, 1, ["base: one in-stock product per category within budget"])

    def harden(self, db: Database, task: Task, rng: np.random.Generator) -> list[Task]:
        """One-step-harder candidates: a diet, a nutrition target, fewer stores, less money, more."""
        spec = task.spec
        kinds = {r["type"] for r in spec["rules"]}
        candidates: list[tuple[dict[str, Any], str]] = []

        def with_rule(rule: dict[str, Any]) -> None:
            s = copy.deepcopy(spec)
            s["rules"] = [r for r in s["rules"] if r["type"] != rule["type"]] + [rule]
            candidates.append((s, rule_text(rule)))

        if "diet" not in kinds:
            with_rule(
                {"type": "diet", "tag": ["vegan", "gluten_free", "nut_free"][int(rng.integers(3))]}
            )
        per = len(spec["categories"])
        protein = next((r["value"] for r in spec["rules"] if r["type"] == "min_protein"), None)
        with_rule({"type": "min_protein", "value": int(protein + 8 if protein else 6 * per)})
        calories = next((r["value"] for r in spec["rules"] if r["type"] == "max_calories"), None)
        with_rule(
            {"type": "max_calories", "value": int(calories * 0.85 if calories else 320 * per)}
        )
        stores = next((r["value"] for r in spec["rules"] if r["type"] == "max_stores"), None)
        if stores is None or stores > 1:
            with_rule({"type": "max_stores", "value": 2 if stores is None else stores - 1})
        s = copy.deepcopy(spec)
        s["budget"] = round(spec["budget"] * float(rng.uniform(0.75, 0.9)), 2)
        candidates.append((s, f"a tighter budget ({s['budget']:.2f})"))
        if per < MAX_CATEGORIES:
            left = sorted(set(CATEGORIES) - set(spec["categories"]))
            s = copy.deepcopy(spec)
            s["categories"].append(left[int(rng.integers(len(left)))])
            candidates.append((s, f"one more category ({s['categories'][-1]})"))
        order = rng.permutation(len(candidates))
        return [
            self.make_task(candidates[int(i)][0], task.level + 1, [candidates[int(i)][1]])
            for i in order
        ]

    def _options(self, db: Database, spec: dict[str, Any]) -> list[list[dict[str, Any]]]:
        products = db.cached("products", lambda: shop_products(db))
        return [[p for p in products.values() if p["category"] == c] for c in spec["categories"]]

    def count_solutions(self, db: Database, task: Task) -> int:
        """Exact count by enumerating every basket of one product per category."""
        spec = task.spec
        options = [
            [p for p in row if not rules.item_violations(spec, p)]
            for row in self._options(db, spec)
        ]
        return sum(
            not rules.basket_violations(spec, list(combo)) for combo in itertools.product(*options)
        )

    def count_space(self, db: Database, task: Task) -> int:
        """Baskets of one product per category."""
        return int(np.prod([len(row) for row in self._options(db, task.spec)]))
