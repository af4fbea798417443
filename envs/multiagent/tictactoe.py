"""Tic-tac-toe for two agents (`x` moves first, then `o`), with minimax and random players."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from gemkit.answers import extract_boxed
from gemkit.multiagent import MultiAgentEnv, MultiResetResult, MultiStepResult, staller
from gemkit.policy import SyncPolicy

LINES = ((0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6))
ROW_RE = re.compile(r"^\s*([XO1-9])\s*\|\s*([XO1-9])\s*\|\s*([XO1-9])\s*$", re.MULTILINE)
ROLE_RE = re.compile(r"You play ([XO])\b")
MARK = {"x": "X", "o": "O"}
OTHER = {"x": "o", "o": "x"}
#: the moves that name a cell: exactly one ASCII digit (int() would take '٥' or fail on '¹')
CELLS = frozenset("123456789")


def winner(board: tuple[str, ...] | list[str]) -> str | None:
    """The mark ('X' or 'O') with three in a line, or None."""
    for a, b, c in LINES:
        if board[a] and board[a] == board[b] == board[c]:
            return board[a]
    return None


def render_board(board: tuple[str, ...] | list[str]) -> str:
    """The board as three rows; free cells show their number 1-9."""
    cells = [board[i] or str(i + 1) for i in range(9)]
    rows = [f" {cells[r]} | {cells[r + 1]} | {cells[r + 2]}" for r in (0, 3, 6)]
    return "\n---+---+---\n".join(rows)


def parse_board(text: str) -> tuple[str, ...] | None:
    """The last board drawn in `text` as a 9-tuple of 'X', 'O' or '' (free), or None."""
    rows = ROW_RE.findall(text)
    if len(rows) < 3:
        return None
    cells = [c for row in rows[-3:] for c in row]
    return tuple(c if c in "XO" else "" for c in cells)


class TicTacToe(MultiAgentEnv):
    """Two agents take turns marking a 3x3 grid; three in a row wins (+1, the loser -1).

    Moves are `\\boxed{n}` with a free cell number 1-9. An invalid move costs
    `invalid_penalty` and the same agent moves again. After `max_turns` moves (valid or not)
    the game ends: the agent that made more invalid moves forfeits (-1, the other +1), so
    stalling never beats losing; with equal counts the game is truncated with no winner.
    """

    possible_agents = ["x", "o"]

    def __init__(self, max_turns: int = 20, invalid_penalty: float = 0.1):
        super().__init__()
        if max_turns < 9:
            raise ValueError(f"max_turns must be >= 9 (a full game), got {max_turns}")
        self.max_turns = max_turns
        self.invalid_penalty = invalid_penalty
        self.board: list[str] = [""] * 9
        self.turn = "x"
        self.moves = 0
        self.invalid = {a: 0 for a in self.possible_agents}
        self._obs: dict[str, str] = {}

    @property
    def current_agents(self) -> list[str]:
        """The agent to move, or nobody once the game is over."""
        return [self.turn] if self.agents else []

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> MultiResetResult:
        """Start with an empty board; `x` moves first."""
        super().reset(seed=seed)
        self.board = [""] * 9
        self.turn = "x"
        self.moves = 0
        self.invalid = {a: 0 for a in self.possible_agents}
        intro = (
            "Tic-tac-toe: X and O take turns marking a free cell; three in a row (across, down "
            "or diagonal) wins. Answer with the number of a free cell as \\boxed{n}, e.g. "
            "\\boxed{5}."
        )
        self._obs = {a: f"{intro}\n\n{self._view(a)}" for a in self.possible_agents}
        return dict(self._obs), self.per_agent({})

    def _view(self, agent: str, note: str = "") -> str:
        status = ""
        if self.agents:
            status = "Your move." if agent == self.turn else f"Waiting for {MARK[self.turn]}."
        head = f"{note}\n\n" if note else ""
        return f"{head}You play {MARK[agent]}.\n{render_board(self.board)}\n{status}".rstrip()

    def _parse(self, action: Any) -> tuple[int | None, str]:
        move = extract_boxed(action) if isinstance(action, str) else None
        if move is None:
            return (
                None,
                "no move found: answer with a free cell number as \\boxed{n}, e.g. \\boxed{5}.",
            )
        if move not in CELLS:
            return None, f"{move[:20]!r} is not a cell number; cells are numbered 1-9."
        cell = int(move) - 1
        if self.board[cell]:
            free = ", ".join(str(i + 1) for i in range(9) if not self.board[i])
            return None, f"cell {cell + 1} is taken by {self.board[cell]}; free cells: {free}."
        return cell, ""

    def step(self, actions: Mapping[str, Any]) -> MultiStepResult:
        """Apply the move of the agent on turn; others' actions are ignored with a note."""
        valid, problems = self.split_actions(actions)
        rewards = self.per_agent(0.0)
        infos: dict[str, dict[str, Any]] = self.per_agent({})
        notes = dict(problems)
        over = not self.agents
        terminated = self.per_agent(over)
        truncated = self.per_agent(False)
        mover = self.turn
        if not over and mover in valid:
            self.moves += 1
            cell, error = self._parse(valid[mover])
            if cell is None:
                rewards[mover] = -self.invalid_penalty
                infos[mover]["invalid"] = True
                self.invalid[mover] += 1
                notes[mover] = f"Invalid move: {error}"
            else:
                self.board[cell] = MARK[mover]
                other = OTHER[mover]
                won = winner(self.board)
                if won or all(self.board):
                    terminated = self.per_agent(True)
                    self.agents = []
                    if won:
                        rewards[mover], rewards[other] = 1.0, -1.0
                        text = f"{won} wins."
                    else:
                        text = "Draw: the board is full."
                    for a in self.possible_agents:
                        infos[a].update(success=bool(won) and a == mover, winner=won)
                        notes[a] = f"{MARK[mover]} played {cell + 1}. {text}"
                else:
                    self.turn = other
                    notes.setdefault(other, f"{MARK[mover]} played {cell + 1}.")
            if self.agents and self.moves >= self.max_turns:
                self.agents = []
                loser = staller(self.invalid)
                if loser is None:
                    truncated = self.per_agent(True)
                    end = "Out of turns: the game is over."
                else:
                    terminated = self.per_agent(True)
                    rewards[loser] -= 1.0
                    rewards[OTHER[loser]] += 1.0
                    end = f"Out of turns: {MARK[loser]} made more invalid moves and forfeits."
                for a in self.possible_agents:
                    infos[a].update(
                        success=loser is not None and a != loser,
                        winner=None if loser is None else MARK[OTHER[loser]],
                    )
                    notes[a] = f"{notes.get(a, '')} {end}".strip()
        if over:
            for a in self.possible_agents:
                self._obs[a] = notes.get(a, self._obs[a])
        else:
            for a in self.possible_agents:
                self._obs[a] = self._view(a, notes.get(a, ""))
        return dict(self._obs), rewards, terminated, truncated, infos

    def random_action(self, rng: np.random.Generator) -> str:
        """A well-formed move on a random cell (free or not: the sampler sees no board)."""
        return f"\\boxed{{{int(rng.integers(1, 10))}}}"

    def legal_moves(self) -> list[int]:
        """Free cells, numbered 1-9."""
        return [i + 1 for i in range(9) if not self.board[i]]

    def render(self) -> str:
        """The board."""
        return render_board(self.board)


