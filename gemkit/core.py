"""The environment contract: a text `Env` and the wrappers that compose over it."""

from __future__ import annotations

import asyncio
import copy
import functools
import string
from collections.abc import Awaitable, Callable
from typing import Any, SupportsFloat, cast

import gymnasium
import numpy as np
from gymnasium.error import CustomSpaceError
from gymnasium.spaces import Text
from gymnasium.utils import seeding
from gymnasium.vector.utils import create_shared_memory

StepResult = tuple[str, float, bool, bool, dict[str, Any]]
ResetResult = tuple[str, dict[str, Any]]


def as_step_result(result: tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]) -> StepResult:
    """A gymnasium env's step result read as gemkit's (its reward passes through as it is)."""
    return cast(StepResult, result)


class TextSpace(Text):
    """A `gymnasium` Text space that holds any string up to `max_length` characters.

    Sampling draws printable ASCII (useful for fuzzing an env with junk actions); membership
    accepts any Unicode string, since an LLM can type anything.
    """

    def __init__(self, max_length: int = 100_000, *, min_length: int = 0, seed: int | None = None):
        super().__init__(max_length, min_length=min_length, charset=string.printable, seed=seed)

    def contains(self, x: Any) -> bool:
        """Return True for any str within the length bounds."""
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"TextSpace(max_length={self.max_length})"


@create_shared_memory.register(TextSpace)
def _text_has_no_shared_memory(space: TextSpace, n: int = 1, ctx: Any = None) -> Any:
    """Refuse gymnasium's shared memory, which cannot carry a text observation.

    `gymnasium.vector.AsyncVectorEnv(shared_memory=True)`, its default, reads a `Text`
    observation out of the buffer once, when the vector is made, and hands back that string
    ever after (all "0"s), at the cost of a Python loop over `max_length` characters per env
    and step. Raising here makes gymnasium say to pass `shared_memory=False`.
    """
    raise CustomSpaceError(
        f"{space!r} cannot go through gymnasium's shared memory (it would return the same "
        "string of '0's at every step): pass shared_memory=False to "
        "gymnasium.vector.AsyncVectorEnv, or use gemkit.make_vec"
    )


class Env(gymnasium.Env[str, str]):
    """A text environment: observations and actions are strings.

    Subclasses implement `reset` (calling `super().reset(seed=seed)` first, which seeds
    `self.np_random`) and `step`. All randomness must come from `self.np_random` so that the
    same seed gives the same episode in any process, thread or vector slot.

    `step` returns `(observation, reward, terminated, truncated, info)`:

    - `terminated`: the episode reached a terminal state of the task (won, lost, answered).
    - `truncated`: the episode was cut short from outside the task (turn limit).
    - `info["success"]`: whether the task was solved, set on the final step.

    Anything an LLM can type is a valid action: invalid ones get an observation that says
    what was wrong and what format is expected; `step` never raises on them.
    """

    metadata: dict[str, Any] = {"render_modes": ["ansi"], "render_fps": 1}
    observation_space = TextSpace(1_000_000)
    action_space = TextSpace(4_096)
    #: whether the env's final answer is a fenced code block (a code task): a tool wrapper then
    #: never runs a ```python block of an answer as a call of its python tool
    answers_in_code: bool = False

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> ResetResult:
        """Start an episode; return the first observation (the task) and an info dict."""
        if seed is not None:
            if not isinstance(seed, int) or seed < 0:
                seeding.np_random(seed)  # raises gymnasium's message for a bad seed
            # the generator is built from the seed on first use (as gymnasium would build it
            # here): an env that draws nothing skips the cost of seeding
            self._rng = None
            self._np_random_seed = None
            self._pending_seed = seed
        return "", {}

    # plain attributes, never `__dict__`: reading that turns off CPython's fast attribute path
    _rng: np.random.Generator | None = None
    _pending_seed: int | None = None

    def _seed_now(self) -> np.random.Generator:
        seed, self._pending_seed = self._pending_seed, None
        rng, self._np_random_seed = seeding.np_random(seed)
        self._rng = rng
        return rng

    @property
    def _np_random(self) -> np.random.Generator | None:
        """gymnasium's slot for the generator (its checker reads it); built on first read."""
        if self._rng is None and self._pending_seed is not None:
            return self._seed_now()
        return self._rng

    @_np_random.setter
    def _np_random(self, value: np.random.Generator | None) -> None:
        self._pending_seed = None
        self._rng = value

    @property
    def np_random(self) -> np.random.Generator:
        """The env's random generator, seeded by `reset(seed=...)`."""
        rng = self._rng
        return rng if rng is not None else self._seed_now()

    @np_random.setter
    def np_random(self, value: np.random.Generator) -> None:
        self._np_random = value
        self._np_random_seed = -1

    @property
    def np_random_seed(self) -> int:
        """The seed of `np_random` (-1 when a generator was assigned directly)."""
        self.np_random  # noqa: B018 - builds a pending generator and its seed
        if self._np_random_seed is None:
            self._seed_now()
        return self._np_random_seed  # type: ignore[return-value]

    def step(self, action: str) -> StepResult:  # pragma: no cover - abstract
        """Apply one text action; return `(obs, reward, terminated, truncated, info)`."""
        raise NotImplementedError

    async def areset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> ResetResult:
        """Async twin of `reset`; I/O-bound envs override it, others inherit this call."""
        return self.reset(seed=seed, options=options)

    async def astep(self, action: str) -> StepResult:
        """Async twin of `step`; I/O-bound envs override it, others inherit this call."""
        return self.step(action)

    def clone(self) -> Env:
        """Return an independent env in the same state (same RNG state, same episode)."""
        return copy.deepcopy(self)

    def runs_sync(self, method: str | None = None) -> bool:
        """True when `astep`/`areset` only call `step`/`reset` (lets vectors skip the event loop).

        `method` asks about one of them (`"step"` or `"reset"`); None asks about both.
        """
        cls = type(self)
        step, reset = cls.astep is Env.astep, cls.areset is Env.areset
        return step if method == "step" else reset if method == "reset" else step and reset

    def render(self) -> str | None:
        """Return a text picture of the state, when the env has one."""
        return None

    def __repr__(self) -> str:
        spec = getattr(self, "spec", None)
        return f"<{type(self).__name__}{'' if spec is None else ' ' + spec.id}>"


