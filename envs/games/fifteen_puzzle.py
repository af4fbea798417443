"""FifteenPuzzle: slide numbered tiles into order by moving the blank around the board."""

from __future__ import annotations

import heapq
import re
from functools import cache

import numpy as np

from gemkit.envs.games.base import GameEnv, InvalidMove, Outcome
from gemkit.policy import SyncPolicy

#: (row step, column step) of the blank for each move.
STEPS = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}
ALIASES = {d: d for d in STEPS} | {d[0]: d for d in STEPS}
OPPOSITE = {"up": "down", "down": "up", "left": "right", "right": "left"}
ROW_RE = re.compile(r"^\s*((?:(?:\d+|_)\s+)*(?:\d+|_))\s*$")
HEADER = "Board (_ = blank):\n"
#: Shaping rewards of a solved game add up to this; solving adds 1.0.
SHAPING_TOTAL = 0.5

Board = tuple[int, ...]


def solved_board(size: int) -> Board:
    """Tiles 1..n*n-1 in reading order, blank (0) last."""
    return tuple(range(1, size * size)) + (0,)


def neighbour(board: Board, size: int, direction: str) -> Board | None:
    """The board after the blank moves one cell in `direction`, or None at the edge."""
    b = board.index(0)
    dr, dc = STEPS[direction]
    r, c = divmod(b, size)
    if not (0 <= r + dr < size and 0 <= c + dc < size):
        return None
    t = (r + dr) * size + c + dc
    out = list(board)
    out[b], out[t] = out[t], 0
    return tuple(out)


