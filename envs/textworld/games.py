"""TextWorld games by size, quest length and seed: generated once, compiled, kept on disk.

TextWorld (`textworld` 1.7.0) generates a world (rooms, objects, a quest) from a seed and
compiles it with the Inform 7 compiler it ships, all offline. Generating and compiling take
seconds, so each game is built once per machine into `gemkit.cache.cache_dir("textworld")`
and read back after; building writes to a temporary name first, so processes building the same
game at once never see half a file. The same size, quest length and seed give the same game
on any machine (TextWorld's own seeded generator: `tw-make custom --seed`).
"""

from __future__ import annotations

import json
import os
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gemkit.cache import cache_dir
from gemkit.errors import GemkitError


def import_textworld() -> Any:
    """Import TextWorld; a missing one raises with the package to install."""
    try:
        import textworld
        import textworld.generator
    except ImportError as e:
        raise GemkitError(
            f"textworld: envs need TextWorld: pip install 'gemkit[textworld]' ({e})"
        ) from e
    return textworld


@dataclass(frozen=True)
class World:
    """The size of a generated game: rooms, objects, and the quest's number of actions."""

    nb_rooms: int
    nb_objects: int
    quest_length: int

    def __post_init__(self) -> None:
        if self.nb_rooms < 1 or self.nb_objects < 0 or self.quest_length < 1:
            raise ValueError(
                "a TextWorld world needs nb_rooms >= 1, nb_objects >= 0 and quest_length >= 1, "
                f"got {self.nb_rooms}, {self.nb_objects}, {self.quest_length}"
            )

    @property
    def name(self) -> str:
        """The folder of this size's games: `r5-o10-q5`."""
        return f"r{self.nb_rooms}-o{self.nb_objects}-q{self.quest_length}"


@dataclass(frozen=True)
class Game:
    """A compiled game: its story file and what TextWorld knows of it."""

    path: Path
    walkthrough: tuple[str, ...]
    max_score: int
    objective: str
    uuid: str


def _game_of(path: Path, meta: dict[str, Any]) -> Game:
    return Game(
        path=path,
        walkthrough=tuple(meta["walkthrough"]),
        max_score=int(meta["max_score"]),
        objective=meta["objective"],
        uuid=meta["uuid"],
    )


def build(world: World, seed: int, folder: Path | None = None) -> Game:
    """The game of `world` and `seed`, from the cache, or generated and compiled into it."""
    folder = (folder or cache_dir("textworld")) / world.name
    # TextWorld reads the game's `.json` beside its story file; ours is the `.meta.json`
    story, sidecar = folder / f"{seed}.z8", folder / f"{seed}.meta.json"
    if story.is_file() and sidecar.is_file():
        return _game_of(story, json.loads(sidecar.read_text()))
    textworld = import_textworld()
    from textworld.generator import compile_game, make_game

    options = textworld.GameOptions()
    options.nb_rooms, options.nb_objects = world.nb_rooms, world.nb_objects
    options.quest_length = world.quest_length
    options.seeds = seed
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder, prefix=".build-") as tmp:
        options.path = str(Path(tmp) / "game.z8")
        options.force_recompile = True
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                game = make_game(options)
                built = Path(compile_game(game, options))
        except Exception as e:  # noqa: BLE001 - TextWorld's generator has many failure types
            raise GemkitError(
                f"TextWorld could not build a game of {world.nb_rooms} rooms, "
                f"{world.nb_objects} objects and a quest of {world.quest_length} for seed "
                f"{seed} ({type(e).__name__}: {e}); try another seed or a larger world"
            ) from e
        meta = {
            "walkthrough": list(game.walkthrough or []),
            "max_score": game.max_score,
            "objective": game.objective,
            "uuid": game.metadata.get("uuid", ""),
        }
        scratch = Path(tmp) / "meta.json"
        scratch.write_text(json.dumps(meta))
        # the sidecar last: where it is, the story and TextWorld's `.json` are beside it
        os.replace(built.with_suffix(".json"), story.with_suffix(".json"))
        os.replace(built, story)
        os.replace(scratch, sidecar)
    return _game_of(story, meta)
