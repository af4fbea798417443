"""Minesweeper: reveal every safe cell of a grid without hitting a mine."""

from __future__ import annotations

import itertools
import math
import re
from collections import deque

import numpy as np

from gemkit.envs.games.base import GameEnv, InvalidMove, Outcome
from gemkit.policy import SyncPolicy

#: Revealing cells earns at most this over a whole game; clearing the board adds 1.0.
SHAPING = 0.5
HIDDEN, FLAG, EMPTY, MINE, BOOM = "#", "F", ".", "*", "X"
ROW_RE = re.compile(r"^\s*(\d+) \|((?: \S+)+)\s*$", re.MULTILINE)
MINES_RE = re.compile(r"The board has (\d+) mines")


def neighbours(r: int, c: int, rows: int, cols: int) -> list[tuple[int, int]]:
    """The up to 8 cells around (r, c), 0-based."""
    return [
        (r + dr, c + dc)
        for dr in (-1, 0, 1)
        for dc in (-1, 0, 1)
        if (dr or dc) and 0 <= r + dr < rows and 0 <= c + dc < cols
    ]


def _number(text: str) -> int:
    """The value of a digit string, or 0 when it is too long for any board (never parsed whole)."""
    digits = text.lstrip("0")
    return int(digits) if digits and len(digits) <= 4 else 0


