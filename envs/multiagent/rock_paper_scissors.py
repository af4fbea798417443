"""Rock-paper-scissors: simultaneous play over a few rounds, and its uniform Nash player."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from gemkit.answers import extract_boxed
from gemkit.multiagent import MultiAgentEnv, MultiResetResult, MultiStepResult
from gemkit.policy import SyncPolicy

MOVES = ("rock", "paper", "scissors")
BEATS = {"rock": "scissors", "paper": "rock", "scissors": "paper"}


class RockPaperScissors(MultiAgentEnv):
    """Both players move at once each round (`\\boxed{rock|paper|scissors}`); +1/-1 per round.

    A round is played when both players send a move; an invalid move forfeits the round
    (the other player wins it unless its move was invalid too). The game lasts `rounds`
    rounds.
    """

    possible_agents = ["player_0", "player_1"]

    def __init__(self, rounds: int = 3):
        super().__init__()
        if rounds < 1:
            raise ValueError(f"rounds must be >= 1, got {rounds}")
        self.rounds = rounds
        self.round = 0
        self.score = {a: 0 for a in self.possible_agents}
        self._obs: dict[str, str] = {}

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> MultiResetResult:
        """Start round 1; both players are on turn."""
        super().reset(seed=seed)
        self.round = 0
        self.score = {a: 0 for a in self.possible_agents}
        intro = (
            f"Rock-paper-scissors, {self.rounds} rounds, both players move at once. Rock beats "
            "scissors, scissors beat paper, paper beats rock. Answer \\boxed{rock}, "
            "\\boxed{paper} or \\boxed{scissors}."
        )
        self._obs = {a: f"{intro}\n\nRound 1: your move." for a in self.possible_agents}
        return dict(self._obs), self.per_agent({})

    def step(self, actions: Mapping[str, Any]) -> MultiStepResult:
        """Play one round when both players sent a move; otherwise say who is missing."""
        valid, problems = self.split_actions(actions)
        rewards = self.per_agent(0.0)
        infos: dict[str, dict[str, Any]] = self.per_agent({})
        over = not self.agents
        terminated = self.per_agent(over)
        if over or len(valid) < len(self.possible_agents):
            for a, note in problems.items():
                self._obs[a] = note
            return dict(self._obs), rewards, terminated, self.per_agent(False), infos
        p0, p1 = self.possible_agents
        moves: dict[str, str | None] = {}
        for a in (p0, p1):
            action = valid[a]
            move = extract_boxed(action) if isinstance(action, str) else None
            moves[a] = move.lower() if move and move.lower() in MOVES else None
            if moves[a] is None:
                infos[a]["invalid"] = True
        m0, m1 = moves[p0], moves[p1]
        if m0 == m1 or (m0 is None and m1 is None):
            result = 0
        elif m1 is None or (m0 is not None and BEATS[m0] == m1):
            result = 1
        else:
            result = -1
        rewards = {p0: float(result), p1: float(-result)}
        self.score[p0] += result
        self.score[p1] -= result
        self.round += 1
        said = {a: m or "an invalid move" for a, m in moves.items()}
        line = f"Round {self.round}: player_0 played {said[p0]}, player_1 played {said[p1]}."
        if self.round >= self.rounds:
            terminated = self.per_agent(True)
            self.agents = []
            for a in (p0, p1):
                infos[a]["success"] = self.score[a] > 0
            tail = f"Game over. Score: player_0 {self.score[p0]}, player_1 {self.score[p1]}."
        else:
            tail = f"Round {self.round + 1}: your move."
        hint = " A move must be \\boxed{rock}, \\boxed{paper} or \\boxed{scissors}."
        for a in (p0, p1):
            self._obs[a] = f"{line}{hint if moves[a] is None else ''} {tail}"
        return dict(self._obs), rewards, terminated, self.per_agent(False), infos

    def random_action(self, rng: np.random.Generator) -> str:
        """A uniformly random move."""
        return f"\\boxed{{{MOVES[int(rng.integers(3))]}}}"

    def render(self) -> str:
        """Round and score."""
        return f"round {self.round}/{self.rounds}, score {self.score}"


class RockPaperScissorsNash(SyncPolicy):
    """Plays each move with probability 1/3 from its own `rng` (the game's equilibrium)."""

    def __init__(self, seed: int | None = None, **_: object):
        self.rng = np.random.default_rng(seed)

    def choose(self, observation: str) -> str:
        """A uniformly random move."""
        return f"\\boxed{{{MOVES[int(self.rng.integers(3))]}}}"
