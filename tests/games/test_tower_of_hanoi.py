"""Tower of Hanoi rules, rewards and the optimal expert."""

from __future__ import annotations

import itertools

import pytest

from gemkit.envs.games.tower_of_hanoi import (
    TowerOfHanoi,
    TowerOfHanoiExpert,
    parse_move,
    solve_moves,
)


def game(pegs: dict[str, list[int]], max_turns: int = 50) -> TowerOfHanoi:
    env = TowerOfHanoi(num_disks=sum(len(d) for d in pegs.values()), max_turns=max_turns)
    env.reset(seed=0)
    env.pegs = {p: list(d) for p, d in pegs.items()}
    env.best_settled = 0
    return env


def test_a_larger_disk_cannot_go_on_a_smaller_one():
    env = game({"A": [3, 2], "B": [1], "C": []})
    obs, reward, *_, info = env.step("\\boxed{A B}")
    assert info["invalid"] and "larger disk may never sit on a smaller one" in obs
    assert env.pegs == {"A": [3, 2], "B": [1], "C": []}


def test_moving_from_an_empty_peg_or_to_an_unknown_peg_is_invalid():
    env = game({"A": [3, 2, 1], "B": [], "C": []})
    assert "peg B is empty" in env.step("\\boxed{B C}")[0]
    assert "unknown peg 'D'" in env.step("\\boxed{A D}")[0]
    assert "both A" in env.step("\\boxed{A A}")[0]


@pytest.mark.parametrize("text", ["A C", "a c", "A->C", "A to C", "AC", "A,C"])
def test_moves_accept_common_spellings(text):
    assert parse_move(text) == ("A", "C")


def test_the_state_lists_each_peg_bottom_to_top():
    env = game({"A": [3, 1], "B": [2], "C": []})
    assert env.state_text().splitlines() == [
        "Peg A (bottom to top): 3 1",
        "Peg B (bottom to top): 2",
        "Peg C (bottom to top): (empty)",
    ]


def test_settling_disks_is_rewarded_once_and_finishing_pays_one():
    env = game({"A": [2], "B": [1], "C": []})
    assert env.step("\\boxed{A C}")[1] == pytest.approx(0.25)  # disk 2 settled, 0.5 / 2 disks
    assert env.step("\\boxed{C A}")[1] == 0.0  # unsettling costs nothing...
    assert env.step("\\boxed{A C}")[1] == 0.0  # ...and re-settling earns nothing again
    obs, reward, terminated, truncated, info = env.step("\\boxed{B C}")
    assert terminated and info["success"] and reward == pytest.approx(1.25)


def test_the_largest_disk_never_starts_on_the_goal_peg():
    for seed in range(30):
        env = TowerOfHanoi(num_disks=4)
        env.reset(seed=seed)
        assert 4 not in env.pegs["C"]
        assert all(d == sorted(d, reverse=True) for d in env.pegs.values())


def shortest(pegs: dict[str, list[int]]) -> int:
    """Breadth-first distance to all-on-C, the reference for optimality."""
    n = sum(len(d) for d in pegs.values())
    start = tuple(tuple(pegs[p]) for p in "ABC")
    goal = ((), (), tuple(range(n, 0, -1)))
    frontier, seen, dist = [start], {start}, 0
    while goal not in seen:
        dist += 1
        nxt = []
        for s in frontier:
            for i, j in itertools.permutations(range(3), 2):
                if s[i] and (not s[j] or s[j][-1] > s[i][-1]):
                    t = list(s)
                    t[j] = s[j] + (s[i][-1],)
                    t[i] = s[i][:-1]
                    t = tuple(t)
                    if t not in seen:
                        seen.add(t)
                        nxt.append(t)
        frontier = nxt
    return dist


@pytest.mark.parametrize("homes", list(itertools.product("ABC", repeat=4))[::7])
def test_the_solver_is_optimal_from_any_legal_position(homes):
    pegs = {p: [d for d, h in zip(range(4, 0, -1), homes, strict=True) if h == p] for p in "ABC"}
    assert len(solve_moves(pegs, 4)) == shortest(pegs)


def test_the_expert_solves_in_the_fewest_moves_reading_only_the_text():
    env, expert = TowerOfHanoi(num_disks=5, max_turns=50), TowerOfHanoiExpert(num_disks=5)
    obs, _ = env.reset(seed=11)
    need = shortest({p: list(d) for p, d in env.pegs.items()})
    terminated = False
    while not terminated:
        obs, reward, terminated, truncated, info = env.step(expert.choose(obs))
        assert not truncated
    assert info["success"] and env.turn == need