def manhattan(board: Board, size: int) -> int:
    """Sum over tiles of the grid distance to their home cell."""
    total = 0
    for i, t in enumerate(board):
        if t:
            g = t - 1
            total += abs(i // size - g // size) + abs(i % size - g % size)
    return total


def is_solvable(board: Board, size: int) -> bool:
    """Whether the blank's moves can reach the solved board (the classic parity rule)."""
    tiles = [t for t in board if t]
    inversions = sum(
        1 for i in range(len(tiles)) for j in range(i + 1, len(tiles)) if tiles[i] > tiles[j]
    )
    if size % 2:
        return inversions % 2 == 0
    blank_row_from_bottom = size - board.index(0) // size
    return (inversions + blank_row_from_bottom) % 2 == 1


class FifteenPuzzle(GameEnv):
    """The sliding-tile puzzle on a `size` x `size` board, scrambled by `scramble` blank moves.

    Moves name the direction the BLANK moves. Each move earns
    `SHAPING_TOTAL * (distance before - distance after) / starting distance`, with distance the
    tiles' total Manhattan distance to home, so a solved game's shaping adds up to 0.5;
    solving earns 1.0 more.
    """

    def __init__(self, size: int = 3, scramble: int = 10, max_turns: int = 40):
        super().__init__(max_turns)
        if not 2 <= size <= 6:
            raise ValueError(f"size must be in 2..6, got {size}")
        if scramble < 1:
            raise ValueError(f"scramble must be >= 1, got {scramble}")
        self.size, self.scramble = size, scramble
        self.board = solved_board(size)
        self.start_distance = 1

    def rules(self) -> str:
        """Rules text."""
        n = self.size
        return (
            f"Sliding puzzle on a {n}x{n} board with tiles 1 to {n * n - 1} and one blank (_). "
            "A move slides the BLANK one cell up, down, left or right: the tile on that side "
            f"moves into the gap. Goal: tiles 1 to {n * n - 1} in reading order (left to right, "
            "top to bottom) with the blank in the bottom-right corner."
        )

    def move_format(self) -> str:
        """The direction the blank moves."""
        return (
            "\\boxed{up}, \\boxed{down}, \\boxed{left} or \\boxed{right}: the direction the "
            "blank moves"
        )

    def new_game(self) -> None:
        """Scramble the solved board with random blank moves, never undoing the last one."""
        while True:
            board, last = solved_board(self.size), ""  # no move yet: nothing to undo
            for _ in range(self.scramble):
                options = [
                    d
                    for d in STEPS
                    if d != OPPOSITE.get(last) and neighbour(board, self.size, d) is not None
                ]
                last = options[int(self.np_random.integers(len(options)))]
                board = neighbour(board, self.size, last)  # type: ignore[assignment]
            if board != solved_board(self.size):
                break
        self.board = board
        self.start_distance = manhattan(board, self.size)

    def play(self, move: str) -> Outcome:
        """Move the blank; reward the change in Manhattan distance."""
        direction = ALIASES.get(move.strip().lower()) if len(move) < 20 else None
        if direction is None:
            raise InvalidMove(
                f"{move[:40]!r} is not a direction: name where the blank moves (up, down, left, "
                "right)."
            )
        new = neighbour(self.board, self.size, direction)
        if new is None:
            raise InvalidMove(f"the blank is on the {direction} edge and cannot move {direction}.")
        before = manhattan(self.board, self.size)
        tile = self.board[new.index(0)]
        self.board = new
        after = manhattan(new, self.size)
        reward = SHAPING_TOTAL * (before - after) / self.start_distance
        text = f"The blank moved {direction} (tile {tile} slid into the gap)."
        if after == 0:
            return Outcome(text + " The puzzle is solved!", reward + 1.0, True, True)
        return Outcome(text, reward, info={"distance": after})

    def state_text(self) -> str:
        """The board, blank as `_`."""
        width = len(str(self.size * self.size - 1))
        rows = [
            " ".join(
                f"{t if t else '_':>{width}}"
                for t in self.board[r * self.size : (r + 1) * self.size]
            )
            for r in range(self.size)
        ]
        return HEADER + "\n".join(rows)

    def random_action(self, rng: np.random.Generator) -> str:
        """A random direction."""
        return f"\\boxed{{{list(STEPS)[int(rng.integers(4))]}}}"


# -- expert -------------------------------------------------------------------------------------


@cache
def _line_conflict(line: tuple[int, ...], size: int, index: int, is_row: bool) -> int:
    """2 x tiles that must leave this line to let the rest pass (goal line = this line)."""
    keys = []
    for t in line:
        if not t:
            continue
        gr, gc = divmod(t - 1, size)
        if (gr if is_row else gc) == index:
            keys.append(gc if is_row else gr)
    if len(keys) < 2:
        return 0
    # Tiles outside a longest increasing run must each step out and back: 2 moves apiece.
    lis: list[int] = []
    for k in keys:
        lo, hi = 0, len(lis)
        while lo < hi:
            mid = (lo + hi) // 2
            if lis[mid] < k:
                lo = mid + 1
            else:
                hi = mid
        lis[lo : lo + 1] = [k]
    return 2 * (len(keys) - len(lis))


def linear_conflict(board: Board, size: int) -> int:
    """Extra moves forced by tiles in their goal row/column but in the wrong order."""
    return sum(
        _line_conflict(board[i * size : (i + 1) * size], size, i, True)
        + _line_conflict(board[i::size], size, i, False)
        for i in range(size)
    )


def _heuristic(board: Board, size: int) -> int:
    h = manhattan(board, size)
    return h + linear_conflict(board, size) if size >= 4 else h


def ida_star(board: Board, size: int, node_limit: int = 100_000) -> list[str] | None:
    """Shortest blank-move list that solves `board` (IDA*), or None past `node_limit` nodes.

    The board is mutated in place and the heuristic updated incrementally: a move changes one
    tile's Manhattan distance and, for linear conflict, only the two lines that tile crosses.
    """
    n, cells = size, size * size
    md = [[0] * cells] + [
        [abs(p // n - (t - 1) // n) + abs(p % n - (t - 1) % n) for p in range(cells)]
        for t in range(1, cells)
    ]
    moves_from = [
        [
            (d, (p // n + dr) * n + p % n + dc)
            for d, (dr, dc) in STEPS.items()
            if 0 <= p // n + dr < n and 0 <= p % n + dc < n
        ]
        for p in range(cells)
    ]
    use_lc = size >= 4
    state = list(board)
    path: list[str] = []
    nodes = 0

    def conflicts(a: int, b: int, rows: bool) -> int:
        if rows:
            return _line_conflict(tuple(state[a * n : a * n + n]), n, a, True) + _line_conflict(
                tuple(state[b * n : b * n + n]), n, b, True
            )
        return _line_conflict(tuple(state[a::n]), n, a, False) + _line_conflict(
            tuple(state[b::n]), n, b, False
        )

    def search(blank: int, g: int, h: int, bound: int, banned: str | None) -> int:
        nonlocal nodes
        nodes += 1
        if nodes > node_limit:
            raise TimeoutError
        if g + h > bound:
            return g + h
        if h == 0:  # Manhattan distance 0 means solved
            return -1
        least = 1 << 30
        for d, q in moves_from[blank]:
            if d == banned:
                continue
            t = state[q]
            dh = md[t][blank] - md[t][q]
            if use_lc:
                # A horizontal move changes the tile's column; a vertical one its row.
                rows = q // n != blank // n
                a, b = (q // n, blank // n) if rows else (q % n, blank % n)
                before = conflicts(a, b, rows)
                state[blank], state[q] = t, 0
                dh += conflicts(a, b, rows) - before
            else:
                state[blank], state[q] = t, 0
            path.append(d)
            found = search(q, g + 1, h + dh, bound, OPPOSITE[d])
            if found < 0:
                return -1
            path.pop()
            state[q], state[blank] = t, 0
            least = min(least, found)
        return least

    bound = h0 = _heuristic(board, size)
    try:
        while True:
            found = search(board.index(0), 0, h0, bound, None)
            if found < 0:
                return path
            bound = found
    except TimeoutError:
        return None


def weighted_astar(board: Board, size: int, weight: float = 2.0) -> list[str]:
    """A short (not always shortest) solution: A* with an inflated heuristic."""
    goal = solved_board(size)
    frontier = [(weight * _heuristic(board, size), 0, board)]
    parent: dict[Board, tuple[Board, str] | None] = {board: None}
    cost = {board: 0}
    while frontier:
        _, g, b = heapq.heappop(frontier)
        if b == goal:
            break
        if g > cost[b]:
            continue
        for d in STEPS:
            nb = neighbour(b, size, d)
            if nb is None or cost.get(nb, 1 << 30) <= g + 1:
                continue
            cost[nb] = g + 1
            parent[nb] = (b, d)
            heapq.heappush(frontier, (g + 1 + weight * _heuristic(nb, size), g + 1, nb))
    moves, b = [], goal
    while parent.get(b) is not None:
        b, d = parent[b]  # type: ignore[misc]
        moves.append(d)
    return moves[::-1]


def parse_board(observation: str) -> tuple[Board, int] | None:
    """The last board shown in an observation and its size, or None."""
    start = observation.rfind(HEADER)
    if start < 0:
        return None
    rows = []
    for line in observation[start + len(HEADER) :].splitlines():
        if not ROW_RE.match(line):
            break
        rows.append([0 if t == "_" else int(t) for t in line.split()])
    size = len(rows)
    if size < 2 or any(len(r) != size for r in rows):
        return None
    board = tuple(t for r in rows for t in r)
    if sorted(board) != list(range(size * size)):
        return None
    return board, size


class FifteenPuzzleExpert(SyncPolicy):
    """Solves the board it reads with IDA* (Manhattan distance, plus linear conflict from 4x4).

    It plans once and replays the plan while the board is the one it expects; past a node
    budget it settles for weighted A*, which is fast and near-optimal.
    """

    def __init__(self, size: int = 3, **_: object):
        self.size = size
        self.reset()

    def reset(self) -> None:
        """Forget the plan."""
        self.plan: list[tuple[Board, str]] = []

    def choose(self, observation: str) -> str:
        """Play the next move of the plan, replanning if the board is not the expected one."""
        parsed = parse_board(observation)
        if parsed is None:
            return "\\boxed{up}"
        board, size = parsed
        if not is_solvable(board, size):
            return "\\boxed{up}"
        if not self.plan or self.plan[0][0] != board:
            moves = ida_star(board, size)
            if moves is None:
                moves = weighted_astar(board, size)
            self.plan, b = [], board
            for d in moves:
                self.plan.append((b, d))
                b = neighbour(b, size, d)  # type: ignore[assignment]
        if not self.plan:
            return "\\boxed{up}"
        return f"\\boxed{{{self.plan.pop(0)[1]}}}"
