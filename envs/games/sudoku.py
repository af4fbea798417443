"""Sudoku: fill a 4x4 or 9x9 grid with a unique solution, one cell per move."""

from __future__ import annotations

import re

import numpy as np

from gemkit.envs.games.base import INVALID_PENALTY, GameEnv, InvalidMove, Outcome
from gemkit.policy import SyncPolicy

#: Correct cells earn at most this over a whole game; completing the grid adds 1.0.
SHAPING = 0.5
MAX_HOLES = {4: 10, 9: 55}
ROW_RE = re.compile(r"^\s*(\d+) \|([ 1-9.|]+)$", re.MULTILINE)
_SEPARATORS = re.compile(r"[\s,;=()]+")

Grid = list[list[int]]


def _box(n: int) -> int:
    return 2 if n == 4 else 3


def solve(grid: Grid, limit: int = 1, exclude: tuple[int, int, int] | None = None) -> list[Grid]:
    """Up to `limit` solutions of `grid` (0 = empty); `exclude=(r, c, v)` forbids v at (r, c).

    Bitmask backtracking that always branches on the empty cell with the fewest candidates.
    """
    n, b = len(grid), _box(len(grid))
    full = (1 << (n + 1)) - 2
    rows, cols, boxes = [0] * n, [0] * n, [0] * n
    empty = []
    g = [row[:] for row in grid]
    for r in range(n):
        for c in range(n):
            v = g[r][c]
            if v:
                bit = 1 << v
                k = (r // b) * b + c // b
                if (rows[r] | cols[c] | boxes[k]) & bit:
                    return []
                rows[r] |= bit
                cols[c] |= bit
                boxes[k] |= bit
            else:
                empty.append((r, c))
    banned = {(exclude[0], exclude[1]): 1 << exclude[2]} if exclude else {}
    out: list[Grid] = []

    def search() -> bool:
        best, best_mask, best_count = -1, 0, n + 1
        for i, (r, c) in enumerate(empty):
            if g[r][c]:
                continue
            mask = full & ~(rows[r] | cols[c] | boxes[(r // b) * b + c // b])
            mask &= ~banned.get((r, c), 0)
            count = mask.bit_count()
            if count < best_count:
                best, best_mask, best_count = i, mask, count
                if count <= 1:
                    break
        if best < 0:
            out.append([row[:] for row in g])
            return len(out) >= limit
        r, c = empty[best]
        k = (r // b) * b + c // b
        mask = best_mask
        while mask:
            bit = mask & -mask
            mask ^= bit
            g[r][c] = bit.bit_length() - 1
            rows[r] |= bit
            cols[c] |= bit
            boxes[k] |= bit
            if search():
                return True
            rows[r] ^= bit
            cols[c] ^= bit
            boxes[k] ^= bit
        g[r][c] = 0
        return False

    search()
    return out


def conflict(grid: Grid, r: int, c: int, v: int) -> str | None:
    """Where `v` already appears among (r, c)'s row, column or box (0-based), if anywhere."""
    n, b = len(grid), _box(len(grid))
    if v in grid[r]:
        return f"row {r + 1}"
    if any(grid[i][c] == v for i in range(n)):
        return f"column {c + 1}"
    r0, c0 = r // b * b, c // b * b
    if any(grid[i][j] == v for i in range(r0, r0 + b) for j in range(c0, c0 + b)):
        return "its box"
    return None


def _number(text: str) -> int:
    """The value of a digit string, or 0 when it is too long for any board (never parsed whole)."""
    digits = text.lstrip("0")
    return int(digits) if digits and len(digits) <= 4 else 0


class Sudoku(GameEnv):
    """Fill the empty cells of a `size` x `size` Sudoku (4 or 9) that has a unique solution.

    A move writes one digit. A digit that clashes with its row, column or box is an invalid
    move (the board shows the clash). A digit that breaks no rule but is not the solution's
    is a mistake: it is not written, and the `max_mistakes`-th mistake loses the game. The
    budget is what keeps the answer key hidden: with free retries, trying each digit that
    does not clash until one is accepted solves every grid without any deduction.
    Reward: `0.5 / holes` per correct cell, plus 1.0 when the grid is complete; an invalid
    move or a mistake costs `INVALID_PENALTY`.
    """

    def __init__(self, size: int = 9, holes: int = 40, max_turns: int = 80, max_mistakes: int = 3):
        super().__init__(max_turns)
        if size not in MAX_HOLES:
            raise ValueError(f"size must be 4 or 9, got {size}")
        if not 1 <= holes <= MAX_HOLES[size]:
            raise ValueError(f"holes must be in 1..{MAX_HOLES[size]} for size {size}, got {holes}")
        if max_mistakes < 1:
            raise ValueError(f"max_mistakes must be >= 1, got {max_mistakes}")
        self.size, self.holes, self.max_mistakes = size, holes, max_mistakes
        self.mistakes = 0
        self.solution: Grid = [[0] * size for _ in range(size)]
        self.grid: Grid = [[0] * size for _ in range(size)]

    def rules(self) -> str:
        """Rules text."""
        n, b = self.size, _box(self.size)
        return (
            f"Sudoku: fill the empty cells of this {n}x{n} grid so that every row, every column "
            f"and every {b}x{b} box holds each digit 1 to {n} exactly once. The puzzle has a "
            "unique solution. Each move writes one digit into one empty cell; rows and columns "
            "are numbered from 1 (row 1 is the top, column 1 the left). A digit that clashes "
            "with its row, column or box is rejected. A digit that clashes with nothing but is "
            f"not the solution's is a mistake and is not written; {self.max_mistakes} "
            "mistake(s) lose the game."
        )

    def move_format(self) -> str:
        """A boxed row, column and digit."""
        return f"\\boxed{{r c v}} (row, column, digit, each 1..{self.size}), e.g. \\boxed{{1 2 3}}"

    def new_game(self) -> None:
        """Shuffle a valid grid and empty `holes` cells, keeping the solution unique."""
        n = self.size
        self.mistakes = 0
        for _ in range(20):
            self.solution = self._shuffled_grid()
            puzzle = [row[:] for row in self.solution]
            removed = 0
            for cell in self.np_random.permutation(n * n):
                r, c = divmod(int(cell), n)
                v = puzzle[r][c]
                puzzle[r][c] = 0
                # still unique iff no solution puts another digit in the emptied cell
                if solve(puzzle, 1, exclude=(r, c, v)):
                    puzzle[r][c] = v
                    continue
                removed += 1
                if removed == self.holes:
                    self.grid = puzzle
                    return
        raise RuntimeError(f"could not empty {self.holes} cells keeping a unique solution")

    def _shuffled_grid(self) -> Grid:
        n, b = self.size, _box(self.size)
        rng = self.np_random

        def order() -> list[int]:
            return [
                int(band) * b + int(i) for band in rng.permutation(b) for i in rng.permutation(b)
            ]

        rows, cols, digits = order(), order(), [int(d) + 1 for d in rng.permutation(n)]
        grid = [[digits[(b * (r % b) + r // b + c) % n] for c in cols] for r in rows]
        if rng.random() < 0.5:
            grid = [list(col) for col in zip(*grid, strict=True)]
        return grid

    def parse(self, move: str) -> tuple[int, int, int]:
        """Row, column (0-based) and digit from `move`, or raise `InvalidMove`."""
        parts = [p for p in _SEPARATORS.split(move) if p]
        if len(parts) != 3 or not all(p.isascii() and p.isdigit() for p in parts):
            raise InvalidMove("a move is three whole numbers: row, column and digit.")
        r, c, v = (_number(p) for p in parts)
        n = self.size
        if not (1 <= r <= n and 1 <= c <= n):
            raise InvalidMove(
                f"({parts[0][:12]}, {parts[1][:12]}) is off the grid; rows and columns are 1..{n}."
            )
        if not 1 <= v <= n:
            raise InvalidMove(f"{parts[2][:12]} is not a digit of this grid; digits are 1..{n}.")
        return r - 1, c - 1, v

    def play(self, move: str) -> Outcome:
        """Write one digit if it is the solution's digit for that cell."""
        r, c, v = self.parse(move)
        where = f"({r + 1}, {c + 1})"
        if self.grid[r][c]:
            raise InvalidMove(f"cell {where} already holds {self.grid[r][c]}; pick an empty cell.")
        clash = conflict(self.grid, r, c, v)
        if clash:
            raise InvalidMove(f"{v} at {where} clashes: {v} is already in {clash}.")
        if self.solution[r][c] != v:
            self.mistakes += 1
            text = (
                f"Mistake: {v} at {where} breaks no rule yet but leads to a dead end; it was "
                f"not written ({self.mistakes} of {self.max_mistakes} mistakes)."
            )
            lost = self.mistakes >= self.max_mistakes
            if lost:
                text += " Out of mistakes: you lose."
            return Outcome(text, INVALID_PENALTY, lost, False, {"mistake": True})
        self.grid[r][c] = v
        reward = SHAPING / self.holes
        if all(all(row) for row in self.grid):
            return Outcome(f"{v} at {where}: solved!\n\n{self._board()}", reward + 1.0, True, True)
        return Outcome(f"{v} at {where}: correct.", reward)

    def _board(self) -> str:
        n, b = self.size, _box(self.size)
        header = "      " + "   ".join(
            " ".join(str(c + 1) for c in range(k, k + b)) for k in range(0, n, b)
        )
        rule = "    +" + "+".join("-" * (2 * b + 1) for _ in range(b)) + "+"
        lines = [header]
        for r in range(n):
            blocks = (
                " ".join(str(v or ".") for v in self.grid[r][k : k + b]) for k in range(0, n, b)
            )
            lines.append(f"{r + 1:>3} | " + " | ".join(blocks) + " |")
            if r % b == b - 1 and r < n - 1:
                lines.append(rule)
        return "\n".join(lines)

    def state_text(self) -> str:
        """The grid ('.' is empty) and the number of empty cells."""
        empty = sum(v == 0 for row in self.grid for v in row)
        return (
            f"Grid ('.' is an empty cell):\n{self._board()}\nEmpty cells left: {empty}. "
            f"Mistakes: {self.mistakes} of {self.max_mistakes}."
        )

    def random_action(self, rng: np.random.Generator) -> str:
        """A random cell and digit."""
        r, c, v = (int(x) for x in rng.integers(1, self.size + 1, size=3))
        return f"\\boxed{{{r} {c} {v}}}"


def parse_grid(observation: str, size: int) -> Grid | None:
    """The last grid drawn in `observation` (0 = empty), or None."""
    grid: dict[int, list[int]] = {}
    for m in ROW_RE.finditer(observation):
        r = int(m[1])
        cells = [0 if t == "." else int(t) for t in m[2].split() if t != "|"]
        if r == 1:
            grid = {}
        if 1 <= r <= size and len(cells) == size:
            grid[r] = cells
    if len(grid) != size:
        return None
    return [grid[r] for r in range(1, size + 1)]


class SudokuExpert(SyncPolicy):
    """Solves the grid it reads by backtracking and fills the first empty cell each turn."""

    def __init__(self, size: int = 9, **_: object):
        self.size = size
        self.reset()

    def reset(self) -> None:
        """Forget the cached solution."""
        self.solution: Grid | None = None

    def choose(self, observation: str) -> str:
        """Write the solution's digit into the first empty cell."""
        grid = parse_grid(observation, self.size)
        if grid is None:
            return "\\boxed{1 1 1}"
        known = self.solution
        if known is None or any(
            v and v != known[r][c] for r, row in enumerate(grid) for c, v in enumerate(row)
        ):
            found = solve(grid)
            if not found:
                return "\\boxed{1 1 1}"
            self.solution = known = found[0]
        for r, row in enumerate(grid):
            for c, v in enumerate(row):
                if not v:
                    return f"\\boxed{{{r + 1} {c + 1} {known[r][c]}}}"
        return "\\boxed{1 1 1}"
