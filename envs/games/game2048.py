"""Game2048: slide the tiles of a grid; equal tiles that collide merge; reach the target tile."""

from __future__ import annotations

import math
import re
from functools import cache

import numpy as np

from gemkit.envs.games.base import GameEnv, InvalidMove, Outcome
from gemkit.policy import SyncPolicy

DIRECTIONS = ("up", "down", "left", "right")
ALIASES = {d: d for d in DIRECTIONS} | {d[0]: d for d in DIRECTIONS}
ROW_RE = re.compile(r"^\s*((?:(?:\d+|\.)\s+)*(?:\d+|\.))\s*$")


def slide_line(line: list[int]) -> tuple[list[int], list[int]]:
    """Slide one line towards index 0; return the new line and the values of merged tiles.

    Each tile merges at most once per move, nearest the wall first: [2,2,2,2] -> [4,4],
    [4,4,8] -> [8,8].
    """
    tiles = [v for v in line if v]
    out: list[int] = []
    merged: list[int] = []
    i = 0
    while i < len(tiles):
        if i + 1 < len(tiles) and tiles[i] == tiles[i + 1]:
            out.append(tiles[i] * 2)
            merged.append(tiles[i] * 2)
            i += 2
        else:
            out.append(tiles[i])
            i += 1
    return out + [0] * (len(line) - len(out)), merged


def slide_board(board: np.ndarray, direction: str) -> tuple[np.ndarray, list[int]]:
    """The board after sliding every tile towards `direction`, and the merged values."""
    # Rotate so the move becomes "left", slide each row, rotate back.
    turns = {"left": 0, "up": 1, "right": 2, "down": 3}[direction]
    rotated = np.rot90(board, turns)
    rows, merged = [], []
    for row in rotated:
        new, m = slide_line([int(v) for v in row])
        rows.append(new)
        merged += m
    return np.rot90(np.array(rows, dtype=board.dtype), -turns), merged


class Game2048(GameEnv):
    """2048 on a `size` x `size` grid; the game is won when a tile reaches `target`.

    Each merge earns its new tile's value / (4 * target * log2(target)), about 1/3 over a
    winning game; reaching the target earns 1.0 more. A move that changes nothing is invalid.
    The game ends in failure when no move can change the board.
    """

    def __init__(self, size: int = 4, target: int = 128, max_turns: int = 400):
        super().__init__(max_turns)
        if not 2 <= size <= 8:
            raise ValueError(f"size must be in 2..8, got {size}")
        if target < 8 or target & (target - 1):
            raise ValueError(f"target must be a power of two >= 8, got {target}")
        self.size, self.target = size, target
        self.board = np.zeros((size, size), dtype=np.int64)
        self.score = 0
        self.merge_scale = 1.0 / (4 * target * math.log2(target))

    def rules(self) -> str:
        """Rules text."""
        return (
            f"2048 on a {self.size}x{self.size} grid. Each move slides every tile as far as it "
            "goes in one direction (up, down, left or right); two equal tiles that collide merge "
            "into one tile of twice the value, and a tile merges at most once per move. After "
            "each move a new tile (2 with probability 0.9, otherwise 4) appears on a random empty "
            f"cell. A move that changes nothing is invalid. You win when a tile reaches "
            f"{self.target}; you lose when no move can change the board. Merges score points."
        )

    def move_format(self) -> str:
        """A boxed direction."""
        return "\\boxed{up}, \\boxed{down}, \\boxed{left} or \\boxed{right} (or u/d/l/r)"

    def new_game(self) -> None:
        """An empty board with two random tiles."""
        self.board = np.zeros((self.size, self.size), dtype=np.int64)
        self.score = 0
        self._spawn()
        self._spawn()

    def _spawn(self) -> None:
        empty = np.argwhere(self.board == 0)
        r, c = empty[int(self.np_random.integers(len(empty)))]
        self.board[r, c] = 2 if self.np_random.random() < 0.9 else 4

    def _can_move(self) -> bool:
        return any(
            not np.array_equal(slide_board(self.board, d)[0], self.board) for d in DIRECTIONS
        )

    def play(self, move: str) -> Outcome:
        """Slide, merge, spawn a tile, and check for a win or a stuck board."""
        direction = ALIASES.get(move.strip().lower()) if len(move) < 20 else None
        if direction is None:
            raise InvalidMove(f"{move[:40]!r} is not a direction: use up, down, left or right.")
        new, merged = slide_board(self.board, direction)
        if np.array_equal(new, self.board):
            raise InvalidMove(f"sliding {direction} does nothing: the board does not change.")
        self.board = new
        gained = sum(merged)
        self.score += gained
        reward = gained * self.merge_scale
        text = f"You slid {direction}" + (f" and merged tiles worth {gained}." if merged else ".")
        if int(self.board.max()) >= self.target:
            return Outcome(
                text + f" You reached {self.target}: you win!",
                reward + 1.0,
                True,
                True,
                info={"score": self.score},
            )
        self._spawn()
        if not self._can_move():
            return Outcome(
                text + " No move can change the board: game over.",
                reward,
                True,
                False,
                info={"score": self.score},
            )
        return Outcome(text, reward, info={"score": self.score})

    def state_text(self) -> str:
        """The grid (. for empty), score and largest tile."""
        width = max(4, len(str(self.target)))
        rows = [" ".join(f"{v if v else '.':>{width}}" for v in row) for row in self.board.tolist()]
        return (
            "Board:\n"
            + "\n".join(rows)
            + f"\nScore: {self.score}. Largest tile: {int(self.board.max())}."
        )

    def random_action(self, rng: np.random.Generator) -> str:
        """A random direction."""
        return f"\\boxed{{{DIRECTIONS[int(rng.integers(4))]}}}"


