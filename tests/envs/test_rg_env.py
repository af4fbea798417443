"""Every reasoning-gym dataset is an `rg:` env that scores its own reference answer as correct."""

from __future__ import annotations

import copy
import importlib.util
import subprocess
import sys
import warnings
from collections import deque

import pytest
from gymnasium.utils.env_checker import check_env

import gemkit
from gemkit.envs.reasoning_gym import env as rg_env
from gemkit.envs.reasoning_gym.env import ReasoningGymMissing, reference_answer
from gemkit.envs.reasoning_gym.names import DATASETS, installed_names

RG_IDS = [s.id for s in gemkit.list_envs("rg")]
needs_rg = pytest.mark.skipif(
    importlib.util.find_spec("reasoning_gym") is None,
    reason="reasoning-gym is an optional extra (pip install gemkit[rg])",
)

#: per-dataset construction kwargs for the reference-answer test
KWARGS: dict[str, dict] = {
    # a composite needs members; any two will do
    "composite": {"datasets": ["leg_counting", {"name": "basic_arithmetic", "weight": 2}]},
    # no reference answer upstream: the test solves the puzzle by search, so keep it short
    "rush_hour": {"min_moves": 1, "max_moves": 3},
}


def solve_boxnet(entry: dict) -> str:
    """A valid boxnet plan: walk each box to a target of its colour, one move per step."""
    import json

    state = copy.deepcopy(entry["metadata"]["initial_state"])

    def where(item: str) -> list[tuple[float, float]]:
        return [tuple(map(float, k.split("_"))) for k, v in state.items() if item in v]

    plan = []
    for key, items in list(state.items()):
        for box in [i for i in items if i.startswith("box_")]:
            colour = box[4:]
            r, c = map(float, key.split("_"))
            tr, tc = where("target_" + colour)[0]
            while (r, c) != (tr, tc):
                nr, nc = (r + (tr > r) - (tr < r), c) if r != tr else (r, c + (tc > c) - (tc < c))
                plan.append({f"Agent[{r}, {c}]": f"move({box}, square[{nr}, {nc}])"})
                state[f"{r}_{c}"].remove(box)
                state[f"{nr}_{nc}"].append(box)
                r, c = nr, nc
            plan.append({f"Agent[{r}, {c}]": f"move({box}, target_{colour})"})
            state[f"{r}_{c}"].remove(box)
            state[f"{r}_{c}"].remove("target_" + colour)
    return json.dumps(plan)


def solve_rush_hour(entry: dict) -> str:
    """Breadth-first search over vehicle moves until the red car exits."""
    from reasoning_gym.games.rush_hour import Board

    start = Board(entry["metadata"]["board_config"])
    labels = [chr(ord("A") + i) for i, p in enumerate(start._pieces) if not p.fixed]
    queue, seen = deque([(start, [])]), {str(start)}
    while queue:
        board, moves = queue.popleft()
        if board.solved:
            return " ".join(moves)
        for label in labels:
            for steps in (1, 2, 3, 4, -1, -2, -3, -4):
                nxt = copy.deepcopy(board)
                nxt.move(label, steps)
                if str(nxt) not in seen:
                    seen.add(str(nxt))
                    queue.append((nxt, [*moves, f"{label}{steps:+d}"]))
    raise AssertionError("rush hour board has no solution")


SOLVERS = {"boxnet": solve_boxnet, "rush_hour": solve_rush_hour}


def as_action(answer: str) -> str:
    # answers with unbalanced braces (code, some grids) cannot sit inside \boxed{}
    if answer.count("{") != answer.count("}"):
        return f"<answer>{answer}</answer>"
    return f"\\boxed{{{answer}}}"


@needs_rg
@pytest.mark.parametrize("env_id", RG_IDS)
def test_every_dataset_scores_its_reference_answer_as_correct(env_id):
    name = env_id.split(":", 1)[1]
    env = gemkit.make(env_id, size=10, **KWARGS.get(name, {}))
    obs, info = env.reset(options={"index": 0})
    entry = env.unwrapped.entry
    assert obs.startswith(entry["question"]) and "\\boxed{}" in obs
    answer = SOLVERS[name](entry) if name in SOLVERS else reference_answer(entry)
    assert answer is not None, f"{name} has no reference answer and no test solver"
    _, reward, terminated, _, info = env.step("Thinking done. " + as_action(answer))
    assert terminated and reward == 1.0 and info["success"], info


@needs_rg
def test_every_installed_dataset_has_an_id():
    assert installed_names() == DATASETS, "regenerate: python -m gemkit.envs.reasoning_gym.names"
    assert sorted(RG_IDS) == sorted(f"rg:{n}" for n in DATASETS)


def test_listing_rg_ids_does_not_import_reasoning_gym():
    code = (
        "import sys, gemkit; ids = gemkit.list_envs('rg'); "
        "assert len(ids) > 100, len(ids); assert 'reasoning_gym' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


@needs_rg
@pytest.mark.parametrize("env_id", ["rg:leg_counting", "rg:graph_color", "rg:arc_1d"])
def test_passes_gymnasium_env_checker(env_id):
    env = gemkit.make(env_id)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env, skip_render_check=True)


