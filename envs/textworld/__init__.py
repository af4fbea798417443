"""TextWorld's generated games (`textworld:` family): seeded worlds, quests as difficulty.

`textworld:Quest-v0-easy` is a game TextWorld (Microsoft's text-game generator, `textworld`
1.7.0) generates and compiles offline: the reset seed draws the world, its size and the
quest's length are the level. Scored as TextWorld scores them (points, `info["won"]`), with
an expert that plays TextWorld's walkthrough. TextWorld is an optional extra:
`pip install 'gemkit[textworld]'`; listing ids never imports it.
"""

from __future__ import annotations

from gemkit.registry import register

#: level -> (world size and quest length, the most commands an episode may take)
LEVELS: dict[str, dict[str, int]] = {
    "easy": {"nb_rooms": 2, "nb_objects": 4, "quest_length": 2, "max_steps": 30},
    "medium": {"nb_rooms": 5, "nb_objects": 10, "quest_length": 5, "max_steps": 50},
    "hard": {"nb_rooms": 10, "nb_objects": 20, "quest_length": 10, "max_steps": 100},
}

for _level, _kwargs in LEVELS.items():
    register(
        f"textworld:Quest-v0-{_level}",
        "gemkit.envs.textworld.env:TextWorldEnv",
        kwargs=_kwargs,
        description=(
            f"A TextWorld game: {_kwargs['nb_rooms']} rooms, {_kwargs['nb_objects']} objects, "
            f"a quest of {_kwargs['quest_length']} actions (needs gemkit[textworld])."
        ),
        tags=("textworld", "text-adventure", "single-player"),
        expert="gemkit.envs.textworld.walkthroughs:WalkthroughExpert",
    )
