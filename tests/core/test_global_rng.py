"""A library that draws from the global random state gets a private copy per env.

The library here is a real package written to a temporary folder, drawing the ways such
libraries do: `random.seed` then `random.randint`, a name imported from `random`, numpy's
legacy `np.random.seed` / `np.random.randint`, and `from numpy import random`.
"""

from __future__ import annotations

import importlib
import random
import sys
import threading

import numpy as np
import pytest

from gemkit.global_rng import PrivateGlobalRNG, privatize

LIBRARY = '''
import random
from random import choice
import numpy as np
from numpy import random as npr


def play(seed):
    """A seeded episode drawn from the global state, as GEM's and TextArena's envs draw."""
    if seed is not None:
        random.seed(seed)
        np.random.seed(seed)
    return [random.randint(0, 10**6), choice("abcdefgh"), int(np.random.randint(10**6)),
            float(npr.random()), random.random()]
'''


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    folder = tmp_path_factory.mktemp("lib")
    (folder / "globaldraws").mkdir()
    (folder / "globaldraws" / "__init__.py").write_text(LIBRARY)
    sys.path.insert(0, str(folder))
    try:
        module = importlib.import_module("globaldraws")
        alone = [module.play(s) for s in (1, 2)]  # before any stand-in: the library's own
        privatize(["globaldraws"])
        yield module, alone
    finally:
        sys.path.remove(str(folder))
        sys.modules.pop("globaldraws", None)


def test_a_seeded_draw_through_a_copy_is_the_librarys_own(lib):
    module, alone = lib
    for seed, expected in zip((1, 2), alone, strict=True):
        with PrivateGlobalRNG().active():
            assert module.play(seed) == expected


def test_interleaved_copies_keep_their_own_streams(lib):
    module, _ = lib
    a, b = PrivateGlobalRNG(), PrivateGlobalRNG()
    with a.active():
        first = module.play(5)
    with a.active():
        expected = module.play(None)  # what a draws next, with nobody in between
    a = PrivateGlobalRNG()
    with a.active():
        assert module.play(5) == first
    with b.active():
        module.play(9)  # a neighbour draws in between
    with a.active():
        assert module.play(None) == expected


def test_the_callers_global_state_is_untouched_and_unused(lib):
    module, _ = lib
    random.seed(3)
    np.random.seed(3)
    expected = (random.random(), float(np.random.random()))
    random.seed(3)
    np.random.seed(3)
    with PrivateGlobalRNG(0).active():
        module.play(7)
        module.play(None)
    assert (random.random(), float(np.random.random())) == expected


def test_outside_any_copy_the_library_draws_from_the_real_global_state(lib):
    module, _ = lib
    random.seed(4)
    np.random.seed(4)
    via_lib = module.play(None)
    random.seed(4)
    np.random.seed(4)
    direct = [random.randint(0, 10**6), random.choice("abcdefgh"), int(np.random.randint(10**6))]
    assert via_lib[:3] == direct


def test_each_thread_draws_from_the_copy_it_runs(lib):
    module, alone = lib
    results: dict[int, list] = {}
    start = threading.Barrier(4)

    def run(k: int) -> None:
        rng = PrivateGlobalRNG()
        start.wait()
        out = []
        for _ in range(200):  # many short activations, interleaved across threads
            with rng.active():
                out.append(module.play(1 + k % 2))
        results[k] = out

    threads = [threading.Thread(target=run, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k, out in results.items():
        assert all(episode == alone[k % 2] for episode in out)


def test_a_clone_of_a_copy_continues_like_the_original(lib):
    import copy

    module, _ = lib
    rng = PrivateGlobalRNG()
    with rng.active():
        module.play(8)
    twin = copy.deepcopy(rng)
    with rng.active():
        a = module.play(None)
    with twin.active():
        b = module.play(None)
    assert a == b
