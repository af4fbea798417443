"""Policies: anything that turns an observation (text or chat messages) into an action."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

Observation = str | list[dict[str, Any]]

#: Spawn key of a policy's random stream. An env seeded with `s` draws from
#: `SeedSequence(s)`; a policy seeded with the same `s` draws from this child of it, so a
#: baseline given the episode's seed can never replay the env's draws (the secret word,
#: code or number).
POLICY_STREAM = (0x706F6C6963,)  # "polic"


def policy_rng(seed: int | None = None) -> np.random.Generator:
    """A policy's own generator: for the same seed, independent of every env's `np_random`."""
    return np.random.Generator(
        np.random.PCG64(np.random.SeedSequence(seed, spawn_key=POLICY_STREAM))
    )


@runtime_checkable
class Policy(Protocol):
    """`await policy.act(observation) -> action`; `reset()` starts a new episode."""

    async def act(self, observation: Observation) -> str:
        """Return the next action for this observation."""
        ...

    def reset(self) -> None:
        """Forget the previous episode."""
        ...


def last_text(observation: Observation) -> str:
    """The text of an observation: the string itself, or the last message's content."""
    if isinstance(observation, str):
        return observation
    for message in reversed(observation):
        content = message.get("content")
        if isinstance(content, str):
            return content
    return ""


class SyncPolicy:
    """Base for policies that compute their action without I/O: implement `choose`."""

    def reset(self) -> None:
        """Forget the previous episode."""

    def choose(self, observation: str) -> str:
        """Return the next action for this observation text."""
        raise NotImplementedError

    async def act(self, observation: Observation) -> str:
        """Return `choose` of the observation's text."""
        return self.choose(last_text(observation))


class ScriptedPolicy(SyncPolicy):
    """Replays a fixed list of actions (for tests); repeats the last one when it runs out."""

    def __init__(self, actions: Sequence[str]):
        if not actions:
            raise ValueError("ScriptedPolicy needs at least one action")
        self.actions = list(actions)
        self._i = 0

    def reset(self) -> None:
        """Start the script over."""
        self._i = 0

    def choose(self, observation: str) -> str:
        """Return the next scripted action."""
        action = self.actions[min(self._i, len(self.actions) - 1)]
        self._i += 1
        return action


class RandomPolicy(SyncPolicy):
    """Plays uniformly random well-formed moves from `sampler(rng)`, else a boxed number 1-100.

    A baseline: it sees only the observation, and its generator (`policy_rng(seed)`) shares
    no draws with an env reset with the same seed.
    """

    def __init__(
        self, sampler: Callable[[np.random.Generator], str] | None = None, seed: int | None = None
    ):
        self.sampler = sampler
        self.rng = policy_rng(seed)

    def choose(self, observation: str) -> str:
        """Return a random action."""
        if self.sampler is not None:
            return self.sampler(self.rng)
        return f"\\boxed{{{int(self.rng.integers(1, 101))}}}"
