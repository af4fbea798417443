"""Trip planning: the rule checks and the reference solution, written for the restricted runner.

This file imports nothing and uses no `_` names: `gemkit.synth.tasks.restrict` executes it
with only the tools facade, so the reference solution provably calls tools and computes,
and never reads the database. The verifier imports the same rule checks, so the solution and
the verifier agree on what each rule means.

Facts about one day (the same shape whether read through tools or from the database):
`{"hotel": {name, city, price, rating}, "afternoon_restaurant": {name, city, cuisine, price,
rating}, "evening_restaurant": {...}, "afternoon_attraction": {name, city, kind, ticket,
rating}, "weather": "sunny" | "cloudy" | "rainy", "city": {name, metro}}`.
"""

#: the published day-2 rules, by hotel price per night (highest tier first)
DEFAULT_TIERS = [
    {"min_price": 800, "max_meal_total": 350, "min_rating_both": 4.0, "max_ticket": 120},
    {"min_price": 500, "min_rating_one": 4.0, "max_ticket": 180},
    {"min_price": 200, "min_rating_one": 3.2},
]

HOTEL_KEYS = ["price", "rating"]
RESTAURANT_KEYS = ["cuisine", "price", "rating"]
ATTRACTION_KEYS = ["kind", "ticket", "rating"]


def tier_for(tiers: list, price: float) -> dict | None:
    """The tier a hotel price falls in (the highest `min_price` it reaches), or None."""
    best = None
    for tier in tiers:
        if price >= tier["min_price"] and (best is None or tier["min_price"] > best["min_price"]):
            best = tier
    return best


def tier_violations(tier: dict, day_no: int, facts: dict) -> list:
    """What one day breaks of the rules of its hotel's price tier."""
    out = []
    hotel = facts["hotel"]
    r1 = facts["afternoon_restaurant"]
    r2 = facts["evening_restaurant"]
    att = facts["afternoon_attraction"]
    head = (
        f"tier_rules: day {day_no}: hotel '{hotel['name']}' costs {hotel['price']}/night "
        f"(tier >= {tier['min_price']}), so"
    )
    if "max_meal_total" in tier and r1["price"] + r2["price"] >= tier["max_meal_total"]:
        total = r1["price"] + r2["price"]
        out.append(
            f"{head} the two restaurants must cost under {tier['max_meal_total']} in total; "
            f"they cost {total}"
        )
    if "min_rating_both" in tier:
        low = [r for r in (r1, r2) if r["rating"] < tier["min_rating_both"]]
        if low:
            names = ", ".join(f"'{r['name']}' ({r['rating']})" for r in low)
            out.append(
                f"{head} both restaurants must be rated >= {tier['min_rating_both']}; {names}"
            )
    if "min_rating_one" in tier and max(r1["rating"], r2["rating"]) < tier["min_rating_one"]:
        out.append(
            f"{head} at least one restaurant must be rated >= {tier['min_rating_one']}; "
            f"they are rated {r1['rating']} and {r2['rating']}"
        )
    if "max_ticket" in tier and att["ticket"] >= tier["max_ticket"]:
        out.append(
            f"{head} the afternoon ticket must cost under {tier['max_ticket']}; "
            f"'{att['name']}' costs {att['ticket']}"
        )
    return out


def day_violations(spec: dict, day_no: int, facts: dict, first: bool = False) -> list:
    """Every per-day rule of `spec` that the day (1-based `day_no`) breaks, as messages.

    With `first`, stop at the first broken rule (enough to know the day is invalid).
    """
    out = []
    hotel = facts["hotel"]
    r1 = facts["afternoon_restaurant"]
    r2 = facts["evening_restaurant"]
    att = facts["afternoon_attraction"]
    if r1["name"] == r2["name"]:
        out.append(f"no_repeat: day {day_no}: restaurant '{r1['name']}' is used twice")
    for rule in spec.get("rules", []):
        if first and out:
            return out
        kind = rule["type"]
        if kind == "tier_rules" and day_no in rule["days"]:
            tier = tier_for(rule["tiers"], hotel["price"])
            if tier is not None:
                out.extend(tier_violations(tier, day_no, facts))
        elif kind == "weather":
            if facts.get("weather") == "rainy" and att["kind"] == "outdoor":
                out.append(
                    f"weather: day {day_no}: it rains in {hotel['city']}, but '{att['name']}' "
                    "is an outdoor attraction"
                )
        elif kind == "cuisine_variety":
            if r1["cuisine"] == r2["cuisine"]:
                out.append(
                    f"cuisine_variety: day {day_no}: both restaurants serve {r1['cuisine']} food"
                )
        elif kind == "min_rating":
            item = rule["item"]
            if item == "restaurant":
                items = [r1, r2]
            elif item == "hotel":
                items = [hotel]
            else:
                items = [att]
            for it in items:
                if it["rating"] < rule["value"]:
                    out.append(
                        f"min_rating: day {day_no}: {item} '{it['name']}' is rated "
                        f"{it['rating']}, under {rule['value']}"
                    )
        elif kind == "max_ticket":
            if att["ticket"] > rule["value"]:
                out.append(
                    f"max_ticket: day {day_no}: '{att['name']}' costs {att['ticket']}, "
                    f"over {rule['value']}"
                )
        elif kind == "daily_budget":
            spend = hotel["price"] + r1["price"] + r2["price"] + att["ticket"]
            if spend > rule["max"]:
                out.append(
                    f"daily_budget: day {day_no}: hotel, meals and ticket cost {spend}, "
                    f"over {rule['max']}"
                )
        elif kind == "metro":
            if day_no > 1 and not facts["city"]["metro"]:
                out.append(f"metro: day {day_no}: {hotel['city']} has no metro")
    return out


