"""Minesweeper: safe first reveal, flood fill, flags, win/loss and the constraint solver."""

from __future__ import annotations

import numpy as np
import pytest

from gemkit.envs.games.minesweeper import (
    Minesweeper,
    MinesweeperExpert,
    mine_probabilities,
    neighbours,
    parse_board,
)


def board_with(mines: list[tuple[int, int]], rows: int = 5, cols: int = 5) -> Minesweeper:
    """A game whose mines (0-based cells) are already placed."""
    env = Minesweeper(rows, cols, len(mines), max_turns=50)
    env.reset(seed=0)
    env.mine[:] = False
    for cell in mines:
        env.mine[cell] = True
    env.counts = np.array(
        [
            [sum(env.mine[n] for n in neighbours(r, c, rows, cols)) for c in range(cols)]
            for r in range(rows)
        ]
    )
    env.placed = True
    return env


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("cell", [(1, 1), (3, 3), (5, 2)])
def test_first_reveal_is_safe_and_keeps_its_neighbours_free(seed, cell):
    env = Minesweeper(5, 5, 3, max_turns=40)
    env.reset(seed=seed)
    _, _, terminated, _, info = env.step(f"\\boxed{{reveal {cell[0]} {cell[1]}}}")
    assert not (terminated and not info["success"])
    r, c = cell[0] - 1, cell[1] - 1
    assert not env.mine[r, c] and not any(env.mine[n] for n in neighbours(r, c, 5, 5))
    assert int(env.mine.sum()) == 3


def test_revealing_an_empty_cell_opens_its_region_and_the_numbers_around_it():
    env = board_with([(0, 4), (4, 0)])
    obs, reward, terminated, _, _ = env.step("\\boxed{reveal 3 3}")
    hidden = {(r, c) for r in range(5) for c in range(5) if not env.revealed[r, c]}
    # the two mines stay hidden; every safe cell connects through empty cells
    assert hidden == {(0, 4), (4, 0)}
    assert terminated and reward == pytest.approx(1.5)


def test_flood_fill_stops_at_numbered_cells():
    env = board_with([(2, 0), (2, 1), (2, 2), (2, 3), (2, 4)])
    obs, reward, terminated, _, _ = env.step("\\boxed{reveal 1 1}")
    assert env.revealed[:2].all() and not env.revealed[2:].any()
    assert not terminated and reward == pytest.approx(0.5 * 10 / 20)
    assert "1 | . . . . ." in obs and "2 | 2 3 3 3 2" in obs


def test_coordinates_are_one_based_row_then_column():
    env = board_with([(4, 4)])
    env.step("\\boxed{reveal 1 5}")
    assert env.revealed[0, 4]


def test_revealing_a_mine_loses_and_shows_the_mines():
    env = board_with([(0, 0), (4, 4)])
    obs, reward, terminated, truncated, info = env.step("\\boxed{reveal 1 1}")
    assert terminated and not truncated and info["success"] is False and reward == 0.0
    assert "Boom" in obs and "X" in obs and "*" in obs


def test_flags_toggle_and_block_reveals_until_removed():
    env = board_with([(0, 0)])
    env.step("\\boxed{flag 2 2}")
    obs, _, _, _, info = env.step("\\boxed{reveal 2 2}")
    assert info["invalid"] and "flagged" in obs
    assert " F" in obs
    env.step("\\boxed{flag 2 2}")
    _, _, _, _, info = env.step("\\boxed{reveal 2 2}")
    assert not info.get("invalid") and env.revealed[1, 1]


@pytest.mark.parametrize(
    ("move", "says"),
    [
        ("reveal 0 1", "off the board"),
        ("reveal 6 1", "off the board"),
        ("open 1 1", "'reveal' or 'flag'"),
        ("reveal one two", "whole numbers"),
        ("reveal 1", "'reveal' or 'flag'"),
    ],
)
def test_malformed_moves_are_invalid_and_say_why(move, says):
    env = Minesweeper(5, 5, 3, max_turns=40)
    env.reset(seed=0)
    obs, _, _, _, info = env.step(f"\\boxed{{{move}}}")
    assert info["invalid"] and "Invalid move" in obs and says in obs


def test_revealing_a_revealed_cell_is_invalid():
    env = board_with([(2, 0), (2, 1), (2, 2), (2, 3), (2, 4)])
    env.step("\\boxed{reveal 1 1}")
    obs, _, _, _, info = env.step("\\boxed{reveal 1 2}")
    assert info["invalid"] and "already revealed" in obs


def test_solver_proves_safe_cells_with_the_subset_rule_and_the_mine_count():
    # '1' at (0,0) sees {(1,0), (1,1)}; '1' at (0,1) sees those plus (0,2) and (1,2),
    # so (0,2) and (1,2) are safe; the only mine lies in {(1,0), (1,1)}, so row 2 is safe
    board = [
        ["1", "1", "#"],
        ["#", "#", "#"],
        ["#", "#", "#"],
    ]
    probs, mined = mine_probabilities(board, mines=1)
    assert probs[(0, 2)] == probs[(1, 2)] == 0.0
    assert all(probs[(2, c)] == 0.0 for c in range(3))
    assert probs[(1, 0)] == probs[(1, 1)] == pytest.approx(0.5) and mined == set()


def test_solver_marks_a_lone_hidden_neighbour_as_a_mine():
    board = [[".", "1", "#"], [".", "1", "#"], [".", "1", "1"]]
    probs, mined = mine_probabilities(board, mines=1)
    assert mined == {(1, 2)} and probs[(0, 2)] == 0.0


def test_expert_reads_the_board_from_the_observation():
    env = Minesweeper(5, 5, 3, max_turns=40)
    obs, _ = env.reset(seed=2)
    obs = env.step("\\boxed{reveal 3 3}")[0]
    board = parse_board(obs, 5, 5)
    assert board is not None
    assert [[s != "#" for s in row] for row in board] == env.revealed.tolist()


def test_expert_never_reveals_a_proved_mine():
    wins = 0
    for seed in range(10):
        env, expert = Minesweeper(6, 6, 4, max_turns=40), MinesweeperExpert(rows=6, cols=6, mines=4)
        obs, _ = env.reset(seed=seed)
        while True:
            obs, _, terminated, truncated, info = env.step(expert.choose(obs))
            assert not info.get("invalid")
            if terminated or truncated:
                break
        wins += info["success"]
    assert wins >= 9
