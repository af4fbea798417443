"""ScienceWorld's tasks (`scienceworld:` family): `scienceworld:<task>-v0[-easy]`.

ScienceWorld (`scienceworld` 1.2.3) is a text world of elementary-science tasks (boil water,
test conductivity, grow a plant, ...) simulated by a Java engine its package ships; it needs
a Java runtime (17 or later) on the PATH. The reset seed picks one of the task's variations;
`-easy` is ScienceWorld's own "easy" simplification (teleporting, open doors, self-watering
pots, no electrical actions). Scored as ScienceWorld scores them: 0 to 100 points. Listing ids
never imports it: `pip install 'gemkit[scienceworld]'`.
"""

from __future__ import annotations

from gemkit.registry import register

#: ScienceWorld 1.2.3's task names (tests/envs/test_java_text_games.py checks them)
TASKS: tuple[str, ...] = (
    "boil",
    "change-the-state-of-matter-of",
    "chemistry-mix",
    "chemistry-mix-paint-secondary-color",
    "chemistry-mix-paint-tertiary-color",
    "find-animal",
    "find-living-thing",
    "find-non-living-thing",
    "find-plant",
    "freeze",
    "grow-fruit",
    "grow-plant",
    "identify-life-stages-1",
    "identify-life-stages-2",
    "inclined-plane-determine-angle",
    "inclined-plane-friction-named-surfaces",
    "inclined-plane-friction-unnamed-surfaces",
    "lifespan-longest-lived",
    "lifespan-longest-lived-then-shortest-lived",
    "lifespan-shortest-lived",
    "measure-melting-point-known-substance",
    "measure-melting-point-unknown-substance",
    "melt",
    "mendelian-genetics-known-plant",
    "mendelian-genetics-unknown-plant",
    "power-component",
    "power-component-renewable-vs-nonrenewable-energy",
    "test-conductivity",
    "test-conductivity-of-unknown-substances",
    "use-thermometer",
)

for _task in TASKS:
    _name = _task.replace("-", "_")  # ids keep dashes for the version and level
    for _level, _simplification in (("", ""), ("easy", "easy")):
        register(
            f"scienceworld:{_name}-v0" + (f"-{_level}" if _level else ""),
            "gemkit.envs.scienceworld.env:ScienceWorldTaskEnv",
            kwargs={"task": _task, "simplification": _simplification},
            description=f"ScienceWorld's {_task!r} task (needs gemkit[scienceworld] and Java)",
            tags=("scienceworld", "text-adventure", "science", "java"),
            expert="gemkit.envs.textworld.walkthroughs:WalkthroughExpert",
        )
