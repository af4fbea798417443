"""GEM's game ids (gem-llm 0.1.0) that run offline, listed so listing ids never imports GEM.

Importing GEM takes about 3 s (it imports reasoning-gym). tests/byo/test_gem.py checks this
table against the installed GEM. Left out, and registered by `register_installed()` for whoever
wants them: Wordle, Hangman and WordSearch (they download NLTK's word list at first use),
FifteenPuzzle-v0-random and Crosswords-v0-random (they raise in GEM 0.1.0 before the first
observation), Sokoban-v0-hard and -random (GEM searches 17 to 70 s for a level per reset).
"""

GAME_IDS: tuple[str, ...] = (
    "game:GuessTheNumber-v0-hard",
    "game:GuessTheNumber-v0-easy",
    "game:GuessTheNumber-v0-random",
    "game:Mastermind-v0-hard",
    "game:Mastermind-v0-random",
    "game:Mastermind-v0-easy",
    "game:Minesweeper-v0-easy",
    "game:Minesweeper-v0-hard",
    "game:Minesweeper-v0-random",
    "game:FifteenPuzzle-v0-easy",
    "game:FifteenPuzzle-v0-hard",
    "game:Sudoku-v0-easy",
    "game:Sudoku-v0-hard",
    "game:Sudoku-v0-random",
    "game:TowerofHanoi-v0-easy",
    "game:TowerofHanoi-v0-hard",
    "game:TowerofHanoi-v0-random",
    "game:Game2048-v0-easy",
    "game:Game2048-v0-hard",
    "game:Game2048-v0-extreme-hard",
    "game:Game2048-v0-random",
    "game:Sokoban-v0-easy",
    "game:Crosswords-v0-easy",
    "game:Crosswords-v0-hard",
)

#: GEM game ids not in `GAME_IDS`, and why
LEFT_OUT: dict[str, str] = {
    "game:Wordle-v0-hard": "downloads NLTK's word list at first use",
    "game:Wordle-v0-easy": "downloads NLTK's word list at first use",
    "game:Wordle-v0-random": "downloads NLTK's word list at first use",
    "game:Hangman-v0-random": "downloads NLTK's word list at first use",
    "game:Hangman-v0-easy": "downloads NLTK's word list at first use",
    "game:Hangman-v0-hard": "downloads NLTK's word list at first use",
    "game:WordSearch-v0-easy": "downloads NLTK's word list at first use",
    "game:WordSearch-v0-hard": "downloads NLTK's word list at first use",
    "game:WordSearch-v0-random": "downloads NLTK's word list at first use",
    "game:FifteenPuzzle-v0-random": "raises in GEM 0.1.0 before the first observation",
    "game:Crosswords-v0-random": "raises in GEM 0.1.0 before the first observation",
    "game:Sokoban-v0-hard": "GEM searches 17 to 70 s for a level per reset",
    "game:Sokoban-v0-random": "GEM searches 17 to 70 s for a level per reset",
}