def leg_violations(spec: dict, day_no: int, src: str, dst: str, connections: list) -> list:
    """What the trip from `src` (day `day_no`-1) to `dst` (day `day_no`) breaks, as messages."""
    for rule in spec.get("rules", []):
        if rule["type"] != "transport":
            continue
        if not connections:
            return [f"transport: day {day_no}: there is no transport from {src} to {dst}"]
        cheapest = min(c["price"] for c in connections)
        if cheapest > rule["max_leg_price"]:
            return [
                f"transport: day {day_no}: the cheapest transport from {src} to {dst} costs "
                f"{cheapest}, over {rule['max_leg_price']}"
            ]
    return []


def rule_types(spec: dict) -> list:
    """The types of the extra rules in `spec`."""
    return [r["type"] for r in spec.get("rules", [])]


def solve(tools: "ToolFacade", task: dict) -> list | None:  # type: ignore[name-defined]  # noqa: F821 - the restricted runner allows no import
    """Find a plan by exhaustive search over tool results; None when no plan exists."""
    spec = task["spec"]
    kinds = rule_types(spec)
    n_days = spec["n_days"]
    dates = spec["dates"]
    cities = tools.get_all_cities()
    hotels = {}
    restaurants = {}
    attractions = {}
    city_facts = {}
    for city in cities:
        hotels[city] = [
            info_of(tools.get_infos_by_hotel(HOTEL_KEYS, h), h, city)
            for h in tools.get_all_hotels_by_city(city)
        ]
        restaurants[city] = [
            info_of(tools.get_infos_by_restaurant(RESTAURANT_KEYS, r), r, city)
            for r in tools.get_all_restaurants_by_city(city)
        ]
        attractions[city] = [
            info_of(tools.get_infos_by_attraction(ATTRACTION_KEYS, a), a, city)
            for a in tools.get_all_attractions_by_city(city)
        ]
        metro = True
        if "metro" in kinds:
            metro = bool(tools.get_city_transport(city)["metro"])
        city_facts[city] = {"name": city, "metro": metro}
    weather = {}
    legs = {}

    def weather_on(city: str, day_no: int) -> str:
        key = (city, day_no)
        if key not in weather:
            weather[key] = "sunny"
            if "weather" in kinds:
                weather[key] = tools.get_weather_by_city_date(city, dates[day_no - 1])["condition"]
        return weather[key]

    def leg_ok(src: str, dst: str, day_no: int) -> bool:
        if "transport" not in kinds:
            return True
        if (src, dst) not in legs:
            legs[(src, dst)] = tools.get_inter_city_transport(src, dst)
        return not leg_violations(spec, day_no, src, dst, legs[(src, dst)])

    first_plans: dict = {}

    def day_plan(city: str, day_no: int) -> dict | None:
        key = (city, day_no)
        if key in first_plans:
            return first_plans[key]
        found = None
        for hotel in hotels[city]:
            for att in attractions[city]:
                for r1 in restaurants[city]:
                    for r2 in restaurants[city]:
                        facts = {
                            "hotel": hotel,
                            "afternoon_restaurant": r1,
                            "evening_restaurant": r2,
                            "afternoon_attraction": att,
                            "weather": weather_on(city, day_no),
                            "city": city_facts[city],
                        }
                        if not day_violations(spec, day_no, facts, True):
                            found = {
                                "time": dates[day_no - 1],
                                "city": city,
                                "hotel": hotel["name"],
                                "afternoon_restaurant": r1["name"],
                                "afternoon_attraction": att["name"],
                                "evening_restaurant": r2["name"],
                            }
                            break
                    if found:
                        break
                if found:
                    break
            if found:
                break
        first_plans[key] = found
        return found

    def search(route: list) -> list | None:
        day_no = len(route) + 1
        if day_no > n_days:
            return route
        options = [spec["start_city"]] if day_no == 1 else sorted(cities)
        for city in options:
            if city in [d["city"] for d in route]:
                continue
            if route and not leg_ok(route[-1]["city"], city, day_no):
                continue
            plan = day_plan(city, day_no)
            if plan is None:
                continue
            done = search(route + [plan])
            if done is not None:
                return done
        return None

    if spec["start_city"] not in cities:
        return None
    return search([])


def info_of(info: dict, name: str, city: str) -> dict:
    """A tool's info dict completed with the item's name and city."""
    out = dict(info)
    out["name"] = name
    out["city"] = city
    return out
