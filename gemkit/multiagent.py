"""The multi-agent contract: `MultiAgentEnv` (dicts keyed by agent id) and `OpponentEnv`.

A multi-agent env serves turn-based play (one agent acts at a time) and simultaneous play
(several act at once) through one interface: `current_agents` says who must act now, and
`step` takes a dict of their actions. `OpponentEnv` seats fixed policies in every other chair
and leaves a plain single-agent `gemkit.core.Env`, for self-play or training against a
scripted partner.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Mapping
from typing import Any

import numpy as np
from gymnasium.utils import seeding

from gemkit.core import Env, ResetResult, StepResult
from gemkit.errors import GemkitError
from gemkit.policy import Policy, SyncPolicy

AgentObs = dict[str, str]
MultiResetResult = tuple[AgentObs, dict[str, dict[str, Any]]]
MultiStepResult = tuple[
    AgentObs, dict[str, float], dict[str, bool], dict[str, bool], dict[str, dict[str, Any]]
]


class MultiAgentError(GemkitError, ValueError):
    """A multi-agent env driven with a malformed action dict (not a dict, unknown agent id)."""


class MultiAgentEnv:
    """An environment with several agents; observations and actions are text, keyed by agent id.

    - `possible_agents`: every agent id the env can have; `agents`: those still in the episode
      (empty once it has ended).
    - `current_agents`: who must act now. Turn-based envs name one agent (`agent_selection`);
      simultaneous envs name several. Actions of agents not on turn are ignored and their info
      says so; a missing action of an agent on turn leaves the state unchanged.
    - `reset(seed=, options=)` -> `(obs, infos)`; `step(actions)` ->
      `(obs, rewards, terminated, truncated, infos)`, each a dict over `possible_agents`:
      `obs[a]` is what agent `a` sees now (the same text as before when nothing changed for it).
    - Randomness comes from `self.np_random`, seeded by `reset(seed=)`, never global state.
    - Anything an LLM can type is a valid action: an invalid move gets a message, never an
      exception. Only a malformed dict (an unknown agent id) raises `MultiAgentError`.
    """

    possible_agents: list[str] = []
    metadata: dict[str, Any] = {"render_modes": ["ansi"]}
    render_mode: str | None = None
    spec: Any = None

    def __init__(self) -> None:
        self.agents: list[str] = []
        self._np_random: np.random.Generator | None = None

    # -- randomness -----------------------------------------------------------------------

    @property
    def np_random(self) -> np.random.Generator:
        """This instance's generator (seeded from OS entropy if `reset` was given no seed)."""
        if self._np_random is None:
            self._np_random, _ = seeding.np_random()
        return self._np_random

    @np_random.setter
    def np_random(self, value: np.random.Generator) -> None:
        self._np_random = value

    # -- the contract ---------------------------------------------------------------------

    @property
    def current_agents(self) -> list[str]:
        """The agents that must act in the next `step` (all live agents, unless overridden)."""
        return list(self.agents)

    @property
    def agent_selection(self) -> str | None:
        """The one agent on turn in turn-based play; None when several (or none) act now."""
        current = self.current_agents
        return current[0] if len(current) == 1 else None

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> MultiResetResult:
        """Start an episode; subclasses call this first (it seeds `np_random`)."""
        if seed is not None:
            self._np_random, _ = seeding.np_random(seed)
        self.agents = list(self.possible_agents)
        return {}, {}

    def step(self, actions: Mapping[str, str]) -> MultiStepResult:  # pragma: no cover
        """Apply the actions of the agents on turn; return per-agent results."""
        raise NotImplementedError

    async def areset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> MultiResetResult:
        """Async twin of `reset`."""
        return self.reset(seed=seed, options=options)

    async def astep(self, actions: Mapping[str, str]) -> MultiStepResult:
        """Async twin of `step`."""
        return self.step(actions)

    def clone(self) -> MultiAgentEnv:
        """An independent env in the same state (same RNG state, same episode)."""
        return copy.deepcopy(self)

    def render(self) -> str | None:
        """A text picture of the state, when the env has one."""
        return None

    def close(self) -> None:
        """Release resources."""

    @property
    def unwrapped(self) -> MultiAgentEnv:
        """The env itself (for `gemkit.make`, which sets `spec` on the unwrapped env)."""
        return self

    # -- helpers for subclasses -----------------------------------------------------------

    def split_actions(
        self, actions: Mapping[str, Any]
    ) -> tuple[dict[str, str | Mapping[str, Any]], dict[str, str]]:
        """Sort `actions` into those of agents on turn and messages for everyone else.

        Returns `(valid, problems)`: `valid[a]` is the action of agent `a` on turn (text, or a
        chat-message dict as an LLM policy may give); `problems[a]` says why agent `a`'s action
        was ignored, or that an agent on turn gave none.
        """
        if not isinstance(actions, Mapping):
            raise MultiAgentError(
                f"step() takes a dict {{agent_id: action}}, got {type(actions).__name__}; "
                f"agents: {self.possible_agents}"
            )
        unknown = [a for a in actions if a not in self.possible_agents]
        if unknown:
            raise MultiAgentError(
                f"unknown agent ids {unknown}; this env's agents are {self.possible_agents}"
            )
        current = self.current_agents
        valid: dict[str, str | Mapping[str, Any]] = {}
        problems: dict[str, str] = {}
        for agent, action in actions.items():
            if agent in current:
                valid[agent] = action if isinstance(action, str | Mapping) else str(action)
            elif not self.agents:
                problems[agent] = "The episode is over; call reset() to start a new one."
            else:
                waiting = ", ".join(current) or "nobody"
                problems[agent] = f"It is not your turn (waiting for {waiting}); action ignored."
        for agent in current:
            if agent not in valid:
                problems[agent] = "You are on turn but sent no action; nothing happened."
        return valid, problems

    def per_agent(self, value: Any) -> dict[str, Any]:
        """A dict with `value` (copied) for every possible agent."""
        return {a: copy.copy(value) for a in self.possible_agents}

    def __repr__(self) -> str:
        spec = getattr(self, "spec", None)
        return f"<{type(self).__name__}{'' if spec is None else ' ' + spec.id}>"


