"""Shopping basket: one product per category, under a budget, dietary rules and nutrition targets.

Level 1: one in-stock product from each listed category, total within the budget. Hardening
adds a diet (vegan, gluten-free, nut-free: needs `get_product_labels`), protein and calorie
targets (need `get_product_nutrition`), a cap on the number of stores, a tighter budget, or
one more category.
"""

from __future__ import annotations

import copy
import itertools
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from gemkit.synth.tasks import shopping_basket_solution as rules
from gemkit.synth.tasks.base import (
    STRUCTURE,
    Category,
    Database,
    Task,
    Verdict,
    parse_json_answer,
)

CATEGORIES = {
    "fruit": ["Apples", "Bananas", "Pears", "Mango", "Grapes", "Berries", "Kiwi"],
    "vegetables": ["Carrots", "Spinach", "Broccoli", "Peppers", "Tomatoes", "Zucchini"],
    "dairy": ["Milk", "Yogurt", "Cheddar", "Feta", "Oat Drink", "Soy Yogurt"],
    "bakery": ["Sourdough", "Rye Bread", "Bagels", "Rice Cakes", "Croissants", "Gluten-free Loaf"],
    "protein": ["Chicken", "Tofu", "Lentils", "Salmon", "Eggs", "Tempeh", "Chickpeas"],
    "snacks": ["Almonds", "Granola Bar", "Crisps", "Dark Chocolate", "Popcorn", "Peanuts"],
    "pantry": ["Pasta", "Rice", "Oats", "Quinoa", "Olive Oil", "Peanut Butter"],
}
BRANDS = ["Green Valley", "Daily", "Nordic", "Sunny", "Village", "Urban", "Harvest", "Prime"]
STORES = ["FreshMart", "CornerShop", "BulkBarn", "OrganicOne"]
MAX_CATEGORIES = 6

BASE_TOOLS = ["get_all_categories", "get_products_by_category", "get_product_info", "submit_result"]
RULE_TOOLS = {
    "diet": "get_product_labels",
    "min_protein": "get_product_nutrition",
    "max_calories": "get_product_nutrition",
}
ANSWER_FORMAT = (
    'A JSON list of product names, one per required category: ["...", "..."]. '
    "Submit it with submit_result(basket) or as your final answer."
)

