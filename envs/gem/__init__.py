"""GEM's envs (`gem:` family): any GEM env id, run by GEM's own code, as `gem:<GEM id>`.

`gem:game:Sudoku-v0-easy` is GEM's `game:Sudoku-v0-easy` (`gem.make`), stepped through
gemkit's vectors, tool and context wrappers, rollouts and trainers, with each env's random
state its own (`GemEnv`). GEM's games are listed from a static table, so listing ids never
imports GEM; every other id of the installed GEM (its datasets, which download from the
Hugging Face hub, and ids you registered with `gem.register`) joins with
`register_installed()`, which runs by itself when GEM is already imported. GEM is an
optional extra: `pip install 'gemkit[gem]'`.
"""

from __future__ import annotations

import sys

from gemkit.envs.gem.names import GAME_IDS, LEFT_OUT
from gemkit.errors import RegistrationError
from gemkit.registry import register

_ENTRY = "gemkit.envs.gem.env:GemEnv"


def _tag(gem_id: str) -> str:
    """`offline` for the games checked to run offline, else why an id is not: `download` or `left-out`."""
    if gem_id in GAME_IDS:
        return "offline"
    return "left-out" if gem_id in LEFT_OUT and "download" not in LEFT_OUT[gem_id] else "download"


def _register(gem_id: str) -> bool:
    family = gem_id.split(":", 1)[0]
    try:
        register(
            f"gem:{gem_id}",
            _ENTRY,
            kwargs={"gem_id": gem_id},
            description=f"GEM's {gem_id}, run by GEM's own code.",
            tags=("gem", family, _tag(gem_id)),
            requires=("gem",),
            extra="gem",
        )
    except RegistrationError:  # registered by an earlier call
        return False
    return True


def register_installed() -> list[str]:
    """Register every id of the installed GEM not registered yet; return the new gemkit ids."""
    from gemkit.envs.gem.env import import_gem

    registration = import_gem()
    return [f"gem:{i}" for i in list(registration.ENV_REGISTRY) if _register(i)]


for _id in GAME_IDS:
    _register(_id)

if "gem.envs.registration" in sys.modules:  # the user's own GEM ids are there to be had
    register_installed()
