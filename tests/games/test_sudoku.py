"""Sudoku: unique puzzles, rejected digits, mistakes, rewards and the solving expert."""

from __future__ import annotations

import pytest

from gemkit.envs.games.sudoku import Sudoku, SudokuExpert, conflict, parse_grid, solve


def valid(grid: list[list[int]]) -> bool:
    n = len(grid)
    b = 2 if n == 4 else 3
    units = [set(row) for row in grid] + [set(col) for col in zip(*grid, strict=True)]
    units += [
        {grid[r][c] for r in range(r0, r0 + b) for c in range(c0, c0 + b)}
        for r0 in range(0, n, b)
        for c0 in range(0, n, b)
    ]
    return all(u == set(range(1, n + 1)) for u in units)


@pytest.mark.parametrize(("size", "holes"), [(4, 6), (4, 10), (9, 40)])
@pytest.mark.parametrize("seed", range(4))
def test_puzzle_has_the_asked_holes_and_exactly_one_solution(size, holes, seed):
    env = Sudoku(size, holes, max_turns=80)
    env.reset(seed=seed)
    assert valid(env.solution)
    assert sum(v == 0 for row in env.grid for v in row) == holes
    assert all(
        v in (0, s)
        for row, srow in zip(env.grid, env.solution, strict=True)
        for v, s in zip(row, srow, strict=True)
    )
    assert solve(env.grid, limit=2) == [env.solution]


def test_solver_counts_every_solution_of_an_ambiguous_grid():
    # the first two columns are empty: each pair of rows may swap its two digits
    grid = [[0, 0, 3, 4], [0, 0, 1, 2], [0, 0, 4, 3], [0, 0, 2, 1]]
    found = solve(grid, limit=10)
    assert len(found) == 4 and all(valid(g) for g in found)
    assert len({str(g) for g in found}) == 4
    assert len(solve(grid, limit=2)) == 2


def test_solver_returns_nothing_for_a_clashing_grid():
    grid = [[1, 1, 0, 0], [0] * 4, [0] * 4, [0] * 4]
    assert solve(grid) == []


def first_empty(env: Sudoku) -> tuple[int, int]:
    return next((r, c) for r in range(env.size) for c in range(env.size) if not env.grid[r][c])


def test_a_digit_already_in_the_row_is_rejected_naming_the_row():
    env = Sudoku(9, 40, max_turns=80)
    env.reset(seed=1)
    r, c = first_empty(env)
    v = next(x for x in env.grid[r] if x)
    obs, reward, _, _, info = env.step(f"\\boxed{{{r + 1} {c + 1} {v}}}")
    assert info["invalid"] and reward < 0 and f"row {r + 1}" in obs
    assert env.grid[r][c] == 0


def test_a_digit_that_breaks_no_rule_but_not_the_solution_is_a_mistake():
    env = Sudoku(9, 40, max_turns=80)
    env.reset(seed=1)
    r, c, v = next(
        (r, c, v)
        for r in range(9)
        for c in range(9)
        for v in range(1, 10)
        if not env.grid[r][c] and v != env.solution[r][c] and conflict(env.grid, r, c, v) is None
    )
    obs, _, _, _, info = env.step(f"\\boxed{{{r + 1} {c + 1} {v}}}")
    assert info["mistake"] and "dead end" in obs and env.grid[r][c] == 0
    assert "Mistakes: 1 of 3" in obs


def test_a_filled_cell_cannot_be_overwritten():
    env = Sudoku(4, 6, max_turns=20)
    env.reset(seed=0)
    r, c = next((r, c) for r in range(4) for c in range(4) if env.grid[r][c])
    obs, _, _, _, info = env.step(f"\\boxed{{{r + 1} {c + 1} {env.grid[r][c]}}}")
    assert info["invalid"] and "already holds" in obs


@pytest.mark.parametrize(
    ("move", "says"),
    [
        ("1 2", "three whole numbers"),
        ("0 1 1", "off the grid"),
        ("1 1 5", "digits are 1..4"),
        ("a b c", "three"),
    ],
)
def test_malformed_moves_are_invalid_and_say_why(move, says):
    env = Sudoku(4, 6, max_turns=20)
    env.reset(seed=0)
    obs, _, _, _, info = env.step(f"\\boxed{{{move}}}")
    assert info["invalid"] and says in obs


def test_each_correct_cell_pays_a_share_and_completion_pays_one():
    env = Sudoku(4, 6, max_turns=20)
    env.reset(seed=3)
    rewards = []
    while True:
        r, c = first_empty(env)
        _, reward, terminated, _, info = env.step(
            f"\\boxed{{{r + 1}, {c + 1}, {env.solution[r][c]}}}"
        )
        rewards.append(reward)
        if terminated:
            break
    assert rewards[:-1] == [pytest.approx(0.5 / 6)] * 5
    assert rewards[-1] == pytest.approx(1.0 + 0.5 / 6) and info["success"]


def test_the_board_text_parses_back_to_the_grid():
    env = Sudoku(9, 40, max_turns=80)
    obs, _ = env.reset(seed=5)
    assert parse_grid(obs, 9) == env.grid


def test_expert_solves_a_hard_puzzle_without_an_invalid_move():
    env, expert = Sudoku(9, 40, max_turns=80), SudokuExpert(size=9)
    obs, _ = env.reset(seed=11)
    for _ in range(40):
        obs, _, terminated, _, info = env.step(expert.choose(obs))
        assert not info.get("invalid")
    assert terminated and info["success"]
