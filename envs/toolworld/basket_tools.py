"""Shopping basket's tools: categories, products, their facts, nutrition and labels.

Each reads the episode's shop database (read-only) and returns plain data;
`submit_result` ends the episode with the basket as the answer the verifier checks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gemkit.envs.toolworld.category import SUBMITTED, Database
from gemkit.tools.base import ToolResult


def shop_functions(db: Callable[[], Database]) -> dict[str, Callable[..., Any]]:
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

    def submit_result(basket: list[str] | str) -> ToolResult:
        """Submit the final basket (a JSON list of product names); this ends the task.

        Args:
            basket: the product names, one per required category.
        """
        return ToolResult.final_answer(basket, SUBMITTED)

    fns: list[Callable[..., Any]] = [
        get_all_categories, get_products_by_category, get_product_info, get_product_nutrition,
        get_product_labels, submit_result,
    ]  # fmt: skip
    return {f.__name__: f for f in fns}
