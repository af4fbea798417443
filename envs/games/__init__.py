"""Text games (`game:` family), each with easy/hard levels and a scripted expert policy.

Modules are named here, not imported: a game's code loads when its id is first made.
"""

from __future__ import annotations

from typing import Any

from gemkit.registry import register

#: name -> (module, one-line description, tags, {level: constructor kwargs})
GAMES: dict[str, tuple[str, str, tuple[str, ...], dict[str, dict[str, Any]]]] = {
    "GuessTheNumber": (
        "guess_the_number",
        "Find a hidden integer from higher/lower feedback.",
        ("search", "single-player"),
        {
            "easy": {"low": 1, "high": 20, "max_turns": 8},
            "medium": {"low": 1, "high": 50, "max_turns": 10},
            "hard": {"low": 1, "high": 100, "max_turns": 10},
        },
    ),
    "Mastermind": (
        "mastermind",
        "Crack a hidden colour code from black/white peg feedback.",
        ("deduction", "single-player"),
        {
            "easy": {"code_length": 3, "num_colors": 4, "max_turns": 12},
            "hard": {"code_length": 4, "num_colors": 6, "max_turns": 12},
        },
    ),
    "Minesweeper": (
        "minesweeper",
        "Reveal every safe cell of a grid without hitting a mine.",
        ("deduction", "grid"),
        {
            "easy": {"rows": 6, "cols": 6, "mines": 4, "max_turns": 40},
            "hard": {"rows": 8, "cols": 8, "mines": 10, "max_turns": 100},
        },
    ),
    "Sudoku": (
        "sudoku",
        "Fill a Sudoku grid one cell per move.",
        ("logic", "grid"),
        {
            "easy": {"size": 4, "holes": 6, "max_turns": 20, "max_mistakes": 2},
            "hard": {"size": 9, "holes": 40, "max_turns": 80, "max_mistakes": 3},
        },
    ),
    "Hangman": (
        "hangman",
        "Guess a hidden word letter by letter before the gallows is complete.",
        ("words", "single-player"),
        {
            "easy": {"min_length": 4, "max_length": 6, "max_misses": 10, "max_turns": 30},
            "hard": {"min_length": 7, "max_length": 12, "max_misses": 5, "max_turns": 30},
        },
    ),
    "Wordle": (
        "wordle",
        "Find a hidden five-letter word from green/yellow/grey feedback.",
        ("words", "deduction"),
        {
            "easy": {"word_length": 5, "max_turns": 10, "common_only": True},
            "hard": {"word_length": 5, "max_turns": 6, "common_only": False},
        },
    ),
    "TowerOfHanoi": (
        "tower_of_hanoi",
        "Move a stack of disks to the last peg, never a larger disk on a smaller one.",
        ("planning", "puzzle"),
        {
            "easy": {"num_disks": 3, "max_turns": 20},
            "hard": {"num_disks": 5, "max_turns": 50},
        },
    ),
    "Game2048": (
        "game2048",
        "Slide and merge tiles to reach a target tile.",
        ("planning", "grid", "stochastic"),
        {
            "easy": {"size": 4, "target": 128, "max_turns": 400},
            "hard": {"size": 4, "target": 512, "max_turns": 1000},
        },
    ),
    "FifteenPuzzle": (
        "fifteen_puzzle",
        "Slide tiles into order on a sliding-tile board.",
        ("planning", "puzzle"),
        {
            "easy": {"size": 3, "scramble": 10, "max_turns": 40},
            "hard": {"size": 4, "scramble": 40, "max_turns": 120},
        },
    ),
    "Sokoban": (
        "sokoban",
        "Push every box onto a goal square in a small warehouse.",
        ("planning", "puzzle", "grid"),
        {
            "easy": {"width": 6, "height": 6, "num_boxes": 1, "max_turns": 30},
            "hard": {"width": 7, "height": 7, "num_boxes": 2, "max_turns": 60},
        },
    ),
    "LightsOut": (
        "lights_out",
        "Two-step logic puzzle: deduce the press pattern that switches every light off.",
        ("logic", "grid"),
        {
            "easy": {"size": 3, "presses": 3, "max_turns": 12},
            "hard": {"size": 5, "presses": 8, "max_turns": 30},
        },
    ),
}


for _name, (_module, _desc, _tags, _levels) in GAMES.items():
    for _level, _kwargs in _levels.items():
        register(
            f"game:{_name}-v0-{_level}",
            f"gemkit.envs.games.{_module}:{_name}",
            kwargs=_kwargs,
            description=_desc,
            tags=("game", _level, *_tags),
            expert=f"gemkit.envs.games.{_module}:{_name}Expert",
        )
