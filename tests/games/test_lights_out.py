"""Lights Out toggling, generation, rewards and the GF(2) expert."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from gemkit.envs.games.lights_out import (
    LightsOut,
    LightsOutExpert,
    parse_grid,
    press,
    solve_presses,
)


def test_a_press_toggles_the_cell_and_its_orthogonal_neighbours():
    grid = press(np.zeros((3, 3), np.uint8), 1, 1)
    assert grid.tolist() == [[0, 1, 0], [1, 1, 1], [0, 1, 0]]
    corner = press(grid, 0, 0)
    assert corner.tolist() == [[1, 0, 0], [0, 1, 1], [0, 1, 0]]


def test_pressing_twice_cancels_and_order_does_not_matter():
    rng = np.random.default_rng(0)
    grid = rng.integers(0, 2, (4, 4)).astype(np.uint8)
    assert np.array_equal(press(press(grid, 2, 3), 2, 3), grid)
    assert np.array_equal(press(press(grid, 0, 1), 3, 3), press(press(grid, 3, 3), 0, 1))


def test_moves_are_one_based_and_off_grid_cells_are_invalid():
    env = LightsOut(size=3, presses=3)
    env.reset(seed=0)
    before = env.grid.copy()
    env.step("\\boxed{1 1}")
    assert np.array_equal(env.grid, press(before, 0, 0))
    obs, reward, terminated, truncated, info = env.step("\\boxed{4 1}")
    assert info["invalid"] and "off the grid" in obs
    env.step("\\boxed{(1, 1)}")
    assert np.array_equal(env.grid, before)


def test_lights_switched_off_earn_shaping_and_the_last_one_wins():
    env = LightsOut(size=3, presses=1)
    env.reset(seed=0)
    env.grid = press(np.zeros((3, 3), np.uint8), 0, 0)  # three lights around the corner
    env.start_lit = 3
    _, worse, *_ = env.step("\\boxed{3 3}")  # three more lights
    assert worse == pytest.approx(-0.5)
    env.step("\\boxed{3 3}")
    obs, reward, terminated, truncated, info = env.step("\\boxed{1 1}")
    assert terminated and info["success"] and reward == pytest.approx(1.5)


def test_generated_grids_come_from_the_given_number_of_presses():
    for seed in range(20):
        env = LightsOut(size=5, presses=8)
        env.reset(seed=seed)
        assert env.grid.any()
        solution = solve_presses(env.grid)
        assert solution is not None and len(solution) <= 8


def test_the_gf2_solution_is_the_lightest_press_set():
    rng = np.random.default_rng(1)
    for _ in range(5):
        grid = np.zeros((3, 3), np.uint8)
        for i in rng.choice(9, size=4, replace=False):
            grid = press(grid, *divmod(int(i), 3))
        cells = solve_presses(grid)
        out = grid
        for r, c in cells:
            out = press(out, r, c)
        assert not out.any()
        lightest = min(
            sum(mask)
            for mask in itertools.product((0, 1), repeat=9)
            if not _apply(grid, mask).any()
        )
        assert len(cells) == lightest


def _apply(grid: np.ndarray, mask: tuple[int, ...]) -> np.ndarray:
    for i, bit in enumerate(mask):
        if bit:
            grid = press(grid, *divmod(i, grid.shape[1]))
    return grid


def test_unsolvable_grids_are_recognised():
    # On 4x4 the press matrix is singular: a lone light in the corner cannot be switched off.
    grid = np.zeros((4, 4), np.uint8)
    grid[0, 0] = 1
    assert solve_presses(grid) is None


def test_the_expert_presses_its_solution_one_cell_per_turn():
    env, expert = LightsOut(size=5, presses=8, max_turns=30), LightsOutExpert()
    obs, _ = env.reset(seed=9)
    assert np.array_equal(parse_grid(obs), env.grid)
    plan = len(solve_presses(env.grid))
    turns, terminated = 0, False
    while not terminated:
        obs, reward, terminated, truncated, info = env.step(expert.choose(obs))
        turns += 1
    assert info["success"] and turns == plan