class Wrapper(gymnasium.Wrapper[str, str, str, str]):
    """Wraps an env to change one thing; every other attribute is read live from the env.

    Unknown attribute reads are forwarded to the wrapped env on each access (never copied at
    construction), so a wrapper never shows a stale value. A subclass that overrides only the
    sync `step`/`reset` keeps working under `astep`/`areset`: those call the sync override.
    """

    def __init__(self, env: gymnasium.Env):
        super().__init__(env)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(f"accessing private attribute '{name}' is prohibited")
        return getattr(self.env, name)

    async def areset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> ResetResult:
        """Async twin of `reset`: forwards to the wrapped env's `areset`."""
        cls: type = type(self)
        if _sync_override(cls, "reset"):
            return self.reset(seed=seed, options=options)
        return await areset_of(self.env, seed=seed, options=options)

    async def astep(self, action: str) -> StepResult:
        """Async twin of `step`: forwards to the wrapped env's `astep`."""
        cls: type = type(self)
        if _sync_override(cls, "step"):
            return as_step_result(self.step(action))
        return await astep_of(self.env, action)

    def clone(self) -> Wrapper:
        """Return an independent copy of the whole wrapper stack in the same state."""
        return copy.deepcopy(self)

    def runs_sync(self, method: str | None = None) -> bool:
        """True when this stack's async methods (or only `method`'s) never await real I/O."""
        cls = type(self)
        if method != "reset" and cls.astep not in _WRAPPER_ASTEPS:
            return False
        if method != "step" and cls.areset not in _WRAPPER_ARESETS:
            return False
        return inner_runs_sync(self.env, method)

    def __repr__(self) -> str:
        return f"<{type(self).__name__}{self.env!r}>"


class ObservationWrapper(Wrapper):
    """Changes each observation with `observation(obs) -> obs`."""

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> ResetResult:
        """Reset the wrapped env and transform its first observation."""
        obs, info = self.env.reset(seed=seed, options=options)
        return self.observation(obs), info

    def step(self, action: str) -> StepResult:
        """Step the wrapped env and transform the observation."""
        obs, reward, terminated, truncated, info = as_step_result(self.env.step(action))
        return self.observation(obs), reward, terminated, truncated, info

    async def areset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> ResetResult:
        """Async twin of `reset`."""
        cls: type = type(self)
        if _sync_override(cls, "reset"):
            return self.reset(seed=seed, options=options)
        obs, info = await areset_of(self.env, seed=seed, options=options)
        return self.observation(obs), info

    async def astep(self, action: str) -> StepResult:
        """Async twin of `step`."""
        cls: type = type(self)
        if _sync_override(cls, "step"):
            return self.step(action)
        obs, reward, terminated, truncated, info = await astep_of(self.env, action)
        return self.observation(obs), reward, terminated, truncated, info

    def observation(self, observation: str) -> Any:
        """Return the transformed observation."""
        raise NotImplementedError


