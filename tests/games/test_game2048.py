"""2048 slide and merge rules, spawns, endings and the expectimax expert."""

from __future__ import annotations

import numpy as np
import pytest

from gemkit.envs.games.game2048 import (
    Game2048,
    Game2048Expert,
    expert_slide,
    parse_board,
    slide_board,
    slide_line,
)


@pytest.mark.parametrize(
    "line, expected, merged",
    [
        ([2, 2, 2, 2], [4, 4, 0, 0], [4, 4]),
        ([4, 4, 8, 0], [8, 8, 0, 0], [8]),  # the new 8 does not merge again
        ([2, 0, 2, 4], [4, 4, 0, 0], [4]),
        ([2, 2, 2, 0], [4, 2, 0, 0], [4]),  # the pair nearest the wall merges first
        ([2, 4, 8, 16], [2, 4, 8, 16], []),
        ([0, 0, 0, 2], [2, 0, 0, 0], []),
    ],
)
def test_a_slide_merges_each_tile_at_most_once(line, expected, merged):
    assert slide_line(line) == (expected, merged)


def board(rows: list[list[int]]) -> np.ndarray:
    return np.array(rows, dtype=np.int64)


def test_each_direction_slides_towards_its_wall():
    b = board([[0, 2, 0, 2], [0, 0, 0, 0], [4, 0, 0, 0], [4, 0, 0, 0]])
    assert slide_board(b, "left")[0][0].tolist() == [4, 0, 0, 0]
    assert slide_board(b, "right")[0][0].tolist() == [0, 0, 0, 4]
    assert slide_board(b, "up")[0][:, 0].tolist() == [8, 0, 0, 0]
    assert slide_board(b, "down")[0][:, 0].tolist() == [0, 0, 0, 8]


def test_the_expert_slide_matches_the_game_slide():
    rng = np.random.default_rng(0)
    for _ in range(50):
        b = board((2 ** rng.integers(1, 5, size=(4, 4))).tolist())
        b[rng.random((4, 4)) < 0.4] = 0
        exps = tuple(int(v).bit_length() - 1 if v else 0 for v in b.ravel())
        for d in ("up", "down", "left", "right"):
            want = tuple(int(v).bit_length() - 1 if v else 0 for v in slide_board(b, d)[0].ravel())
            assert expert_slide(exps, 4, d) == want


def game(rows: list[list[int]], target: int = 128) -> Game2048:
    env = Game2048(size=len(rows), target=target, max_turns=100)
    env.reset(seed=0)
    env.board = board(rows)
    return env


def test_a_move_that_changes_nothing_is_invalid():
    env = game([[2, 4, 8, 16], [0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]])
    obs, reward, terminated, truncated, info = env.step("\\boxed{left}")
    assert info["invalid"] and "the board does not change" in obs


@pytest.mark.parametrize("text", ["up", "UP", "u", " Up "])
def test_directions_are_case_insensitive_and_abbreviable(text):
    env = game([[0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0], [0, 2, 0, 0]])
    assert not env.step(f"\\boxed{{{text}}}")[4].get("invalid")
    assert env.board[0, 1] == 2


def test_merges_are_rewarded_and_reaching_the_target_wins():
    env = game([[64, 64, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]], target=128)
    obs, reward, terminated, truncated, info = env.step("\\boxed{left}")
    assert terminated and info["success"]
    assert reward == pytest.approx(1.0 + 128 / (4 * 128 * 7))


def test_a_board_with_no_move_left_ends_the_game_in_failure():
    # Sliding left opens one gap; neither a 2 nor a 4 spawned there can merge with anything.
    env = game([[16, 8, 16, 8], [8, 16, 8, 16], [16, 8, 16, 8], [4, 4, 32, 64]])
    obs, reward, terminated, truncated, info = env.step("\\boxed{left}")
    assert env.board[3].tolist()[:3] == [8, 32, 64] and env.board[3, 3] in (2, 4)
    assert terminated and not info["success"] and "game over" in obs


def test_new_tiles_are_mostly_twos():
    env = Game2048(size=4, target=2048, max_turns=10)
    spawned = []
    for seed in range(200):
        env.reset(seed=seed)
        spawned += [int(v) for v in env.board.ravel() if v]
    assert set(spawned) == {2, 4}
    assert 0.8 < spawned.count(2) / len(spawned) < 0.97


def test_the_expert_reads_the_board_from_the_text():
    env = game([[2, 0, 0, 4], [0, 8, 0, 0], [0, 0, 0, 0], [16, 0, 0, 128]], target=256)
    assert parse_board(env.state_text()) == env.board.tolist()


def test_the_expert_reaches_128():
    env, expert = Game2048(size=4, target=128, max_turns=400), Game2048Expert(size=4)
    obs, _ = env.reset(seed=3)
    terminated = truncated = False
    while not (terminated or truncated):
        obs, reward, terminated, truncated, info = env.step(expert.choose(obs))
        assert not info.get("invalid")
    assert info["success"]
