"""Shopping basket: the rule checks and the reference solution, for the restricted runner.

No imports and no `_` names: `gemkit.synth.tasks.restrict` runs this with only the tools.
Facts about a product: `{name, category, price, store, stock, calories, protein, vegan,
gluten_free, contains_nuts}` (nutrition and labels only when the task's rules need them).
"""


def item_violations(spec: dict, item: dict) -> list:
    """What one product breaks on its own (stock, diet labels)."""
    out = []
    if item["stock"] <= 0:
        out.append(f"in_stock: '{item['name']}' is out of stock")
    for rule in spec.get("rules", []):
        if rule["type"] == "diet":
            tag = rule["tag"]
            ok = not item.get("contains_nuts", True) if tag == "nut_free" else item.get(tag, False)
            if not ok:
                out.append(f"diet: '{item['name']}' is not {tag.replace('_', '-')}")
    return out


def basket_violations(spec: dict, items: list) -> list:
    """What the whole basket breaks (budget, nutrition totals, stores)."""
    out = []
    total = round(sum(i["price"] for i in items), 2)
    if total > spec["budget"]:
        out.append(f"budget: the basket costs {total:.2f}, over the budget of {spec['budget']:.2f}")
    for rule in spec.get("rules", []):
        kind = rule["type"]
        if kind == "min_protein":
            protein = sum(i.get("protein", 0) for i in items)
            if protein < rule["value"]:
                out.append(
                    f"min_protein: the basket has {protein} g of protein, under {rule['value']}"
                )
        elif kind == "max_calories":
            calories = sum(i.get("calories", 0) for i in items)
            if calories > rule["value"]:
                out.append(f"max_calories: the basket has {calories} kcal, over {rule['value']}")
        elif kind == "max_stores":
            stores = sorted({i["store"] for i in items})
            if len(stores) > rule["value"]:
                out.append(
                    f"max_stores: the basket needs {len(stores)} stores ({', '.join(stores)}), "
                    f"more than {rule['value']}"
                )
    return out


def solve(tools: "ToolFacade", task: dict) -> list | None:  # type: ignore[name-defined]  # noqa: F821 - the restricted runner allows no import
    """Search every basket (one product per category) for one that passes every rule."""
    spec = task["spec"]
    kinds = [r["type"] for r in spec.get("rules", [])]
    nutrition = "min_protein" in kinds or "max_calories" in kinds
    labels = "diet" in kinds
    options = []
    for category in spec["categories"]:
        row = []
        for name in tools.get_products_by_category(category):
            info = dict(tools.get_product_info(["price", "store", "stock"], name))
            info["name"] = name
            info["category"] = category
            if nutrition:
                info.update(tools.get_product_nutrition(name))
            if labels:
                info.update(tools.get_product_labels(name))
            if not item_violations(spec, info):
                row.append(info)
        options.append(sorted(row, key=lambda i: i["price"]))

    def search(chosen: list) -> list | None:
        if len(chosen) == len(options):
            return chosen if not basket_violations(spec, chosen) else None
        spent = sum(i["price"] for i in chosen)
        for item in options[len(chosen)]:
            if spent + item["price"] > spec["budget"] + 1e-9:
                break
            found = search(chosen + [item])
            if found is not None:
                return found
        return None

    found = search([])
    if found is None:
        return None
    return [i["name"] for i in found]