def staller(invalid_moves: Mapping[str, int]) -> str | None:
    """The agent that wasted the most turns on invalid moves, or None on a tie.

    Turn-limited games end a game that runs out of turns with this agent forfeiting: else a
    player facing a loss could stall with invalid moves until the limit voids the game, and
    pay only the small invalid-move penalty instead of the loss.
    """
    ranked = sorted(invalid_moves.items(), key=lambda kv: -kv[1])
    if not ranked or ranked[0][1] == 0 or (len(ranked) > 1 and ranked[0][1] == ranked[1][1]):
        return None
    return ranked[0][0]


def _reseed(policy: Any, rng: np.random.Generator) -> None:
    # policies that draw from `self.rng` get a seed drawn from the env, so that the same
    # `reset(seed=)` replays the same episode against a stochastic opponent
    if isinstance(getattr(policy, "rng", None), np.random.Generator):
        policy.rng = np.random.default_rng(int(rng.integers(2**63)))


class OpponentEnv(Env):
    """A single-agent `Env` for `agent`; every other agent is played by a fixed policy.

    `opponents` maps agent id -> policy (a single policy plays every other seat). After the
    learner's action the opponents act until the learner is on turn again or the episode
    ends; the reward sums what the learner earned over those steps. `info["opponent_actions"]`
    lists the opponents' moves. Opponents with an `rng` attribute are reseeded from
    `np_random` at reset, so the same seed gives the same episode.
    """

    def __init__(
        self,
        env: MultiAgentEnv,
        opponents: Policy | Mapping[str, Policy],
        agent: str | None = None,
        *,
        max_opponent_moves: int = 1_000,
    ):
        self.env = env
        self.agent = agent if agent is not None else env.possible_agents[0]
        if self.agent not in env.possible_agents:
            raise MultiAgentError(
                f"agent {self.agent!r} is not in this env; choose one of {env.possible_agents}"
            )
        others = [a for a in env.possible_agents if a != self.agent]
        if isinstance(opponents, Mapping):
            missing = [a for a in others if a not in opponents]
            if missing:
                raise MultiAgentError(f"no opponent policy for agents {missing}")
            self.opponents = {a: opponents[a] for a in others}
        else:
            self.opponents = {a: opponents for a in others}
        self.max_opponent_moves = max_opponent_moves
        self._obs: AgentObs = {}
        # `--policy random` samples well-formed moves from the unwrapped env's `random_action`
        random_action = getattr(env, "random_action", None)
        if callable(random_action):
            self.random_action = random_action

    # -- opponents ------------------------------------------------------------------------

    def _opponent_actions_sync(self) -> dict[str, str]:
        acts: dict[str, str] = {}
        for a in self.env.current_agents:
            if a == self.agent:
                continue
            policy = self.opponents[a]
            if isinstance(policy, SyncPolicy):
                acts[a] = policy.choose(self._obs.get(a, ""))
            else:
                acts[a] = _run_blocking(policy.act(self._obs.get(a, "")))
        return acts

    async def _opponent_actions(self) -> dict[str, str]:
        acts: dict[str, str] = {}
        for a in self.env.current_agents:
            if a != self.agent:
                acts[a] = await self.opponents[a].act(self._obs.get(a, ""))
        return acts

    def _start(self, seed: int | None) -> int:
        """Reseed this env and the opponents; return the seed for the wrapped game's reset."""
        if seed is not None:
            super().reset(seed=seed)
        for policy in dict.fromkeys(self.opponents.values()):
            policy.reset()
            _reseed(policy, self.np_random)
        return int(self.np_random.integers(2**31))

    def _opened(self, obs: dict[str, str], infos: dict[str, Any]) -> dict[str, Any]:
        """Take the game's first views; return the tally for the opponents' opening moves."""
        self._obs = dict(obs)
        info = infos.get(self.agent, {})
        return {"reward": 0.0, "terminated": False, "truncated": False, "info": info}

    def _merge(self, out: MultiStepResult, acc: dict[str, Any]) -> bool:
        obs, rewards, terminated, truncated, infos = out
        self._obs.update(obs)
        acc["reward"] += float(rewards.get(self.agent, 0.0))
        acc["terminated"] = bool(terminated.get(self.agent, False))
        acc["truncated"] = bool(truncated.get(self.agent, False))
        acc["info"] = dict(infos.get(self.agent, {}))
        return acc["terminated"] or acc["truncated"] or not self.env.agents

    def _result(self, acc: dict[str, Any], moves: list[dict[str, str]]) -> StepResult:
        info = {**acc["info"], "opponent_actions": moves}
        return (
            self._obs.get(self.agent, ""),
            acc["reward"],
            acc["terminated"],
            acc["truncated"],
            info,
        )

    # -- Env ------------------------------------------------------------------------------

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> ResetResult:
        """Reset the game, let opponents play until the learner is on turn; return its view."""
        acc = self._opened(*self.env.reset(seed=self._start(seed), options=options))
        moves = self._play_opponents_sync(acc)
        return self._obs.get(self.agent, ""), {**acc["info"], "opponent_actions": moves}

    def step(self, action: str) -> StepResult:
        """Play the learner's action, then the opponents' until it is the learner's turn."""
        acc = {"reward": 0.0, "terminated": False, "truncated": False, "info": {}}
        moves: list[dict[str, str]] = []
        actions = {self.agent: action, **self._opponent_actions_sync()}
        if len(actions) > 1:
            moves.append({a: m for a, m in actions.items() if a != self.agent})
        if not self._merge(self.env.step(actions), acc):
            moves += self._play_opponents_sync(acc)
        return self._result(acc, moves)

    def _play_opponents_sync(self, acc: dict[str, Any]) -> list[dict[str, str]]:
        moves: list[dict[str, str]] = []
        while self.env.agents and self.agent not in self.env.current_agents:
            self._check_budget(moves)
            acts = self._opponent_actions_sync()
            moves.append(acts)
            if self._merge(self.env.step(acts), acc):
                break
        return moves

    async def areset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> ResetResult:
        """Async twin of `reset` (awaits async opponents, e.g. an `LLMPolicy`)."""
        acc = self._opened(*(await self.env.areset(seed=self._start(seed), options=options)))
        moves = await self._play_opponents(acc)
        return self._obs.get(self.agent, ""), {**acc["info"], "opponent_actions": moves}

    async def astep(self, action: str) -> StepResult:
        """Async twin of `step`."""
        acc = {"reward": 0.0, "terminated": False, "truncated": False, "info": {}}
        moves: list[dict[str, str]] = []
        actions = {self.agent: action, **(await self._opponent_actions())}
        if len(actions) > 1:
            moves.append({a: m for a, m in actions.items() if a != self.agent})
        if not self._merge(await self.env.astep(actions), acc):
            moves += await self._play_opponents(acc)
        return self._result(acc, moves)

    async def _play_opponents(self, acc: dict[str, Any]) -> list[dict[str, str]]:
        moves: list[dict[str, str]] = []
        while self.env.agents and self.agent not in self.env.current_agents:
            self._check_budget(moves)
            acts = await self._opponent_actions()
            moves.append(acts)
            if self._merge(await self.env.astep(acts), acc):
                break
        return moves

    def _check_budget(self, moves: list[Any]) -> None:
        if len(moves) >= self.max_opponent_moves:
            raise MultiAgentError(
                f"opponents made {len(moves)} moves without handing the turn back; the env "
                "should truncate the episode (check its turn limit)"
            )

    def runs_sync(self, method: str | None = None) -> bool:
        """True when the env and every opponent run without awaiting I/O."""
        env_sync = type(self.env).astep is MultiAgentEnv.astep
        return env_sync and all(isinstance(p, SyncPolicy) for p in self.opponents.values())

    def render(self) -> str | None:
        """The wrapped env's picture."""
        return self.env.render()

    def close(self) -> None:
        """Close the wrapped env."""
        self.env.close()

    def __repr__(self) -> str:
        return f"<OpponentEnv {self.agent!r} in {self.env!r}>"


def _run_blocking(coro: Any) -> Any:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    coro.close()
    raise MultiAgentError(
        "an async opponent (e.g. an LLMPolicy) cannot act inside step() in a running event "
        "loop; use `await env.astep(...)` there"
    )
