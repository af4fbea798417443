"""A private copy of the global random state, for envs written against `random.seed`.

Envs from GEM and TextArena draw from the *global* `random` and `numpy.random` state (their
`reset(seed)` calls `random.seed(seed)`), so two of them stepped in one vector draw from each
other's stream, and a seeded episode is not reproduced once another env has drawn in between.
An adapter gives each env a `PrivateGlobalRNG` and runs every call into the env inside
`active()`: for that call, the library's draws come from the env's own copy. Same seed, same
episode, in any vector slot, thread or clone, as for an env that draws from `self.np_random`.

How: every module of the library (`gem`, `gem.envs.game_env.sudoku`, ...) holds, in place of
the `random` and `numpy` modules it imported, a stand-in that sends each draw to the copy of
the env whose call is running on this thread, and to the real module when none is (GEM used
on its own behaves as before). An activation only sets a thread-local, about 0.1 µs; swapping
the whole global state in and out (`random.setstate`, 625 words; numpy's 2.5 KB) cost several
times a GEM step. The process's global state is never touched: the caller's own draws are left
as they were, and threads need no lock.

Covered: what the library's own modules draw through `random`'s functions and numpy's legacy
ones (`np.random.seed`, `np.random.randint`, ...), also when imported by name (`from random
import choice`). Not covered: generators an env builds itself without a seed
(`np.random.default_rng()`, `random.Random()`), which no stand-in can reach, and draws made
inside another library it calls (those see the process's global state).
"""

from __future__ import annotations

import functools
import random
import sys
import threading
import types
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import numpy.random.mtrand as mtrand

_local = threading.local()


def _running() -> PrivateGlobalRNG | None:
    """The copy of the env whose call runs on this thread, if any."""
    return getattr(_local, "rng", None)


# `random`'s functions are bound methods of one hidden `Random`; numpy's legacy ones of one
# `RandomState` (plus three plain functions that reach it: seed, get_state, set_state)
_PY_NAMES = frozenset(
    name for name, value in vars(random).items() if getattr(value, "__self__", None) is random._inst
)
_NP_NAMES = frozenset(
    name
    for name, value in vars(np.random).items()
    if getattr(value, "__self__", None) is mtrand._rand
) | {"seed", "get_state", "set_state"}


def _py_attr(name: str) -> property:
    def get(_: Any) -> Any:
        rng = getattr(_local, "rng", None)
        return getattr(random if rng is None else rng.py, name)

    return property(get)


def _np_attr(name: str) -> property:
    def get(_: Any) -> Any:
        rng = getattr(_local, "rng", None)
        return getattr(np.random if rng is None else rng.np, name)

    return property(get)


def _stand_in(module: types.ModuleType, names: frozenset[str], attr: Callable) -> Any:
    """A module object with `module`'s attributes, `names` looked up per access by `attr`."""
    cls = type(
        f"Private_{module.__name__.replace('.', '_')}",
        (types.ModuleType,),
        {name: attr(name) for name in names}
        | {"__getattr__": lambda self, name: getattr(module, name)},
    )
    stand_in = cls(module.__name__, module.__doc__)
    stand_in.__dict__.update((k, v) for k, v in vars(module).items() if k not in names)
    return stand_in


_RANDOM = _stand_in(random, _PY_NAMES, _py_attr)
_NP_RANDOM = _stand_in(np.random, _NP_NAMES, _np_attr)
# numpy itself, but for its `random`; the rest is numpy's own objects (found without a detour)
_NUMPY = _stand_in(np, frozenset({"random"}), lambda _: property(lambda _self: _NP_RANDOM))


def _forward(stand_in: Any, name: str) -> Callable[..., Any]:
    """A function for `from random import name`: each call goes to the running copy."""
    method = getattr(stand_in, name)

    @functools.wraps(method)
    def call(*args: Any, **kwargs: Any) -> Any:
        return getattr(stand_in, name)(*args, **kwargs)

    return call


_METHOD_TYPES = (types.MethodType, types.BuiltinMethodType)


def _replacement(value: Any) -> Any:
    """What a module-level name bound to `value` should hold instead, or None to keep it."""
    if value is random:
        return _RANDOM
    if value is np:
        return _NUMPY
    if value is np.random or value is mtrand:
        return _NP_RANDOM
    if any(value is f for f in (mtrand.seed, mtrand.get_state, mtrand.set_state)):
        return _forward(_NP_RANDOM, value.__name__)
    if type(value) not in _METHOD_TYPES:  # never touch other objects (some load on access)
        return None
    owner, name = value.__self__, value.__name__
    if owner is random._inst and name in _PY_NAMES:
        return _forward(_RANDOM, name)
    if owner is mtrand._rand and name in _NP_NAMES:
        return _forward(_NP_RANDOM, name)
    return None


_patched: set[str] = set()
_packages: set[str] = set()
_seen = 0  # len(sys.modules) at the last scan


def _patch_new_modules() -> None:
    """Give every loaded module of the registered packages the stand-ins (once per module)."""
    global _seen
    _seen = len(sys.modules)
    if not _packages:
        return
    for name, module in list(sys.modules.items()):
        if name in _patched or name.split(".", 1)[0] not in _packages:
            continue
        _patched.add(name)
        namespace = getattr(module, "__dict__", None)
        if namespace is None:
            continue
        for key, value in list(namespace.items()):
            new = _replacement(value)
            if new is not None:
                namespace[key] = new


def privatize(packages: Iterable[str]) -> None:
    """Make the modules of `packages` (top-level names, e.g. `"gem"`) draw from the running copy.

    Modules imported later are patched at the next `active()`; import an env's module
    before its first call (its constructor may draw) so that no draw escapes.
    """
    _packages.update(packages)
    _patch_new_modules()


class _Active:
    """`with rng.active():` the running copy on this thread, the previous one put back after."""

    __slots__ = ("rng", "previous")

    def __init__(self, rng: PrivateGlobalRNG):
        self.rng = rng
        self.previous: PrivateGlobalRNG | None = None

    def __enter__(self) -> None:
        if len(sys.modules) != _seen:
            _patch_new_modules()
        self.previous = getattr(_local, "rng", None)
        _local.rng = self.rng

    def __exit__(self, *exc: object) -> None:
        _local.rng = self.previous


class PrivateGlobalRNG:
    """A private copy of the global `random` and legacy `numpy.random` states.

    `seed` seeds both as `random.seed(seed)` and `np.random.seed(seed)` would (None: fresh
    entropy). Pass the packages whose draws it takes over (`privatize`), once per process.
    """

    def __init__(self, seed: int | None = None):
        self.seed = seed
        self.py = random.Random(seed)
        self._np: np.random.RandomState | None = None

    @property
    def np(self) -> np.random.RandomState:
        """The copy of numpy's legacy global state (built on first use: most steps draw none)."""
        if self._np is None:
            self._np = np.random.RandomState(self.seed)
        return self._np

    def active(self) -> _Active:
        """A context manager: the privatized packages draw from this copy inside the block."""
        return _Active(self)

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """`fn(*args)` with this copy running: `active()` for one call, in one frame.

        An env adapter's `step` uses it: a `with` block costs three Python calls, a good part
        of a GEM step's own time.
        """
        if len(sys.modules) != _seen:
            _patch_new_modules()
        previous = getattr(_local, "rng", None)
        _local.rng = self
        try:
            return fn(*args)
        finally:
            _local.rng = previous
