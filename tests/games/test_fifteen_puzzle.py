"""Sliding-puzzle rules, scrambles, rewards and the IDA* expert."""

from __future__ import annotations

from collections import deque

import pytest

from gemkit.envs.games.fifteen_puzzle import (
    STEPS,
    FifteenPuzzle,
    FifteenPuzzleExpert,
    ida_star,
    is_solvable,
    linear_conflict,
    manhattan,
    neighbour,
    parse_board,
    solved_board,
)


def game(board: tuple[int, ...], size: int = 3) -> FifteenPuzzle:
    env = FifteenPuzzle(size=size, scramble=10, max_turns=40)
    env.reset(seed=0)
    env.board = board
    env.start_distance = manhattan(board, size)
    return env


def test_a_move_names_where_the_blank_goes():
    env = game((1, 2, 3, 4, 0, 5, 7, 8, 6))
    env.step("\\boxed{right}")
    assert env.board == (1, 2, 3, 4, 5, 0, 7, 8, 6)
    env.step("\\boxed{up}")
    assert env.board == (1, 2, 0, 4, 5, 3, 7, 8, 6)


def test_the_blank_cannot_leave_the_board():
    env = game((0, 1, 2, 3, 4, 5, 6, 7, 8))
    obs, reward, terminated, truncated, info = env.step("\\boxed{up}")
    assert info["invalid"] and "cannot move up" in obs
    assert env.board == (0, 1, 2, 3, 4, 5, 6, 7, 8)


def test_solving_pays_one_plus_the_shaping_and_shaping_tracks_distance():
    env = game((1, 2, 3, 4, 5, 6, 0, 7, 8))  # two moves from solved, distance 2
    _, away, *_ = env.step("\\boxed{up}")  # tile 4 slides down: one step further away
    assert away == pytest.approx(-0.25)
    env.step("\\boxed{down}")
    env.step("\\boxed{right}")
    obs, reward, terminated, truncated, info = env.step("\\boxed{right}")
    assert terminated and info["success"] and reward == pytest.approx(1.25)


def reachable(size: int) -> set[tuple[int, ...]]:
    start = solved_board(size)
    seen, todo = {start}, deque([start])
    while todo:
        b = todo.popleft()
        for d in STEPS:
            nb = neighbour(b, size, d)
            if nb is not None and nb not in seen:
                seen.add(nb)
                todo.append(nb)
    return seen


def test_the_parity_rule_matches_reachability_on_small_boards():
    from itertools import permutations

    for size in (2, 3):
        reach = reachable(size)
        sample = list(permutations(range(size * size)))[:: 1 if size == 2 else 97]
        for board in sample:
            assert is_solvable(board, size) == (board in reach), board


@pytest.mark.parametrize("size, scramble", [(3, 10), (4, 40), (4, 7)])
def test_scrambles_are_solvable_unsolved_and_seed_determined(size, scramble):
    boards = set()
    for seed in range(20):
        env = FifteenPuzzle(size=size, scramble=scramble)
        env.reset(seed=seed)
        again = FifteenPuzzle(size=size, scramble=scramble)
        again.reset(seed=seed)
        assert env.board == again.board
        assert is_solvable(env.board, size) and env.board != solved_board(size)
        boards.add(env.board)
    assert len(boards) > 10


def test_linear_conflict_counts_reversed_pairs_in_their_home_line():
    # 2 and 1 are both in row 0, reversed: two extra moves on top of Manhattan distance.
    board = (2, 1, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 0)
    assert linear_conflict(board, 4) == 2
    assert linear_conflict(solved_board(4), 4) == 0


def bfs_distance(board: tuple[int, ...], size: int) -> int:
    goal = solved_board(size)
    seen, frontier, dist = {board}, [board], 0
    while goal not in seen:
        dist += 1
        frontier = [
            nb
            for b in frontier
            for d in STEPS
            if (nb := neighbour(b, size, d)) is not None and nb not in seen and not seen.add(nb)
        ]
    return dist


def test_ida_star_finds_shortest_solutions():
    for seed in range(5):
        env = FifteenPuzzle(size=3, scramble=14)
        env.reset(seed=seed)
        moves = ida_star(env.board, 3)
        b = env.board
        for d in moves:
            b = neighbour(b, 3, d)
        assert b == solved_board(3) and len(moves) == bfs_distance(env.board, 3)


def test_the_expert_solves_a_hard_board_from_the_text():
    env, expert = FifteenPuzzle(size=4, scramble=40, max_turns=120), FifteenPuzzleExpert(size=4)
    obs, _ = env.reset(seed=2)
    assert parse_board(obs) == (env.board, 4)
    terminated = truncated = False
    while not (terminated or truncated):
        obs, reward, terminated, truncated, info = env.step(expert.choose(obs))
    assert info["success"]
