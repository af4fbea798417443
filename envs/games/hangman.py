"""Hangman: guess a hidden word letter by letter before running out of misses."""

from __future__ import annotations

import functools
import re
import string

import numpy as np

from gemkit.envs.games.base import GameEnv, InvalidMove, Outcome
from gemkit.envs.games.data import dictionary, words_of_length
from gemkit.policy import SyncPolicy

#: Revealed letters earn at most this over a whole game; solving the word adds 1.0.
SHAPING = 0.5
WORD_RE = re.compile(r"^Word: ([a-z_ ]+?) \((\d+) letters\)$", re.MULTILINE)
GUESSED_RE = re.compile(r"^Guessed letters: ([a-z, ]*?)\.?$", re.MULTILINE)


@functools.cache
def _targets(min_length: int, max_length: int) -> tuple[str, ...]:
    return tuple(w for w in dictionary() if min_length <= len(w) <= max_length)


class Hangman(GameEnv):
    """Guess a dictionary word of `min_length`..`max_length` letters, one letter per move.

    A letter in the word is shown at every position it occupies; a letter not in the word is
    a miss, and `max_misses` misses lose the game. Guessing a letter twice is an invalid move.
    Reward: `0.5 * newly shown letters / word length` per move, plus 1.0 for the whole word.
    """

    def __init__(
        self, min_length: int = 4, max_length: int = 6, max_misses: int = 8, max_turns: int = 30
    ):
        super().__init__(max_turns)
        if not 4 <= min_length <= max_length <= 12:
            raise ValueError(
                f"word lengths must satisfy 4 <= min_length <= max_length <= 12, "
                f"got {min_length}..{max_length}"
            )
        if max_misses < 1:
            raise ValueError(f"max_misses must be >= 1, got {max_misses}")
        self.min_length, self.max_length, self.max_misses = min_length, max_length, max_misses
        self.word = "a" * min_length
        self.guessed: list[str] = []

    def rules(self) -> str:
        """Rules text."""
        return (
            f"Hangman: I picked an English word of {self.min_length} to {self.max_length} "
            "letters (lowercase a-z). Guess one letter per move. If the letter is in the word, "
            f"every position holding it is shown; otherwise it is a miss. {self.max_misses} "
            "misses lose the game. Guessing a letter you already tried is not allowed."
        )

    def move_format(self) -> str:
        """One boxed letter."""
        return "\\boxed{e} (a single letter a-z)"

    def new_game(self) -> None:
        """Draw the hidden word."""
        words = _targets(self.min_length, self.max_length)
        self.word = words[int(self.np_random.integers(len(words)))]
        self.guessed = []

    @property
    def misses(self) -> list[str]:
        """Guessed letters that are not in the word."""
        return [g for g in self.guessed if g not in self.word]

    def play(self, move: str) -> Outcome:
        """Reveal the guessed letter or count a miss."""
        letter = move.strip().lower()
        if len(letter) != 1 or letter not in string.ascii_lowercase:
            raise InvalidMove(f"guess exactly one letter a-z, got {move[:20]!r}.")
        if letter in self.guessed:
            raise InvalidMove(f"you already guessed {letter!r}; pick a letter you have not tried.")
        self.guessed.append(letter)
        hits = self.word.count(letter)
        if hits == 0:
            left = self.max_misses - len(self.misses)
            if left == 0:
                return Outcome(
                    f"{letter!r} is not in the word. Out of misses: the word was {self.word!r}.",
                    0.0,
                    True,
                    False,
                )
            return Outcome(f"{letter!r} is not in the word.")
        reward = SHAPING * hits / len(self.word)
        if all(ch in self.guessed for ch in self.word):
            return Outcome(
                f"{letter!r} completes the word {self.word!r}. You win!", reward + 1.0, True, True
            )
        return Outcome(f"{letter!r} appears {hits} time(s).", reward)

    def state_text(self) -> str:
        """Pattern, guessed letters and misses left."""
        pattern = " ".join(ch if ch in self.guessed else "_" for ch in self.word)
        misses = self.misses
        return (
            f"Word: {pattern} ({len(self.word)} letters)\n"
            f"Guessed letters: {', '.join(sorted(self.guessed)) or 'none'}.\n"
            f"Misses: {len(misses)} of {self.max_misses} ({', '.join(misses) or 'none'}); "
            f"misses left: {self.max_misses - len(misses)}."
        )

    def random_action(self, rng: np.random.Generator) -> str:
        """A random letter."""
        return f"\\boxed{{{string.ascii_lowercase[int(rng.integers(26))]}}}"


@functools.cache
def _letter_table(length: int) -> tuple[np.ndarray, np.ndarray]:
    """Dictionary words of one length as a (words, length) array of letter codes 0..25,
    and a (words, 26) table of which letters each word contains."""
    words = words_of_length(length)
    codes = np.frombuffer("".join(words).encode("ascii"), dtype=np.uint8).reshape(-1, length) - 97
    has = np.zeros((len(words), 26), dtype=bool)
    has[np.arange(len(words))[:, None], codes] = True
    return codes, has


class HangmanExpert(SyncPolicy):
    """Keeps the dictionary words that fit the pattern and misses; guesses the untried letter
    found in the most of them."""

    def __init__(self, min_length: int = 4, max_length: int = 12, **_: object):
        self.lengths = range(max(4, min_length), min(12, max_length) + 1)

    def reset(self) -> None:
        """Nothing to forget: the pattern and guesses are in every observation."""

    def choose(self, observation: str) -> str:
        """Pick the most common untried letter among the words still possible."""
        patterns = WORD_RE.findall(observation)
        guesses = GUESSED_RE.findall(observation)
        if not patterns:
            return "\\boxed{e}"
        pattern = patterns[-1][0].split()
        guessed = set()
        if guesses and guesses[-1] != "none":
            guessed = {g.strip() for g in guesses[-1].split(",") if g.strip()}
        untried = [ch for ch in string.ascii_lowercase if ch not in guessed]
        if not untried:
            return "\\boxed{e}"
        order = list("etaoinshrdlcumwfgypbvkjxqz")
        counts = np.zeros(26)
        if len(pattern) in self.lengths:
            codes, has = _letter_table(len(pattern))
            ok = np.ones(len(codes), dtype=bool)
            tried = np.zeros(26, dtype=bool)
            for g in guessed:
                tried[ord(g) - 97] = True
            for i, ch in enumerate(pattern):
                if ch == "_":
                    # a hidden position cannot hold a tried letter (it would have been shown)
                    ok &= ~tried[codes[:, i]]
                else:
                    ok &= codes[:, i] == ord(ch) - 97
            counts = has[ok].sum(0)
        best = max(untried, key=lambda ch: (counts[ord(ch) - 97], -order.index(ch)))
        return f"\\boxed{{{best}}}"
