"""Sokoban rules, generated levels and the search expert."""

from __future__ import annotations

import pytest

from gemkit.envs.games.sokoban import (
    Sokoban,
    SokobanExpert,
    dead_squares,
    parse_map,
    solve,
)

LEVEL = """\
#######
#     #
# @$$ #
#   . #
#  .  #
#######"""


def game(text: str = LEVEL, max_turns: int = 40) -> Sokoban:
    rows = text.splitlines()
    num_boxes = sum(r.count("$") + r.count("*") for r in rows)
    env = Sokoban(width=7, height=7, num_boxes=num_boxes, max_turns=max_turns)
    env.reset(seed=0)
    env.width, env.height = len(rows[0]), len(rows)
    floor, goals, (player, boxes) = parse_map(
        "Map (# wall, . goal, $ box, * box on goal, @ player, + player on goal):\n" + text
    )
    env.floor, env.goals, env.player, env.boxes = floor, goals, player, set(boxes)
    return env


def test_the_map_round_trips_through_the_text():
    assert game().state_text().splitlines()[1:-1] == LEVEL.splitlines()


def test_two_boxes_in_a_row_cannot_be_pushed():
    env = game()
    obs, reward, terminated, truncated, info = env.step("\\boxed{right}")
    assert info["invalid"] and "another box is behind it" in obs
    assert env.player == (2, 2) and env.boxes == {(2, 3), (2, 4)}


def test_walls_stop_the_player_and_the_boxes():
    env = game()
    env.step("\\boxed{up}")
    obs, *_, info = env.step("\\boxed{up}")
    assert info["invalid"] and "wall up of you" in obs
    env = game("#####\n#@$##\n#  .#\n#####")
    obs, *_, info = env.step("\\boxed{right}")
    assert info["invalid"] and "wall behind it" in obs


def test_boxes_on_and_off_goals_move_the_reward_and_the_last_one_wins():
    env = game("######\n#@$. #\n#  $.#\n######")
    _, on, *_ = env.step("\\boxed{right}")
    assert on == pytest.approx(0.1)
    _, off, *_ = env.step("\\boxed{right}")
    assert off == pytest.approx(-0.1)
    env = game("######\n#@$. #\n#  $.#\n######")
    env.step("\\boxed{right}")
    env.step("\\boxed{down}")
    obs, reward, terminated, truncated, info = env.step("\\boxed{right}")
    assert terminated and info["success"] and reward == pytest.approx(1.1)


def test_dead_squares_are_corners_and_walls_without_goals():
    floor, goals, _ = parse_map(
        "Map (# wall, . goal, $ box, * box on goal, @ player, + player on goal):\n"
        "######\n#@ $ #\n#  . #\n#    #\n######"
    )
    dead = dead_squares(floor, set(goals))
    assert {(1, 1), (1, 4), (3, 1), (3, 4)} <= dead  # corners
    assert (2, 3) not in dead and (2, 2) not in dead


@pytest.mark.parametrize("level", ["easy", "hard"])
def test_generated_levels_are_solvable_within_half_the_turns(level):
    kwargs = {
        "easy": dict(width=6, height=6, num_boxes=1, max_turns=30),
        "hard": dict(width=7, height=7, num_boxes=2, max_turns=60),
    }[level]
    maps = set()
    for seed in range(15):
        env = Sokoban(**kwargs)
        obs, _ = env.reset(seed=seed)
        floor, goals, start = parse_map(obs)
        moves = solve(floor, goals, start)
        assert moves is not None and 1 <= len(moves) == env.optimal <= kwargs["max_turns"] // 2
        maps.add(env.state_text())
    assert len(maps) == 15


def test_the_expert_solves_a_level_in_the_fewest_moves():
    env, expert = Sokoban(width=7, height=7, num_boxes=2, max_turns=60), SokobanExpert()
    obs, _ = env.reset(seed=4)
    turns = 0
    terminated = False
    while not terminated:
        obs, reward, terminated, truncated, info = env.step(expert.choose(obs))
        turns += 1
        assert not info.get("invalid") and not truncated
    assert info["success"] and turns == env.optimal
