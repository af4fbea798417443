"""Walkthroughs by first observation, and the expert that plays them.

The `textworld:`, `twx:` and `scienceworld:` engines each know a winning command sequence for
the game they load (TextWorld's walkthrough, the others' gold path); the agent never sees it.
An env records it under its episode's first observation, in this process and in the gemkit
cache (`cache_dir("textworld") / "intros"`), and `WalkthroughExpert` looks it up when it is
shown that observation: an oracle that checks a game can be won, as `code:`'s expert is.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from typing import Any

from gemkit.cache import cache_dir
from gemkit.policy import SyncPolicy


def intro_key(observation: str) -> str:
    """A key for a game's first observation (the expert looks its walkthrough up by it)."""
    return hashlib.sha256(observation.strip().encode()).hexdigest()[:32]


_WALKTHROUGHS: dict[str, tuple[str, ...]] = {}


def remember_walkthrough(observation: str, walkthrough: tuple[str, ...]) -> None:
    """Record that the game opening with `observation` is won by `walkthrough`."""
    key = intro_key(observation)
    if _WALKTHROUGHS.get(key) == walkthrough:
        return
    _WALKTHROUGHS[key] = walkthrough
    index = cache_dir("textworld") / "intros"
    with contextlib.suppress(OSError):  # the in-process index still has it
        index.mkdir(parents=True, exist_ok=True)
        scratch = index / f".{key}.{os.getpid()}"
        scratch.write_text(json.dumps(list(walkthrough)))
        os.replace(scratch, index / f"{key}.json")


def walkthrough_for(observation: str) -> tuple[str, ...] | None:
    """The walkthrough of the game that opens with `observation`, if one was loaded here."""
    key = intro_key(observation)
    if key in _WALKTHROUGHS:
        return _WALKTHROUGHS[key]
    path = cache_dir("textworld") / "intros" / f"{key}.json"
    try:
        walkthrough = tuple(json.loads(path.read_text()))
    except (OSError, ValueError):
        return None
    _WALKTHROUGHS[key] = walkthrough
    return walkthrough


class WalkthroughExpert(SyncPolicy):
    """Plays the walkthrough of the game it is shown, command by command; `look` after it."""

    def __init__(self, **_: Any):
        self.plan: tuple[str, ...] = ()
        self.i = 0

    def reset(self) -> None:
        """Forget the game."""
        self.plan, self.i = (), 0

    def choose(self, observation: str) -> str:
        """The next walkthrough command; `look` when the game is not known."""
        plan = walkthrough_for(observation)
        if plan is not None:  # a new episode's first observation
            self.plan, self.i = plan, 0
        if self.i >= len(self.plan):
            return "look"
        self.i += 1
        return self.plan[self.i - 1]