# -- expert -------------------------------------------------------------------------------------
# Boards are tuples of exponents (0 = empty, k = 2**k), row-major; a row's slide and score come
# from a cached table, so a search node costs a few dict look-ups.


@cache
def _slide_row(row: tuple[int, ...]) -> tuple[tuple[int, ...], int]:
    new, merged = slide_line([1 << e if e else 0 for e in row])
    return tuple(v.bit_length() - 1 if v else 0 for v in new), sum(merged)


@cache
def _row_heuristic(row: tuple[int, ...]) -> float:
    # Weights from the well-known nneonneo 2048 AI: favour empty cells, merges, monotone rows
    # and penalise large scattered tiles.
    empty = row.count(0)
    merges, prev, counter = 0, 0, 0
    for e in row:
        if e == 0:
            continue
        if prev == e:
            counter += 1
        elif counter > 0:
            merges += 1 + counter
            counter = 0
        prev = e
    if counter > 0:
        merges += 1 + counter
    mono_left = mono_right = 0.0
    for a, b in zip(row, row[1:], strict=False):
        if a > b:
            mono_left += a**4 - b**4
        else:
            mono_right += b**4 - a**4
    total = sum(e**3.5 for e in row)
    return 200000 + 270 * empty + 700 * merges - 47 * min(mono_left, mono_right) - 11 * total


def _lines(board: tuple[int, ...], n: int, direction: str) -> list[tuple[int, ...]]:
    if direction in ("left", "right"):
        lines = [board[i * n : (i + 1) * n] for i in range(n)]
    else:
        lines = [board[i::n] for i in range(n)]
    return [ln[::-1] for ln in lines] if direction in ("right", "down") else lines


def expert_slide(board: tuple[int, ...], n: int, direction: str) -> tuple[int, ...]:
    """The exponent board after a slide (no spawn)."""
    lines = [_slide_row(ln)[0] for ln in _lines(board, n, direction)]
    if direction in ("right", "down"):
        lines = [ln[::-1] for ln in lines]
    if direction in ("left", "right"):
        return tuple(e for ln in lines for e in ln)
    return tuple(lines[c][r] for r in range(n) for c in range(n))


def heuristic(board: tuple[int, ...], n: int) -> float:
    """Sum of row and column heuristics."""
    return sum(
        _row_heuristic(board[i * n : (i + 1) * n]) + _row_heuristic(board[i::n]) for i in range(n)
    )


def _chance(board: tuple[int, ...], n: int, depth: int) -> float:
    empty = [i for i, e in enumerate(board) if e == 0]
    if not empty:
        return heuristic(board, n)
    total = 0.0
    if depth > 1:
        for i in empty:
            for e, p in ((1, 0.9), (2, 0.1)):
                total += p * _best(board[:i] + (e,) + board[i + 1 :], n, depth - 1)[1]
        return total / len(empty)
    # At the leaves a spawn changes one row and one column: re-score only those two lines.
    rows = [board[i * n : (i + 1) * n] for i in range(n)]
    cols = [board[i::n] for i in range(n)]
    row_h = [_row_heuristic(r) for r in rows]
    col_h = [_row_heuristic(c) for c in cols]
    base = sum(row_h) + sum(col_h)
    for i in empty:
        r, c = divmod(i, n)
        row, col = rows[r], cols[c]
        for e, p in ((1, 0.9), (2, 0.1)):
            total += p * (
                base
                - row_h[r]
                - col_h[c]
                + _row_heuristic(row[:c] + (e,) + row[c + 1 :])
                + _row_heuristic(col[:r] + (e,) + col[r + 1 :])
            )
    return total / len(empty)


def _best(board: tuple[int, ...], n: int, depth: int) -> tuple[str | None, float]:
    best, value = None, -math.inf
    for d in DIRECTIONS:
        nb = expert_slide(board, n, d)
        if nb == board:
            continue
        v = _chance(nb, n, depth)
        if v > value:
            best, value = d, v
    return best, (value if best is not None else 0.0)


def parse_board(observation: str) -> list[list[int]] | None:
    """The last grid shown in an observation, as rows of values (0 for empty)."""
    start = observation.rfind("Board:\n")
    if start < 0:
        return None
    rows = []
    for line in observation[start + 7 :].splitlines():
        if not ROW_RE.match(line):
            break
        rows.append([0 if t == "." else int(t) for t in line.split()])
    if not rows or any(len(r) != len(rows) for r in rows):
        return None
    return rows


class Game2048Expert(SyncPolicy):
    """Expectimax over slides and tile spawns with a monotonicity/empty-cell heuristic.

    Searches one slide and one spawn ahead, two when at most two cells are empty.
    """

    def __init__(self, size: int = 4, **_: object):
        self.size = size

    def choose(self, observation: str) -> str:
        """Parse the grid and answer the slide with the best expected heuristic."""
        rows = parse_board(observation)
        if rows is None:
            return "\\boxed{left}"
        n = len(rows)
        board = tuple(v.bit_length() - 1 if v else 0 for r in rows for v in r)
        depth = 2 if board.count(0) <= 2 else 1
        move, _ = _best(board, n, depth)
        return f"\\boxed{{{move or 'left'}}}"
