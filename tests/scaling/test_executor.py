"""Executors without Ray: the local (inline or threads) and process executors."""

from __future__ import annotations

import os
import threading

import pytest

from gemkit.executor import ExecutorError, get_executor


def square(x: int) -> int:
    return x * x


def fail_on_three(x: int) -> int:
    if x == 3:
        raise ValueError("three is not allowed")
    return x


@pytest.mark.parametrize(("kind", "workers"), [("local", 1), ("local", 3), ("process", 2)])
def test_map_unordered_yields_every_result_once(kind, workers):
    with get_executor(kind, workers) as ex:
        assert sorted(ex.map_unordered(square, range(20))) == [x * x for x in range(20)]


@pytest.mark.parametrize(("kind", "workers"), [("local", 1), ("local", 2), ("process", 2)])
def test_a_failing_item_raises_its_own_error_or_is_yielded_on_request(kind, workers):
    with get_executor(kind, workers) as ex:
        with pytest.raises(ValueError, match="three is not allowed"):
            list(ex.map_unordered(fail_on_three, range(6)))
        out = list(ex.map_unordered(fail_on_three, range(6), return_exceptions=True))
    errors = [r for r in out if isinstance(r, Exception)]
    assert len(errors) == 1 and sorted(r for r in out if isinstance(r, int)) == [0, 1, 2, 4, 5]


def test_threads_run_items_concurrently_and_items_are_consumed_lazily():
    gate = threading.Barrier(3, timeout=10)
    pulled = []

    def items():
        for i in range(1000):
            pulled.append(i)
            yield i

    def wait_for_peers(x: int) -> int:
        if x < 3:
            gate.wait()  # only returns when three items run at once
        return x

    seen: set[int] = set()
    with get_executor("local", 3) as ex:
        for result in ex.map_unordered(wait_for_peers, items()):
            seen.add(result)
            if {0, 1, 2} <= seen:
                break
    assert len(pulled) < 20, "a bounded number of items is in flight, not the whole iterable"


_STATE: dict[str, str] = {}


def remember(word: str) -> None:
    _STATE["word"] = word


def with_state(x: int) -> str:
    return f"{_STATE.get('word', 'uninitialized')}-{x}"


@pytest.mark.parametrize(("kind", "workers"), [("local", 1), ("local", 2), ("process", 2)])
def test_map_keeps_item_order_and_the_initializer_runs_before_items(kind, workers):
    word = f"{kind}{workers}"  # a word of its own: forked workers inherit this process's state
    with get_executor(kind, workers, initializer=remember, initargs=(word,)) as ex:
        assert list(ex.map(with_state, range(10))) == [f"{word}-{x}" for x in range(10)]


def test_the_process_executor_defaults_to_the_cores_this_process_counts(monkeypatch):
    # GEMKIT_CORES keeps cores for a trainer: a synthesis pool must not take them all back
    monkeypatch.setenv("GEMKIT_CORES", "3")
    with get_executor("process") as ex:
        assert ex.workers == 3
        assert sorted(ex.map_unordered(square, range(5))) == [0, 1, 4, 9, 16]
    monkeypatch.delenv("GEMKIT_CORES")
    assert get_executor("process").workers == len(os.sched_getaffinity(0))


def test_unknown_executor_and_bad_worker_count_are_explained():
    with pytest.raises(ExecutorError, match="expected one of local, process, ray"):
        get_executor("spark")
    with pytest.raises(ExecutorError, match="workers must be >= 1"):
        get_executor("local", 0)
