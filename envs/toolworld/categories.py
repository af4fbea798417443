"""The played categories by name: `played_category("trip_planning")`.

A package adds its own with `register_played_category(name, "module:Class")` (or, for a
category it also synthesizes, `gemkit.synth.tasks.register_category`, which registers both
sides). Modules are named here and imported on first use.
"""

from __future__ import annotations

import difflib
import importlib

from gemkit.envs.toolworld.category import Category, ToolWorldError

#: category name -> "module:Class" of its played side, imported on first use
CATEGORIES: dict[str, str] = {
    "trip_planning": "gemkit.envs.toolworld.trip_planning:TripPlanning",
    "meeting_scheduling": "gemkit.envs.toolworld.meeting_scheduling:MeetingScheduling",
    "shopping_basket": "gemkit.envs.toolworld.shopping_basket:ShoppingBasket",
}
_INSTANCES: dict[str, Category] = {}


def played_category(name: str) -> Category:
    """The played side of the category `name`; unknown names list the known ones."""
    if name not in _INSTANCES:
        target = CATEGORIES.get(name)
        if target is None:
            close = difflib.get_close_matches(name, list(CATEGORIES), n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise ToolWorldError(
                f"unknown task category {name!r}; known: {', '.join(CATEGORIES)}.{hint}"
            )
        module, _, attr = target.partition(":")
        _INSTANCES[name] = getattr(importlib.import_module(module), attr)()
    return _INSTANCES[name]


def register_played_category(name: str, target: str) -> None:
    """Add a category (`"module:Class"`) so `toolworld:` envs can play its records."""
    CATEGORIES[name] = target
    _INSTANCES.pop(name, None)
