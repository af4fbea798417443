"""TextWorldExpress's games (`twx:` family): `twx:<game>-v0[-level]`, run by its own engine.

TextWorldExpress (`textworld-express` 1.1.0) reimplements TextWorld's benchmark games (coin
collector, cooking world, TextWorld Commonsense, map reader, ...) in a fast Java engine that
its package ships; it needs a Java runtime (17 or later) on the PATH. The reset seed picks the
game; the level sets the engine's own game parameters. Listing ids never imports it:
`pip install 'gemkit[twx]'`.
"""

from __future__ import annotations

from gemkit.registry import register

#: game -> (description, {level: TextWorldExpress game parameters}); "" is the engine's default
GAMES: dict[str, tuple[str, dict[str, str]]] = {
    "coin": (
        "Find the coin somewhere in a house (TextWorld's coin collector).",
        {
            "easy": "numLocations=3,numDistractorItems=0,includeDoors=0",
            "hard": "numLocations=11,numDistractorItems=10,includeDoors=1",
        },
    ),
    "cookingworld": (
        "Find a recipe, gather and prepare its ingredients, and eat the meal.",
        {
            "easy": "numLocations=1,numIngredients=2,numDistractorItems=0,includeDoors=0",
            "hard": "numLocations=6,numIngredients=4,numDistractorItems=5,includeDoors=1",
        },
    ),
    "twc": (
        "Put misplaced items where they belong (TextWorld Commonsense).",
        {
            "easy": "numLocations=1,numItemsToPutAway=2,includeDoors=0",
            "hard": "numLocations=3,numItemsToPutAway=4,includeDoors=1",
        },
    ),
    "mapreader": (
        "Read a map, fetch an item and bring it to a place.",
        {
            "easy": "numLocations=4,maxDistanceApart=2,includeDoors=0",
            "hard": "numLocations=15,maxDistanceApart=6,includeDoors=1",
        },
    ),
    "arithmetic": (
        "Solve an arithmetic problem and put the item with that count in a box.",
        {"": ""},
    ),
    "sorting": ("Put items into a box in order of their quantity.", {"": ""}),
    "simonsays": ("Do exactly what Simon says.", {"": ""}),
    "peckingorder": ("Read a pecking order and act in its order.", {"": ""}),
}

for _game, (_description, _levels) in GAMES.items():
    for _level, _params in _levels.items():
        register(
            f"twx:{_game}-v0" + (f"-{_level}" if _level else ""),
            "gemkit.envs.twx.env:TextWorldExpressEnv",
            kwargs={"game": _game, "params": _params},
            description=f"{_description} (TextWorldExpress; needs gemkit[twx] and Java)",
            tags=("twx", "text-adventure", "single-player", "java"),
            expert="gemkit.envs.textworld.walkthroughs:WalkthroughExpert",
        )