#: a basket of the wrong shape earns no partial credit: its missing products break no rule
GATES = (*STRUCTURE, "one_per_category")

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
        for s in STORES:
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
                brand = BRANDS[int(rng.integers(len(BRANDS)))]
                animal = kind in ("Chicken", "Salmon", "Eggs", "Milk", "Yogurt", "Cheddar", "Feta")
                nuts = kind in ("Almonds", "Peanuts", "Peanut Butter") or rng.random() < 0.12
                gluten = kind in ("Sourdough", "Rye Bread", "Bagels", "Croissants", "Pasta")
                conn.execute(
                    "INSERT INTO products VALUES (?,?,?,?,?,?,?,?,?,?)",
                    (
                        f"{brand} {kind}",
                        category,
                        round(float(rng.uniform(0.8, 9.5)), 2),
                        STORES[int(rng.integers(len(STORES)))],
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


def shop_functions(
    db: Callable[[], Database], submit: Callable[[Any], str] | None = None
) -> dict[str, Callable[..., Any]]:
    """The shop's tool functions over the database `db()` returns at call time."""

    def product(name: str) -> dict[str, Any]:
        rows = db().query("SELECT * FROM products WHERE name = ?", (name,))
        if not rows:
            raise ValueError(f"no product named {name!r}; get_products_by_category lists them")
        return rows[0]

    def get_all_categories() -> list[str]:
        """List the product categories of the shop."""
        return [
            r["category"] for r in db().query("SELECT DISTINCT category FROM products ORDER BY 1")
        ]

    def get_products_by_category(category: str) -> list[str]:
        """List the products of a category.

        Args:
            category: the category name, as get_all_categories gives it.
        """
        rows = db().query("SELECT name FROM products WHERE category = ? ORDER BY name", (category,))
        if not rows:
            raise ValueError(f"no category named {category!r}; get_all_categories lists them")
        return [r["name"] for r in rows]

    def get_product_info(info_keywords: list[str] | str, product_name: str) -> dict[str, Any]:
        """Facts about a product; keywords: category, price, store, stock.

        Args:
            info_keywords: the facts wanted (a list, or comma-separated); empty for all.
            product_name: the product name.
        """
        row = product(product_name)
        allowed = ["category", "price", "store", "stock"]
        if isinstance(info_keywords, str):
            info_keywords = info_keywords.split(",")
        wanted = [k.strip().lower() for k in info_keywords if k.strip()] or allowed
        unknown = [k for k in wanted if k not in allowed]
        if unknown:
            raise ValueError(f"unknown info keyword(s) {unknown}; product infos are {allowed}")
        return {k: row[k] for k in wanted}

    def get_product_nutrition(product_name: str) -> dict[str, Any]:
        """Calories (kcal) and protein (g) of a product.

        Args:
            product_name: the product name.
        """
        row = product(product_name)
        return {"calories": row["calories"], "protein": row["protein"]}

    def get_product_labels(product_name: str) -> dict[str, Any]:
        """Dietary labels of a product: vegan, gluten_free, contains_nuts.

        Args:
            product_name: the product name.
        """
        row = product(product_name)
        return {k: bool(row[k]) for k in ("vegan", "gluten_free", "contains_nuts")}

    def submit_result(basket: list[str] | str) -> str:
        """Submit the final basket (a JSON list of product names); this ends the task.

        Args:
            basket: the product names, one per required category.
        """
        return "Received the basket." if submit is None else submit(basket)

    fns = [
        get_all_categories, get_products_by_category, get_product_info, get_product_nutrition,
        get_product_labels, submit_result,
    ]  # fmt: skip
    return {f.__name__: f for f in fns}


def _products(db: Database) -> dict[str, dict[str, Any]]:
    rows = db.query("SELECT * FROM products")
    for r in rows:
        for k in ("vegan", "gluten_free", "contains_nuts"):
            r[k] = bool(r[k])
    return {r["name"]: r for r in rows}


def rule_text(rule: dict[str, Any]) -> str:
    """The human-readable sentence of one rule."""
    kind = rule["type"]
    if kind == "diet":
        return f"diet: every product is {rule['tag'].replace('_', '-')}."
    if kind == "min_protein":
        return f"min_protein: the basket has at least {rule['value']} g of protein in total."
    if kind == "max_calories":
        return f"max_calories: the basket has at most {rule['value']} kcal in total."
    if kind == "max_stores":
        return f"max_stores: the products come from at most {rule['value']} store(s)."
    raise ValueError(f"unknown rule type {kind!r}")


class ShoppingBasket(Category):
    """Fill a basket with one product per category under budget, diet and nutrition rules."""

    name = "shopping_basket"
    env_name = "ShoppingBasket"
    description = "Fill a shopping basket under a budget, dietary rules and nutrition targets."
    solution_file = "shopping_basket_solution"

    def build_database(self, path: Path, rng: np.random.Generator) -> None:
        """Write the seeded shop database."""
        build_shop_database(path, rng)

    def functions(
        self, db: Callable[[], Database], submit: Callable[[Any], str] | None = None
    ) -> dict[str, Callable[..., Any]]:
        """The shop's tool functions."""
        return shop_functions(db, submit)

    def make_task(self, spec: dict[str, Any], level: int, added: list[str]) -> Task:
        """A task from its spec."""
        spec = copy.deepcopy(spec)
        cats = ", ".join(spec["categories"])
        constraints = [
            f"one_per_category: exactly one product from each of: {cats}.",
            "in_stock: every product is in stock.",
            f"budget: the products cost at most {spec['budget']:.2f} in total.",
        ] + [rule_text(r) for r in spec["rules"]]
        tools = list(BASE_TOOLS)
        for r in spec["rules"]:
            extra = RULE_TOOLS.get(r["type"])
            if extra and extra not in tools:
                tools.insert(-1, extra)
        prompt = (
            f"Fill a shopping basket with one product from each of these categories: {cats}. "
            "Use the tools to look up products and their facts. The basket must satisfy every "
            "rule:\n"
            + "\n".join(f"{i + 1}. {c}" for i, c in enumerate(constraints))
            + f"\n\nAnswer format: {ANSWER_FORMAT}"
        )
        return Task(self.name, level, spec, prompt, ANSWER_FORMAT, constraints, tools, added)

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

    def constraint_ids(self, task: Task) -> list[str]:
        """Ids of the task's constraints."""
        base = ["format", "unknown_item", "one_per_category", "in_stock", "budget"]
        return base + sorted({r["type"] for r in task.spec["rules"]})

    def verify(self, db: Database, task: Task, answer: Any) -> Verdict:
        """Check a basket against every rule; each violation names its rule."""
        ids = self.constraint_ids(task)
        basket, error = parse_json_answer(answer)
        if isinstance(basket, dict):
            basket = basket.get("basket", basket.get("items"))
        if error or not isinstance(basket, list) or not all(isinstance(b, str) for b in basket):
            return Verdict.from_violations(
                [f"format: {error or 'the basket must be a JSON list of product names'}"], ids
            )
        products = db.cached("products", lambda: _products(db))
        out: list[str] = []
        items = []
        for name in basket:
            if name not in products:
                out.append(f"unknown_item: no product named {name!r}")
            else:
                items.append(products[name])
        cats = [i["category"] for i in items]
        for c in task.spec["categories"]:
            if cats.count(c) != 1:
                out.append(f"one_per_category: {cats.count(c)} products from {c}, expected 1")
        extra = sorted({c for c in cats if c not in task.spec["categories"]})
        if extra:
            out.append(f"one_per_category: products from categories not asked for: {extra}")
        for item in items:
            out += rules.item_violations(task.spec, item)
        out += rules.basket_violations(task.spec, items)
        return Verdict.from_violations(out, ids, GATES)

    def _options(self, db: Database, spec: dict[str, Any]) -> list[list[dict[str, Any]]]:
        products = db.cached("products", lambda: _products(db))
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