class Minesweeper(GameEnv):
    """Reveal all safe cells of a `rows` x `cols` grid hiding `mines` mines.

    Coordinates are 1-based: row 1 is the top row, column 1 the left column. Mines are placed
    after the first reveal, away from that cell and its neighbours, so the first reveal is safe
    and opens an area. Revealing a cell with no mine around it opens its neighbours too.
    Reward: `0.5 * newly revealed / safe cells` per move, 1.0 for clearing the board; revealing
    a mine ends the game.
    """

    def __init__(self, rows: int = 8, cols: int = 8, mines: int = 10, max_turns: int = 100):
        super().__init__(max_turns)
        if not (2 <= rows <= 30 and 2 <= cols <= 30):
            raise ValueError(f"rows and cols must be in 2..30, got {rows}x{cols}")
        if not 1 <= mines <= rows * cols - 9:
            raise ValueError(
                f"mines must be in 1..{rows * cols - 9} for a {rows}x{cols} board "
                "(the first reveal and its neighbours are kept free), got {mines}"
            )
        self.rows, self.cols, self.mines = rows, cols, mines
        self.mine = np.zeros((rows, cols), dtype=bool)
        self.counts = np.zeros((rows, cols), dtype=np.int8)
        self.revealed = np.zeros((rows, cols), dtype=bool)
        self.flagged = np.zeros((rows, cols), dtype=bool)
        self.placed = False

    def rules(self) -> str:
        """Rules text."""
        return (
            f"Minesweeper: a {self.rows}x{self.cols} grid hides {self.mines} mines. Reveal every "
            "cell without a mine. A revealed cell shows how many of its 8 neighbours hold a "
            "mine ('.' means none, and its neighbours open automatically). Revealing a mine "
            "loses the game; your first reveal is always safe. Coordinates are 1-based: row 1 "
            f"is the top row, column 1 the left column. Moves: \\boxed{{reveal r c}} opens a "
            "cell, \\boxed{flag r c} marks a cell as a mine (flag it again to remove the flag)."
        )

    def move_format(self) -> str:
        """A boxed reveal or flag with 1-based row and column."""
        return (
            f"\\boxed{{reveal r c}} or \\boxed{{flag r c}} with row r in 1..{self.rows} and "
            f"column c in 1..{self.cols}, e.g. \\boxed{{reveal 1 1}}"
        )

    def new_game(self) -> None:
        """Clear the board; mines are placed at the first reveal."""
        shape = (self.rows, self.cols)
        self.mine = np.zeros(shape, dtype=bool)
        self.counts = np.zeros(shape, dtype=np.int8)
        self.revealed = np.zeros(shape, dtype=bool)
        self.flagged = np.zeros(shape, dtype=bool)
        self.placed = False

    def _place_mines(self, r: int, c: int) -> None:
        keep_free = {(r, c), *neighbours(r, c, self.rows, self.cols)}
        free = [i for i in range(self.rows * self.cols) if divmod(i, self.cols) not in keep_free]
        chosen = self.np_random.choice(len(free), size=self.mines, replace=False)
        for k in chosen:
            self.mine[divmod(free[int(k)], self.cols)] = True
        padded = np.pad(self.mine.astype(np.int8), 1)
        self.counts = np.sum(
            [
                padded[1 + dr : 1 + dr + self.rows, 1 + dc : 1 + dc + self.cols]
                for dr in (-1, 0, 1)
                for dc in (-1, 0, 1)
                if dr or dc
            ],
            axis=0,
        ).astype(np.int8)
        self.placed = True

    def parse(self, move: str) -> tuple[str, int, int]:
        """The action and 0-based cell in `move`, or raise `InvalidMove`."""
        parts = move.replace(",", " ").lower().split()
        if len(parts) != 3 or parts[0] not in ("reveal", "flag"):
            raise InvalidMove("a move is 'reveal' or 'flag' followed by a row and a column.")
        action, rs, cs = parts
        if not (rs.isascii() and rs.isdigit() and cs.isascii() and cs.isdigit()):
            raise InvalidMove(f"row and column must be whole numbers, got {rs[:12]!r} {cs[:12]!r}.")
        r, c = _number(rs), _number(cs)
        if not (1 <= r <= self.rows and 1 <= c <= self.cols):
            raise InvalidMove(
                f"({rs[:12]}, {cs[:12]}) is off the board; "
                f"rows are 1..{self.rows}, columns 1..{self.cols}."
            )
        return action, r - 1, c - 1

    def play(self, move: str) -> Outcome:
        """Reveal or flag one cell."""
        action, r, c = self.parse(move)
        where = f"({r + 1}, {c + 1})"
        if self.revealed[r, c]:
            raise InvalidMove(f"cell {where} is already revealed.")
        if action == "flag":
            self.flagged[r, c] = not self.flagged[r, c]
            return Outcome(f"{'Flagged' if self.flagged[r, c] else 'Removed the flag at'} {where}.")
        if self.flagged[r, c]:
            raise InvalidMove(f"cell {where} is flagged; flag it again to remove the flag first.")
        if not self.placed:
            self._place_mines(r, c)
        if self.mine[r, c]:
            board = self._board(show_mines=True, boom=(r, c))
            return Outcome(f"Boom! {where} was a mine. You lose.\n\n{board}", 0.0, True, False)
        opened = self._flood(r, c)
        safe = self.rows * self.cols - self.mines
        reward = SHAPING * opened / safe
        if int(self.revealed.sum()) == safe:
            board = self._board(show_mines=True)
            return Outcome(f"You cleared the board!\n\n{board}", reward + 1.0, True, True)
        return Outcome(f"Revealed {where}: {opened} cell(s) opened.", reward)

    def _flood(self, r: int, c: int) -> int:
        opened = 0
        queue = deque([(r, c)])
        while queue:
            cell = queue.popleft()
            if self.revealed[cell] or self.flagged[cell]:
                continue
            self.revealed[cell] = True
            opened += 1
            if self.counts[cell] == 0:
                queue.extend(
                    n for n in neighbours(*cell, self.rows, self.cols) if not self.revealed[n]
                )
        return opened

    def _symbol(self, r: int, c: int, show_mines: bool, boom: tuple[int, int] | None) -> str:
        if (r, c) == boom:
            return BOOM
        if show_mines and self.mine[r, c]:
            return MINE
        if self.revealed[r, c]:
            n = int(self.counts[r, c])
            return str(n) if n else EMPTY
        return FLAG if self.flagged[r, c] else HIDDEN

    def _board(self, show_mines: bool = False, boom: tuple[int, int] | None = None) -> str:
        w = len(str(max(self.rows, self.cols)))
        header = " " * (w + 3) + " ".join(f"{c:>{w}}" for c in range(1, self.cols + 1))
        lines = [header]
        for r in range(self.rows):
            cells = " ".join(
                f"{self._symbol(r, c, show_mines, boom):>{w}}" for c in range(self.cols)
            )
            lines.append(f"{r + 1:>{w}} | {cells}")
        return "\n".join(lines)

    def state_text(self) -> str:
        """The board as the player sees it."""
        hidden_safe = self.rows * self.cols - self.mines - int(self.revealed.sum())
        return (
            f"The board has {self.mines} mines ({HIDDEN} hidden, {FLAG} flagged, {EMPTY} no mine "
            f"around, 1-8 mines around); rows top to bottom, columns left to right:\n"
            f"{self._board()}\n"
            f"Flags placed: {int(self.flagged.sum())}. Safe cells still hidden: {hidden_safe}."
        )

    def random_action(self, rng: np.random.Generator) -> str:
        """A random reveal (or, one time in five, a flag) on a random cell."""
        action = "flag" if rng.random() < 0.2 else "reveal"
        r, c = int(rng.integers(1, self.rows + 1)), int(rng.integers(1, self.cols + 1))
        return f"\\boxed{{{action} {r} {c}}}"


def parse_board(observation: str, rows: int, cols: int) -> list[list[str]] | None:
    """The last board drawn in `observation` as a grid of symbols, or None."""
    grid: dict[int, list[str]] = {}
    for m in ROW_RE.finditer(observation):
        r, cells = int(m[1]), m[2].split()
        if r == 1:
            grid = {}
        if len(cells) == cols and 1 <= r <= rows:
            grid[r] = cells
    if len(grid) != rows:
        return None
    return [grid[r] for r in range(1, rows + 1)]


