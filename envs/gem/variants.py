"""`game:<Name>-v0-<level>-gem`: gemkit games under GEM's rules and levels (see `rules.py`).

Registered through the entry point `game.gem`, so they load with the rest of the `game`
family; they need no GEM installed.
"""

from __future__ import annotations

from gemkit.registry import register

_RULES = "gemkit.envs.gem.rules"

#: (gemkit name, class, {GEM level: constructor kwargs}), the levels of gem-llm 0.1.0
VARIANTS = (
    (
        "GuessTheNumber",
        "GuessTheNumberGem",
        {
            "easy": {"low": 1, "high": 10, "max_turns": 4},
            "hard": {"low": 1, "high": 50, "max_turns": 7},
        },
    ),
    (
        "Mastermind",
        "MastermindGem",
        {
            "easy": {"code_length": 2, "num_numbers": 6, "max_turns": 10},
            "hard": {"code_length": 4, "num_numbers": 8, "max_turns": 30},
        },
    ),
)

for _name, _cls, _levels in VARIANTS:
    for _level, _kwargs in _levels.items():
        register(
            f"game:{_name}-v0-{_level}-gem",
            f"{_RULES}:{_cls}",
            kwargs=_kwargs,
            description=f"{_name} under GEM's rules and rewards (GEM's game:{_name}-v0-{_level}).",
            tags=("game", "gem-rules", _level),
        )
