"""Shopping basket, as an episode plays it: the task's text, and the verifier of a basket.

Level 1: one in-stock product from each listed category, total within the budget. Harder
tasks add a diet (vegan, gluten-free, nut-free: needs `get_product_labels`), protein and
calorie targets (need `get_product_nutrition`), a cap on the number of stores, a tighter
budget, or one more category. How tasks are made is `gemkit.synth.tasks.basket_generator`.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from gemkit.envs.toolworld import basket_rules as rules
from gemkit.envs.toolworld.basket_tools import shop_functions
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


def shop_products(db: Database) -> dict[str, dict[str, Any]]:
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

    def functions(self, db: Callable[[], Database]) -> dict[str, Callable[..., Any]]:
        """The shop's tool functions."""
        return shop_functions(db)

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
        products = db.cached("products", lambda: shop_products(db))
        names = db.cached("spellings", lambda: spelling(products))
        out: list[str] = []
        items = []
        for written in basket:
            name = respell(written, products, names)
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
