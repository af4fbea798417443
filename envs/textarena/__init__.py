"""TextArena's single-player games (`textarena:` family), as `textarena:<TextArena id>`.

`textarena:GuessTheNumber-v0` is TextArena's `GuessTheNumber-v0`, played by TextArena's own
code (`TextArenaEnv`). Only the games that run offline are listed (see `names.py`); listing
never imports TextArena. TextArena is an optional extra: `pip install 'gemkit[textarena]'`.
"""

from __future__ import annotations

from gemkit.envs.textarena.names import GAME_IDS
from gemkit.registry import register

_ENTRY = "gemkit.envs.textarena.env:TextArenaEnv"

for _id in GAME_IDS:
    register(
        f"textarena:{_id}",
        _ENTRY,
        kwargs={"ta_id": _id},
        description=f"TextArena's single-player {_id}, run by TextArena's own code.",
        tags=("textarena", "game", "single-player"),
        requires=("textarena",),
        extra="textarena",
    )