class ActionWrapper(Wrapper):
    """Changes each action with `action(act) -> act` before the wrapped env sees it."""

    def step(self, action: Any) -> StepResult:
        """Transform the action and step the wrapped env."""
        return as_step_result(self.env.step(self.action(action)))

    async def astep(self, action: Any) -> StepResult:
        """Async twin of `step`."""
        cls: type = type(self)
        if _sync_override(cls, "step"):
            return self.step(action)
        return await astep_of(self.env, self.action(action))

    def action(self, action: Any) -> str:
        """Return the transformed action."""
        raise NotImplementedError


class RewardWrapper(Wrapper):
    """Changes each reward with `reward(r) -> r`."""

    def step(self, action: str) -> StepResult:
        """Step the wrapped env and transform the reward."""
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, self.reward(reward), terminated, truncated, info

    async def astep(self, action: str) -> StepResult:
        """Async twin of `step`."""
        cls: type = type(self)
        if _sync_override(cls, "step"):
            return self.step(action)
        obs, reward, terminated, truncated, info = await astep_of(self.env, action)
        return obs, self.reward(reward), terminated, truncated, info

    def reward(self, reward: SupportsFloat) -> float:
        """Return the transformed reward."""
        raise NotImplementedError


def inner_runs_sync(env: Any, method: str | None = None) -> bool:
    """Whether `env` runs `method` (`"step"`, `"reset"`, or both for None) without awaiting I/O.

    An env from outside gemkit has no `runs_sync`: it counts as sync unless it has the async
    twin asked about (`astep`/`areset`), which is then awaited, or it is a gymnasium wrapper
    over an env that awaits I/O (its twin is then derived in a worker thread).
    """
    inner = getattr(env, "runs_sync", None)
    if not callable(inner):
        twins = {"step": ("astep",), "reset": ("areset",)}.get(method or "", ("astep", "areset"))
        if any(callable(getattr(env, name, None)) for name in twins):
            return False
        below = env.env if isinstance(env, gymnasium.Wrapper) else None
        return below is None or inner_runs_sync(below, method)
    try:
        return bool(inner(method))
    except TypeError:  # a runs_sync that takes no argument answers for both methods
        return bool(inner())


def areset_of(
    env: Any, *, seed: int | None = None, options: dict[str, Any] | None = None
) -> Awaitable[ResetResult]:
    """`env.areset(...)` to await, derived for an env that has only `reset` (any gymnasium env).

    The derived twin calls `reset` at once when nothing below it awaits I/O, and otherwise in
    a worker thread (a gymnasium wrapper over a tool env), so the caller's loop never blocks.
    A plain function, not a coroutine: awaiting it awaits the env's own twin directly, with no
    extra frame on the hot path.
    """
    twin: Callable[..., Awaitable[ResetResult]] | None = getattr(env, "areset", None)
    if twin is not None:
        return twin(seed=seed, options=options)
    return _derived(env, "reset", (), {"seed": seed, "options": options})


def astep_of(env: Any, action: Any) -> Awaitable[StepResult]:
    """`env.astep(action)` to await, derived for an env that has only `step` (as `areset_of`)."""
    twin: Callable[[Any], Awaitable[StepResult]] | None = getattr(env, "astep", None)
    if twin is not None:
        return twin(action)
    return _derived(env, "step", (action,), {})


async def _derived(env: Any, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    call = getattr(env, method)
    if inner_runs_sync(env, method):
        return call(*args, **kwargs)
    return await asyncio.to_thread(call, *args, **kwargs)


def clone_of(env: Any) -> Any:
    """`env.clone()`, or a deep copy for an env without one (a plain gymnasium env)."""
    clone = getattr(env, "clone", None)
    return clone() if callable(clone) else copy.deepcopy(env)


_WRAPPER_ASTEPS = {
    Wrapper.astep,
    ObservationWrapper.astep,
    ActionWrapper.astep,
    RewardWrapper.astep,
}
_WRAPPER_ARESETS = {Wrapper.areset, ObservationWrapper.areset}


@functools.cache
def _owner(cls: type, name: str) -> type:
    return next(k for k in cls.__mro__ if name in k.__dict__)


# callers bind `cls: type = type(self)` first: mypy reads type[Wrapper] (a gymnasium wrapper
# class) as unhashable, though every class is
@functools.cache
def _sync_override(cls: type, name: str) -> bool:
    """True when `cls` overrides sync `name` below the class that defines its async twin."""
    sync_owner, async_owner = _owner(cls, name), _owner(cls, "a" + name)
    return sync_owner is not async_owner and issubclass(sync_owner, async_owner)
