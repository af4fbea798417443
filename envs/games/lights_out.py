"""LightsOut: press cells to toggle them and their neighbours until every light is off."""

from __future__ import annotations

import itertools
import re

import numpy as np

from gemkit.envs.games.base import GameEnv, InvalidMove, Outcome
from gemkit.policy import SyncPolicy

MOVE_RE = re.compile(r"^\(?\s*(\d{1,3})\s*(?:,|\s)\s*(\d{1,3})\s*\)?$")
HEADER = "Lights (1 = on, 0 = off; rows and columns numbered from 1):\n"
ROW_RE = re.compile(r"^\s*\d+:((?:\s+[01])+)\s*$")
#: Shaping rewards of a solved game add up to this; switching the last light off adds 1.0.
SHAPING_TOTAL = 0.5


def press(grid: np.ndarray, r: int, c: int) -> np.ndarray:
    """The grid after pressing (r, c), 0-based: the cell and its orthogonal neighbours flip."""
    out = grid.copy()
    n, m = grid.shape
    for dr, dc in ((0, 0), (1, 0), (-1, 0), (0, 1), (0, -1)):
        rr, cc = r + dr, c + dc
        if 0 <= rr < n and 0 <= cc < m:
            out[rr, cc] ^= 1
    return out


def solve_presses(grid: np.ndarray) -> list[tuple[int, int]] | None:
    """The fewest presses (0-based cells) that switch every light off, or None if impossible.

    Pressing is linear over GF(2): lights = A @ presses. Gaussian elimination gives one
    solution and the null space; every solution is that one plus a null-space combination, and
    the lightest is kept (the null space is tiny for practical sizes: 5x5 has dimension 2).
    """
    n, m = grid.shape
    cells = n * m
    a = np.zeros((cells, cells + 1), dtype=np.uint8)
    for r in range(n):
        for c in range(m):
            a[:cells, r * m + c] = press(np.zeros((n, m), np.uint8), r, c).ravel()
    a[:, cells] = grid.ravel() & 1
    pivots: list[int] = []
    row = 0
    for col in range(cells):
        hit = next((i for i in range(row, cells) if a[i, col]), None)
        if hit is None:
            continue
        a[[row, hit]] = a[[hit, row]]
        for i in range(cells):
            if i != row and a[i, col]:
                a[i] ^= a[row]
        pivots.append(col)
        row += 1
    if a[row:, cells].any():
        return None
    free = [c for c in range(cells) if c not in set(pivots)]
    base = np.zeros(cells, dtype=np.uint8)
    for i, col in enumerate(pivots):
        base[col] = a[i, cells]
    kernel = []
    for f in free:
        v = np.zeros(cells, dtype=np.uint8)
        v[f] = 1
        for i, col in enumerate(pivots):
            v[col] = a[i, f]
        kernel.append(v)
    best = base
    if len(kernel) <= 12:
        for mask in itertools.product((0, 1), repeat=len(kernel)):
            cand = base.copy()
            for bit, v in zip(mask, kernel, strict=False):
                if bit:
                    cand ^= v
            if cand.sum() < best.sum():
                best = cand
    return [divmod(int(i), m) for i in np.flatnonzero(best)]


class LightsOut(GameEnv):
    """Lights Out on a `size` x `size` grid lit by `presses` distinct random presses.

    A two-step logic puzzle: deduce which cells to press (the order never matters, and pressing
    a cell twice undoes it), then press them. Each move earns
    `SHAPING_TOTAL * (lights on before - lights on after) / lights on at the start`; switching
    the last light off earns 1.0 more.
    """

    def __init__(self, size: int = 3, presses: int = 3, max_turns: int = 12):
        super().__init__(max_turns)
        if not 2 <= size <= 10:
            raise ValueError(f"size must be in 2..10, got {size}")
        if not 1 <= presses <= size * size:
            raise ValueError(f"presses must be in 1..{size * size}, got {presses}")
        self.size, self.presses = size, presses
        self.grid = np.zeros((size, size), dtype=np.uint8)
        self.start_lit = 1

    def rules(self) -> str:
        """Rules text."""
        n = self.size
        return (
            f"Lights Out on a {n}x{n} grid. Pressing a cell toggles it and its up, down, left "
            "and right neighbours (on becomes off, off becomes on). Goal: switch every light "
            "off. Pressing the same cell twice cancels out and the order of presses does not "
            "matter, so first work out which set of cells to press, then press them one per turn."
        )

    def move_format(self) -> str:
        """Boxed row and column, 1-based."""
        return f"\\boxed{{r c}} with row r and column c in 1..{self.size}, e.g. \\boxed{{1 2}}"

    def new_game(self) -> None:
        """Apply distinct random presses to the dark grid (so a solution exists)."""
        n = self.size
        while True:
            grid = np.zeros((n, n), dtype=np.uint8)
            for i in self.np_random.choice(n * n, size=self.presses, replace=False):
                grid = press(grid, *divmod(int(i), n))
            if grid.any():
                break
        self.grid = grid
        self.start_lit = int(grid.sum())

    def play(self, move: str) -> Outcome:
        """Press one cell."""
        m = MOVE_RE.match(move.strip()) if len(move) < 40 else None
        if m is None:
            raise InvalidMove(f"{move[:40]!r} is not a cell: give a row and a column number.")
        r, c = int(m[1]), int(m[2])
        if not (1 <= r <= self.size and 1 <= c <= self.size):
            raise InvalidMove(
                f"cell ({r}, {c}) is off the grid: rows and columns are 1..{self.size}."
            )
        before = int(self.grid.sum())
        self.grid = press(self.grid, r - 1, c - 1)
        after = int(self.grid.sum())
        reward = SHAPING_TOTAL * (before - after) / self.start_lit
        text = f"You pressed ({r}, {c})."
        if after == 0:
            return Outcome(text + " Every light is off: solved!", reward + 1.0, True, True)
        return Outcome(text + f" {after} light(s) on.", reward, info={"lights_on": after})

    def state_text(self) -> str:
        """The grid with row labels."""
        rows = [f"{r + 1}: " + " ".join(map(str, row)) for r, row in enumerate(self.grid.tolist())]
        return HEADER + "\n".join(rows)

    def random_action(self, rng: np.random.Generator) -> str:
        """A random cell."""
        r, c = rng.integers(1, self.size + 1, size=2)
        return f"\\boxed{{{int(r)} {int(c)}}}"


def parse_grid(observation: str) -> np.ndarray | None:
    """The last grid shown in an observation, or None."""
    start = observation.rfind(HEADER)
    if start < 0:
        return None
    rows = []
    for line in observation[start + len(HEADER) :].splitlines():
        m = ROW_RE.match(line)
        if m is None:
            break
        rows.append([int(x) for x in m[1].split()])
    if not rows or any(len(r) != len(rows[0]) for r in rows):
        return None
    return np.array(rows, dtype=np.uint8)


class LightsOutExpert(SyncPolicy):
    """Step one: solve the GF(2) system for the lightest press set. Step two: press it.

    It re-derives the press set from the grid it reads each turn, so a surprise (an invalid
    move, a changed grid) never derails it; the remaining set is the old one minus the press.
    """

    def __init__(self, **_: object):
        pass

    def choose(self, observation: str) -> str:
        """Answer the first cell of the lightest solution of the grid shown."""
        grid = parse_grid(observation)
        cells = solve_presses(grid) if grid is not None else None
        if not cells:
            return "\\boxed{1 1}"
        r, c = cells[0]
        return f"\\boxed{{{r + 1} {c + 1}}}"
