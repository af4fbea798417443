"""Wordle: find a hidden word from green/yellow/grey letter feedback."""

from __future__ import annotations

import functools
import re

import numpy as np

from gemkit.envs.games.base import GameEnv, InvalidMove, Outcome
from gemkit.envs.games.data import common_five, words_of_length
from gemkit.policy import SyncPolicy

#: New green letters earn at most this over a whole game; finding the word adds 1.0.
SHAPING = 0.5
GREEN, YELLOW, GREY = "G", "Y", "."
HISTORY_RE = re.compile(r"^\s*\d+\. ([a-z]+) -> ([GY. ]+?)\s*$", re.MULTILINE)
TURNS_LEFT_RE = re.compile(r"Turns left: (\d+)\.|You have (\d+) turns\.")


def feedback(guess: str, target: str) -> str:
    """Per-letter marks: G right place, Y elsewhere in the word, . no (more) copies.

    A repeated guess letter is marked Y only as often as the target has unmatched copies of
    it, left to right, after the greens have taken theirs.
    """
    marks = [GREEN if g == t else GREY for g, t in zip(guess, target, strict=True)]
    spare: dict[str, int] = {}
    for g, t in zip(guess, target, strict=True):
        if g != t:
            spare[t] = spare.get(t, 0) + 1
    for i, g in enumerate(guess):
        if marks[i] == GREY and spare.get(g, 0) > 0:
            marks[i] = YELLOW
            spare[g] -= 1
    return "".join(marks)


@functools.cache
def _answers(word_length: int, common_only: bool) -> tuple[str, ...]:
    return common_five() if common_only else words_of_length(word_length)


@functools.cache
def _allowed(word_length: int) -> frozenset[str]:
    extra = common_five() if word_length == 5 else ()
    return frozenset(words_of_length(word_length)) | frozenset(extra)


class Wordle(GameEnv):
    """Find a hidden `word_length`-letter word; each guess must be a dictionary word.

    Every guess is marked letter by letter: G (right letter, right place), Y (in the word,
    elsewhere), . (not in the word, or no more copies of it). Targets come from the common
    five-letter list when `common_only`, else from every dictionary word of that length.
    Reward: `0.5 * new green positions / word_length` per guess, plus 1.0 for the word.
    """

    def __init__(self, word_length: int = 5, max_turns: int = 6, common_only: bool = True):
        super().__init__(max_turns)
        if common_only and word_length != 5:
            raise ValueError(f"common_only needs word_length 5, got {word_length}")
        if not 4 <= word_length <= 12:
            raise ValueError(f"word_length must be in 4..12, got {word_length}")
        self.word_length, self.common_only = word_length, common_only
        self.target = "a" * word_length
        self.history: list[tuple[str, str]] = []
        self.greens: set[int] = set()

    def rules(self) -> str:
        """Rules text."""
        L = self.word_length
        pool = "a common English word" if self.common_only else "an English word"
        return (
            f"Wordle: I picked {pool} of {L} letters. Guess it; each guess must be an English "
            f"word of {L} letters. After each guess every letter gets a mark: G = right letter "
            "in the right place, Y = the letter is in the word but elsewhere, . = the letter is "
            "not in the word (or the word has no more copies of it than the G and Y marks "
            "already show)."
        )

    def move_format(self) -> str:
        """One boxed word."""
        example = "crane" if self.word_length == 5 else "a" * self.word_length
        return f"\\boxed{{word}} with a {self.word_length}-letter word, e.g. \\boxed{{{example}}}"

    def new_game(self) -> None:
        """Draw the hidden word."""
        answers = _answers(self.word_length, self.common_only)
        self.target = answers[int(self.np_random.integers(len(answers)))]
        self.history = []
        self.greens = set()

    def play(self, move: str) -> Outcome:
        """Mark the guess against the hidden word."""
        guess = move.strip().lower()
        if len(guess) != self.word_length or not (guess.isascii() and guess.isalpha()):
            raise InvalidMove(f"{move[:30]!r} is not a word of {self.word_length} letters a-z.")
        if guess not in _allowed(self.word_length):
            raise InvalidMove(f"{guess!r} is not in the word list; guess an English word.")
        marks = feedback(guess, self.target)
        self.history.append((guess, marks))
        new = {i for i, m in enumerate(marks) if m == GREEN} - self.greens
        self.greens |= new
        reward = SHAPING * len(new) / self.word_length
        if guess == self.target:
            return Outcome(f"{guess} -> {' '.join(marks)}: solved!", reward + 1.0, True, True)
        return Outcome(f"{guess} -> {' '.join(marks)}", reward)

    def state_text(self) -> str:
        """Every guess with its marks, and the letters known to be absent."""
        if not self.history:
            return "No guesses yet."
        lines = [f"{i}. {g} -> {' '.join(m)}" for i, (g, m) in enumerate(self.history, 1)]
        present = {
            g
            for guess, marks in self.history
            for g, m in zip(guess, marks, strict=True)
            if m != GREY
        }
        absent = sorted({g for guess, _ in self.history for g in guess} - present)
        return (
            "Guesses so far (G right place, Y elsewhere in the word, . not in the word):\n"
            + "\n".join(lines)
            + f"\nLetters not in the word: {', '.join(absent) or 'none known'}."
        )

    def random_action(self, rng: np.random.Generator) -> str:
        """A random word from the answer list."""
        answers = _answers(self.word_length, self.common_only)
        return f"\\boxed{{{answers[int(rng.integers(len(answers)))]}}}"