def mine_probabilities(
    board: list[list[str]], mines: int, node_limit: int = 200_000
) -> tuple[dict[tuple[int, int], float], set[tuple[int, int]]]:
    """Mine probability of each hidden cell (0-based) and the cells proved to be mines.

    Propagates single-cell and subset rules first; the cells they do not settle get exact
    probabilities by enumerating the frontier (weighted by how the remaining mines can lie in
    the cells away from the frontier), or a local estimate past `node_limit` search nodes.
    """
    rows, cols = len(board), len(board[0])
    hidden = {(r, c) for r in range(rows) for c in range(cols) if board[r][c] in (HIDDEN, FLAG)}
    constraints: list[tuple[frozenset, int]] = []
    for r, c in itertools.product(range(rows), range(cols)):
        s = board[r][c]
        if s == EMPTY or s.isdigit():
            n = 0 if s == EMPTY else int(s)
            around = frozenset(x for x in neighbours(r, c, rows, cols) if x in hidden)
            if around:
                constraints.append((around, n))
    safe: set[tuple[int, int]] = set()
    mined: set[tuple[int, int]] = set()
    changed = True
    while changed:
        changed = False
        reduced = {}
        for cells, n in constraints:
            n -= len(cells & mined)
            cells = cells - mined - safe
            if cells:
                reduced[cells] = n
        constraints = list(reduced.items())
        for cells, n in constraints:
            if n == 0:
                safe |= cells
                changed = True
            elif n == len(cells):
                mined |= cells
                changed = True
        if changed:
            continue
        for (a, na), (b, nb) in itertools.permutations(constraints, 2):
            if a < b and (b - a) not in reduced:
                reduced[b - a] = nb - na
                constraints.append((b - a, nb - na))
                changed = True
    probs = {x: 0.0 for x in safe} | {x: 1.0 for x in mined}
    left = mines - len(mined)
    frontier = sorted({x for cells, _ in constraints for x in cells})
    others = sorted(hidden - safe - mined - set(frontier))
    # enumerate frontier assignments grouped by their number of mines
    by_cell: dict[tuple[int, int], list[int]] = {x: [] for x in frontier}
    for i, (cells, _) in enumerate(constraints):
        for x in cells:
            by_cell[x].append(i)
    need = [n for _, n in constraints]
    room = [len(cells) for cells, _ in constraints]
    ways: dict[int, int] = {}
    hits: dict[int, list[int]] = {}
    assignment = [0] * len(frontier)
    nodes = 0

    def search(i: int, used: int) -> bool:
        nonlocal nodes
        nodes += 1
        if nodes > node_limit:
            return False
        if used > left:
            return True
        if i == len(frontier):
            if all(n == 0 for n in need):
                ways[used] = ways.get(used, 0) + 1
                row = hits.setdefault(used, [0] * len(frontier))
                for j, v in enumerate(assignment):
                    row[j] += v
            return True
        for v in (0, 1):
            ok = True
            for k in by_cell[frontier[i]]:
                need[k] -= v
                room[k] -= 1
                if need[k] < 0 or need[k] > room[k]:
                    ok = False
            assignment[i] = v
            if ok and not search(i + 1, used + v):
                return False
            for k in by_cell[frontier[i]]:
                need[k] += v
                room[k] += 1
        return True

    complete = search(0, 0)
    weight = {k: w * math.comb(len(others), left - k) for k, w in ways.items() if left - k >= 0}
    total = sum(weight.values())
    if complete and total > 0:
        for j, x in enumerate(frontier):
            probs[x] = sum(hits[k][j] * math.comb(len(others), left - k) for k in weight) / total
        if others:
            expected = sum(weight[k] * (left - k) for k in weight) / total
            probs.update({x: expected / len(others) for x in others})
    else:  # too many assignments to count: estimate from the tightest constraint per cell
        for x in frontier:
            probs[x] = max(n / len(cells) for cells, n in constraints if x in cells)
        density = left / max(1, len(frontier) + len(others))
        probs.update({x: density for x in others})
    return probs, mined


class MinesweeperExpert(SyncPolicy):
    """Constraint propagation (single-cell and subset rules), then the lowest-risk guess."""

    def __init__(self, rows: int = 8, cols: int = 8, mines: int = 10, **_: object):
        self.rows, self.cols, self.mines = rows, cols, mines

    def reset(self) -> None:
        """Nothing to forget: the board in each observation says everything."""

    def choose(self, observation: str) -> str:
        """Reveal a proved-safe cell, else the hidden cell least likely to hold a mine."""
        board = parse_board(observation, self.rows, self.cols)
        if board is None or all(s in (HIDDEN, FLAG) for row in board for s in row):
            return f"\\boxed{{reveal {self.rows // 2 + 1} {self.cols // 2 + 1}}}"
        m = MINES_RE.search(observation)
        probs, _ = mine_probabilities(board, int(m[1]) if m else self.mines)
        if not probs:
            return "\\boxed{reveal 1 1}"

        def unknown_around(x: tuple[int, int]) -> int:
            return sum(
                board[a][b] in (HIDDEN, FLAG) for a, b in neighbours(*x, self.rows, self.cols)
            )

        # among equally safe cells, one with more hidden neighbours is likelier to open an area
        r, c = min(probs, key=lambda x: (round(probs[x], 9), -unknown_around(x), x))
        action = "flag" if board[r][c] == FLAG else "reveal"  # lift a stray flag before revealing
        return f"\\boxed{{{action} {r + 1} {c + 1}}}"
