"""Tool-use worlds (`toolworld:` family): synthesized tasks over a database and its tools.

Each id loads a built-in set of its category (generated, seeded, on first use and cached) or
any folder written by `gemkit synth tasks` (`make(id, path=DIR)`).
"""

from __future__ import annotations

from gemkit.registry import register

#: env name -> (category, description)
WORLDS: dict[str, tuple[str, str]] = {
    "TripPlanning": (
        "trip_planning",
        "Plan a multi-day trip with 15 travel tools under tier, weather and transport rules.",
    ),
    "MeetingScheduling": (
        "meeting_scheduling",
        "Schedule meetings across people's calendars and rooms under capacity and time rules.",
    ),
    "ShoppingBasket": (
        "shopping_basket",
        "Fill a shopping basket under a budget, dietary rules and nutrition targets.",
    ),
}

for _name, (_category, _description) in WORLDS.items():
    register(
        f"toolworld:{_name}-v0",
        "gemkit.envs.toolworld.env:make_toolworld",
        kwargs={"category": _category},
        description=_description,
        tags=("tools", "planning", "synthesized"),
        expert="gemkit.envs.toolworld.env:make_baseline",
    )