# -- expert ------------------------------------------------------------------------------------

#: Guess-by-candidate pairs scored per turn; past this the guess pool is pre-filtered.
PAIR_BUDGET = 100_000


def _codes(words: tuple[str, ...] | list[str], length: int) -> np.ndarray:
    return np.frombuffer("".join(words).encode("ascii"), dtype=np.uint8).reshape(-1, length)


def patterns(guesses: np.ndarray, answers: np.ndarray) -> np.ndarray:
    """Feedback of each guess (rows) on each answer (columns) as a base-3 number (G=2, Y=1)."""
    g, a = guesses[:, None, :], answers[None, :, :]
    green = g == a
    out = np.zeros(green.shape[:2], dtype=np.int32)
    for i in range(guesses.shape[1]):
        letter = guesses[:, i][:, None, None]
        # a non-green letter is yellow while the answer has unmatched copies left for it
        spare = ((a == letter) & ~green).sum(-1)
        earlier = ((g[:, :, :i] == letter) & ~green[:, :, :i]).sum(-1)
        mark = np.where(green[:, :, i], 2, (earlier < spare).astype(np.int32))
        out = out * 3 + mark
    return out


def _encode(marks: list[str]) -> int:
    code = 0
    for m in marks:
        code = code * 3 + {GREEN: 2, YELLOW: 1}.get(m, 0)
    return code


@functools.cache
def _tables(word_length: int, common_only: bool) -> tuple[np.ndarray, np.ndarray]:
    """Letter codes of the answers and of the allowed guesses (sorted)."""
    answers = _codes(_answers(word_length, common_only), word_length)
    return answers, _codes(sorted(_allowed(word_length)), word_length)


def _best_guess(cand: np.ndarray, pool: np.ndarray, last_turn: bool) -> np.ndarray:
    """The guess from `pool` (or from `cand` on the last turn) whose marks split `cand` most."""
    n = len(cand)
    if n <= 2 or last_turn:
        return cand[0]
    if len(pool) * n > PAIR_BUDGET:
        # keep the guesses that cover the most candidates by distinct letters
        freq = np.bincount(cand.ravel() - 97, minlength=26)
        has = np.zeros((len(pool), 26), dtype=bool)
        has[np.arange(len(pool))[:, None], pool - 97] = True
        distinct = has @ freq
        keep = max(1, PAIR_BUDGET // n)
        pool = pool[np.argsort(-distinct, kind="stable")[:keep]]
    pool = np.concatenate([cand[: max(1, PAIR_BUDGET // (8 * n))], pool])
    pats = patterns(pool, cand)
    k = 3 ** cand.shape[1]
    keys = pats + np.arange(len(pool))[:, None] * k
    group = np.bincount(keys.ravel(), minlength=len(pool) * k)[keys]
    # entropy of the mark groups: log2(n) minus the mean log2 size of each answer's group
    entropy = np.log2(n) - np.log2(group).mean(1)
    # a guess that may itself be the answer wins now with chance 1/n: worth a little entropy
    is_cand = (pats == k - 1).any(1)
    return pool[int(np.argmax(entropy + is_cand * (2.0 / n)))]


@functools.cache
def _opener(word_length: int, common_only: bool) -> str:
    answers, allowed = _tables(word_length, common_only)
    return _best_guess(answers, allowed, False).tobytes().decode("ascii")


class WordleExpert(SyncPolicy):
    """Keeps the answers that fit every mark so far and guesses the word (from the whole
    guess list) that splits them into the most even groups: maximum expected information."""

    def __init__(self, word_length: int = 5, common_only: bool = True, **_: object):
        self.word_length, self.common_only = word_length, common_only

    def reset(self) -> None:
        """Nothing to forget: every mark is in the observation's history."""

    def choose(self, observation: str) -> str:
        """Filter candidates by the history and pick the most informative guess."""
        L = self.word_length
        answers, allowed = _tables(L, self.common_only)
        history = [(m[1], m[2].split()) for m in HISTORY_RE.finditer(observation) if len(m[1]) == L]
        if not history:
            return f"\\boxed{{{_opener(L, self.common_only)}}}"
        alive = np.ones(len(answers), dtype=bool)
        for guess, marks in history:
            if len(marks) == L:
                alive &= patterns(_codes([guess], L), answers)[0] == _encode(marks)
        cand = answers[alive] if alive.any() else answers
        turns = [int(a or b) for a, b in TURNS_LEFT_RE.findall(observation)]
        last_turn = bool(turns) and turns[-1] == 1
        return f"\\boxed{{{_best_guess(cand, allowed, last_turn).tobytes().decode('ascii')}}}"
