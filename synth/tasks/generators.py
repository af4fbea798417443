"""The task categories synthesis knows, by name: `get_category("trip_planning")`.

Each name maps to a `TaskGenerator` class (`"module:Class"`, imported on first use); a
package adds its own with `register_category`, which also registers the played side for
`toolworld:` envs.
"""

from __future__ import annotations

import difflib
import importlib

from gemkit.envs.toolworld.categories import register_played_category
from gemkit.synth.tasks.base import TaskGenerator, TaskSynthesisError

#: category name -> "module:Class" of its generator
CATEGORIES: dict[str, str] = {
    "trip_planning": "gemkit.synth.tasks.trip_generator:TripGenerator",
    "meeting_scheduling": "gemkit.synth.tasks.meeting_generator:MeetingGenerator",
    "shopping_basket": "gemkit.synth.tasks.basket_generator:BasketGenerator",
}

_INSTANCES: dict[str, TaskGenerator] = {}


def get_category(name: str) -> TaskGenerator:
    """The generator of the category `name`; unknown names list the known ones."""
    if name not in _INSTANCES:
        target = CATEGORIES.get(name)
        if target is None:
            close = difflib.get_close_matches(name, list(CATEGORIES), n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise TaskSynthesisError(
                f"unknown task category {name!r}; known: {', '.join(CATEGORIES)}.{hint}"
            )
        module, _, attr = target.partition(":")
        _INSTANCES[name] = getattr(importlib.import_module(module), attr)()
    return _INSTANCES[name]


def register_category(name: str, target: str) -> None:
    """Add a category (`"module:Class"` of a `TaskGenerator`) for synthesis and its envs.

    The class is also registered as the played category of `toolworld:` envs, so a
    package's records play without a second registration.
    """
    CATEGORIES[name] = target
    _INSTANCES.pop(name, None)
    register_played_category(name, target)