@needs_rg
def test_same_seed_same_item_and_seeds_vary_the_item():
    env = gemkit.make("rg:basic_arithmetic")
    assert env.reset(seed=5)[0] == gemkit.make("rg:basic_arithmetic").reset(seed=5)[0]
    assert len({env.reset(seed=s)[0] for s in range(6)}) > 1


@needs_rg
def test_wrong_and_missing_answers_score_zero_with_a_message():
    env = gemkit.make("rg:leg_counting")
    env.reset(seed=0)
    wrong = str(int(env.unwrapped.entry["answer"]) + 1)
    obs, reward, terminated, _, info = env.step(f"\\boxed{{{wrong}}}")
    assert (reward, terminated, info["success"]) == (0.0, True, False)
    env.reset(seed=0)
    obs, reward, terminated, _, info = env.step("I am not sure.")
    assert reward == 0.0 and terminated and info["invalid"]
    assert "\\boxed{}" in obs and "<answer>" in obs


@needs_rg
def test_answer_tag_is_accepted_and_the_later_answer_wins():
    env = gemkit.make("rg:leg_counting")
    env.reset(seed=1)
    gold = env.unwrapped.entry["answer"]
    assert env.step(f"\\boxed{{0}} on reflection <answer>{gold}</answer>")[1] == 1.0


@needs_rg
def test_clones_share_the_dataset_and_continue_alike():
    env = gemkit.make("rg:leg_counting")
    env.reset(seed=2)
    twin = env.clone()
    assert twin.unwrapped.dataset is env.unwrapped.dataset
    assert twin.step("\\boxed{3}") == env.step("\\boxed{3}")


@needs_rg
def test_config_kwargs_reach_the_dataset_and_bad_ones_are_explained():
    env = gemkit.make("rg:leg_counting", min_animals=1, max_animals=1, dataset_seed=3)
    assert env.unwrapped.dataset.config.max_animals == 1
    with pytest.raises(gemkit.GemkitError, match="max_legs"):
        gemkit.make("rg:leg_counting", max_legs=3)
    with pytest.raises(gemkit.GemkitError, match="datasets="):
        gemkit.make("rg:composite")
    with pytest.raises(gemkit.GemkitError, match="numbers, strings, lists or dicts"):
        gemkit.make("rg:leg_counting", min_animals={1, 2})


@needs_rg
def test_index_option_picks_the_item():
    env = gemkit.make("rg:leg_counting", size=10)
    env.reset(options={"index": 4})
    assert env.unwrapped.entry == env.unwrapped.dataset[4]
    with pytest.raises(IndexError, match=r"\[0, 10\)"):
        env.reset(options={"index": 10})


def test_missing_package_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "reasoning_gym", None)
    rg_env._build.cache_clear()
    with pytest.raises(ReasoningGymMissing, match=r"pip install gemkit\[rg\]"):
        gemkit.make("rg:leg_counting")
    rg_env._build.cache_clear()


HOSTILE = [
    ("binary_matrix", "__import__('pathlib').Path({marker!r}).touch()"),
    ("binary_matrix", "9**9**9**9"),
    ("n_queens", "[open({marker!r}, 'w')]"),
    ("countdown", "__import__('pathlib').Path({marker!r}).touch()"),
    ("puzzle24", "9**9**9**9"),
    ("polynomial_multiplication", "x + __import__('pathlib').Path({marker!r}).touch()"),
    ("simple_integration", "(x+y+z)**99"),
    ("intermediate_integration", "x + exec(chr(49))"),
]


@needs_rg
@pytest.mark.parametrize("name, answer", HOSTILE)
def test_answers_that_upstream_scorers_would_eval_are_refused_unscored(tmp_path, name, answer):
    marker = tmp_path / "pwned"
    env = gemkit.make(f"rg:{name}", size=10)
    env.reset(options={"index": 0})
    obs, reward, terminated, _, info = env.step(
        f"<answer>{answer.format(marker=str(marker))}</answer>"
    )
    assert reward == 0.0 and terminated and info["refused"]
    assert "not scored" in obs
    assert not marker.exists()


def test_an_item_that_upstream_draws_from_global_generators_is_the_same_every_time():
    import random

    import numpy as np

    env = gemkit.make("rg:codeio")
    try:
        random.seed(1)
        np.random.seed(1)
        before = (random.random(), np.random.random())
        random.seed(1)
        np.random.seed(1)
        # items 13958 and 15952 came out different on every read before items.item_at
        for index in (13958, 15952):
            first, _ = env.reset(options={"index": index})
            again, _ = env.reset(options={"index": index})
            assert first == again
        # the caller's global generators are where they were
        assert (random.random(), np.random.random()) == before
    finally:
        env.close()