@functools.cache
def _negamax(board: tuple[str, ...], mark: str) -> int:
    # score for `mark` to move: a win counts more the sooner it comes
    other = "O" if mark == "X" else "X"
    empties = board.count("")
    if winner(board) == other:
        return -(1 + empties)
    if not empties:
        return 0
    return max(
        -_negamax(board[:i] + (mark,) + board[i + 1 :], other) for i in range(9) if not board[i]
    )


def best_cells(board: tuple[str, ...], mark: str) -> list[int]:
    """The free cells (0-8) with the best minimax value for `mark` to move."""
    other = "O" if mark == "X" else "X"
    scores = {
        i: -_negamax(board[:i] + (mark,) + board[i + 1 :], other) for i in range(9) if not board[i]
    }
    top = max(scores.values())
    return [i for i, s in scores.items() if s == top]


def _seat(observation: str) -> tuple[tuple[str, ...], str] | None:
    board, role = parse_board(observation), ROLE_RE.findall(observation)
    if board is None or not role:
        return None
    return board, role[-1]


class TicTacToeMinimax(SyncPolicy):
    """Perfect play by minimax; ties between equally good cells are broken by `rng`."""

    def __init__(self, seed: int | None = None, **_: object):
        self.rng = np.random.default_rng(seed)

    def choose(self, observation: str) -> str:
        """The best cell for the board and mark shown in the observation."""
        seat = _seat(observation)
        if seat is None or not any(c == "" for c in seat[0]):
            return "\\boxed{5}"
        cells = best_cells(*seat)
        return f"\\boxed{{{cells[int(self.rng.integers(len(cells)))] + 1}}}"


class TicTacToeRandom(SyncPolicy):
    """Marks a uniformly random free cell."""

    def __init__(self, seed: int | None = None, **_: object):
        self.rng = np.random.default_rng(seed)

    def choose(self, observation: str) -> str:
        """A random free cell of the board shown in the observation."""
        seat = _seat(observation)
        free = [i for i in range(9) if seat is None or not seat[0][i]]
        return f"\\boxed{{{free[int(self.rng.integers(len(free)))] + 1}}}"
