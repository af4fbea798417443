"""Dataset envs: consecutive seeds are different items, and the same seed is the same item."""

from __future__ import annotations

import pytest

import gemkit
from gemkit.items import seeded_index

DATASET_ENVS = ["math:Builtin-v0", "qa:Builtin-v0", "code:Builtin-v0"]


@pytest.mark.parametrize("size", [1, 2, 7, 24, 100, 1 << 40])
def test_each_block_of_consecutive_seeds_visits_distinct_items(size):
    n = min(size, 500)
    for block in (0, 3):
        items = [seeded_index(block * size + s, size) for s in range(n)]
        assert len(set(items)) == n
        assert all(0 <= i < size for i in items)


def test_blocks_visit_the_items_in_other_orders():
    first = [seeded_index(s, 24) for s in range(24)]
    second = [seeded_index(24 + s, 24) for s in range(24)]
    assert sorted(first) == sorted(second) == list(range(24))
    assert first != second


@pytest.mark.parametrize("env_id", DATASET_ENVS)
def test_an_eval_of_n_seeds_sees_n_different_items(env_id):
    env = gemkit.make(env_id)
    try:
        size = len(getattr(env.unwrapped, "problems", None) or env.unwrapped.records)
        seen = [env.reset(seed=s)[1]["index"] for s in range(size)]
        again = [env.reset(seed=s)[1]["index"] for s in range(size)]
    finally:
        env.close()
    assert len(set(seen)) == size
    assert seen == again


def test_toolworld_tasks_of_consecutive_seeds_differ():
    env = gemkit.make("toolworld:TripPlanning-v0")
    try:
        records = env.unwrapped.records
        seen = []
        for s in range(len(records)):
            env.reset(seed=s)
            seen.append(records.index(env.unwrapped.record))
    finally:
        env.close()
    assert len(set(seen)) == len(records)


@pytest.mark.parametrize("env_id", [*DATASET_ENVS, "toolworld:TripPlanning-v0"])
@pytest.mark.parametrize("index", [True, 2.7, "1", -1, 10**9])
def test_every_dataset_env_refuses_an_index_that_is_not_one_of_its_items(env_id, index):
    # code and toolworld had their own copy of the index rule, which took True and 2.7
    env = gemkit.make(env_id)
    try:
        with pytest.raises((IndexError, gemkit.GemkitError), match=r"must be an integer in \[0, "):
            env.reset(options={"index": index})
    finally:
        env.close()
