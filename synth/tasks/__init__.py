"""Task synthesis: <environment, tools, task, verifier> tuples from category plugins.

```python
from gemkit.synth.tasks import get_category, synthesize

cat = get_category("trip_planning")
result = synthesize(cat, Path("db.sqlite"), np.random.default_rng(0), target_level=3)
```

Categories register by name in `CATEGORIES` (`name -> "module:Class"`, imported on first use).
"""

from __future__ import annotations

import difflib
import importlib

from gemkit.synth.tasks.base import (
    Category,
    Database,
    Synthesized,
    Task,
    TaskSynthesisError,
    Verdict,
    synthesize,
)

#: category name -> "module:Class"
CATEGORIES: dict[str, str] = {
    "trip_planning": "gemkit.synth.tasks.trip_planning:TripPlanning",
    "meeting_scheduling": "gemkit.synth.tasks.meeting_scheduling:MeetingScheduling",
    "shopping_basket": "gemkit.synth.tasks.shopping_basket:ShoppingBasket",
}

_INSTANCES: dict[str, Category] = {}


def get_category(name: str) -> Category:
    """The category registered as `name`; unknown names list the known ones."""
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
    """Add a category (`"module:Class"`) so the CLI and `toolworld:` envs can find it."""
    CATEGORIES[name] = target
    _INSTANCES.pop(name, None)


__all__ = [
    "CATEGORIES",
    "Category",
    "Database",
    "Synthesized",
    "Task",
    "TaskSynthesisError",
    "Verdict",
    "get_category",
    "register_category",
    "synthesize",
]
