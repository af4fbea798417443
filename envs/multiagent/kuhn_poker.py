"""Kuhn poker: a three-card, one-round poker game of imperfect information, and its Nash play."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from gemkit.answers import extract_boxed
from gemkit.multiagent import MultiAgentEnv, MultiResetResult, MultiStepResult, staller
from gemkit.policy import SyncPolicy

CARDS = ("J", "Q", "K")
RANK = {c: i for i, c in enumerate(CARDS)}
PLAYERS = ("player_0", "player_1")
#: betting sequences that end the hand
TERMINAL = {
    ("check", "check"),
    ("bet", "call"),
    ("bet", "fold"),
    ("check", "bet", "call"),
    ("check", "bet", "fold"),
}
SEAT_RE = re.compile(r"You are (player_[01]) and hold the ([JQK])\b")
BETTING_RE = re.compile(r"^Betting: (.*)$", re.MULTILINE)


def legal_actions(history: tuple[str, ...]) -> tuple[str, ...]:
    """The moves allowed after `history`: check/bet before any bet, call/fold facing one."""
    if history in TERMINAL:
        return ()
    return ("call", "fold") if history and history[-1] == "bet" else ("check", "bet")


def stake(history: tuple[str, ...], seat: int) -> int:
    """The chips seat `seat` has put in after `history`: the ante, plus 1 per bet or call."""
    return 1 + sum(a in ("bet", "call") for a in history[seat::2])


def payoff(history: tuple[str, ...], cards: tuple[str, str]) -> int:
    """Chips player_0 wins (player_1 wins the negative) at the end of `history`."""
    if history[-1] == "fold":
        folder = (len(history) - 1) % 2
        return 1 if folder == 1 else -1
    stake = 2 if "bet" in history else 1
    return stake if RANK[cards[0]] > RANK[cards[1]] else -stake


class KuhnPoker(MultiAgentEnv):
    """Each player antes 1 chip and gets one of J < Q < K; player_0 acts first.

    Moves are `\\boxed{check}` / `\\boxed{bet}` (1 chip) before any bet, `\\boxed{call}` /
    `\\boxed{fold}` facing one. The hand ends at a fold or a showdown; the reward is the chips
    won or lost (zero-sum). Each player sees only its own card until the showdown. Invalid
    moves cost `invalid_penalty`. After `max_turns` moves the hand ends: the player that made
    more invalid moves forfeits the chips it put in (as a fold would), so stalling a losing
    hand never pays; with equal counts the hand is void (truncated, no chips move).
    `reset(options={"cards": ("K", "J")})` deals fixed cards.
    """

    possible_agents = list(PLAYERS)

    def __init__(self, max_turns: int = 10, invalid_penalty: float = 0.1):
        super().__init__()
        self.max_turns = max_turns
        self.invalid_penalty = invalid_penalty
        self.cards: tuple[str, str] = ("J", "Q")
        self.history: tuple[str, ...] = ()
        self.moves = 0
        self.invalid = dict.fromkeys(PLAYERS, 0)
        self._obs: dict[str, str] = {}

    @property
    def current_agents(self) -> list[str]:
        """The player to act, or nobody once the hand is over."""
        return [PLAYERS[len(self.history) % 2]] if self.agents else []

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> MultiResetResult:
        """Deal one card to each player (from `np_random`, or `options["cards"]`)."""
        super().reset(seed=seed)
        cards = (options or {}).get("cards")
        if cards is not None:
            if len(cards) != 2 or any(c not in CARDS for c in cards) or cards[0] == cards[1]:
                raise ValueError(
                    f"options['cards'] must be two different cards of {CARDS}, got {cards}"
                )
            self.cards = (str(cards[0]), str(cards[1]))
        else:
            deal = self.np_random.permutation(3)
            self.cards = (CARDS[deal[0]], CARDS[deal[1]])
        self.history = ()
        self.moves = 0
        self.invalid = dict.fromkeys(PLAYERS, 0)
        intro = (
            "Kuhn poker: a deck of J < Q < K; each player antes 1 chip and holds one card. "
            "player_0 acts first. Before any bet you may \\boxed{check} or \\boxed{bet} (1 chip); "
            "facing a bet you may \\boxed{call} or \\boxed{fold}. Highest card wins at showdown."
        )
        self._obs = {a: f"{intro}\n\n{self._view(a)}" for a in PLAYERS}
        return dict(self._obs), self.per_agent({})

    def _view(self, agent: str, note: str = "") -> str:
        seat = PLAYERS.index(agent)
        betting = ", ".join(f"{PLAYERS[i % 2]} {a}s" for i, a in enumerate(self.history)) or "none"
        lines = [note] if note else []
        lines += [f"You are {agent} and hold the {self.cards[seat]}.", f"Betting: {betting}"]
        if self.agents:
            if agent in self.current_agents:
                moves = " or ".join(f"\\boxed{{{m}}}" for m in legal_actions(self.history))
                lines.append(f"Your move: {moves}.")
            else:
                lines.append(f"Waiting for {self.current_agents[0]}.")
        return "\n".join(lines)

    def step(self, actions: Mapping[str, Any]) -> MultiStepResult:
        """Apply the move of the player to act; others' actions are ignored with a note."""
        valid, problems = self.split_actions(actions)
        rewards = self.per_agent(0.0)
        infos: dict[str, dict[str, Any]] = self.per_agent({})
        notes = dict(problems)
        over = not self.agents
        terminated, truncated = self.per_agent(over), self.per_agent(False)
        if not over and self.current_agents[0] in valid:
            mover = self.current_agents[0]
            self.moves += 1
            action = valid[mover]
            move = extract_boxed(action) if isinstance(action, str) else None
            legal = legal_actions(self.history)
            if move is None or move.lower() not in legal:
                rewards[mover] = -self.invalid_penalty
                infos[mover]["invalid"] = True
                self.invalid[mover] += 1
                got = "no move found" if move is None else f"{move[:20]!r} is not allowed now"
                options = " or ".join(f"\\boxed{{{m}}}" for m in legal)
                notes[mover] = f"Invalid move: {got}; answer {options}."
            else:
                self.history += (move.lower(),)
                for a in PLAYERS:
                    notes.setdefault(a, f"{mover} {move.lower()}s.")
                if self.history in TERMINAL:
                    won = payoff(self.history, self.cards)
                    rewards = {"player_0": float(won), "player_1": float(-won)}
                    terminated = self.per_agent(True)
                    self.agents = []
                    if self.history[-1] == "fold":
                        end = f"{mover} folds; {PLAYERS[1 - PLAYERS.index(mover)]} wins the pot."
                    else:
                        end = (
                            f"Showdown: player_0 holds the {self.cards[0]}, player_1 the "
                            f"{self.cards[1]}. {PLAYERS[0 if won > 0 else 1]} wins {abs(won)} "
                            f"chip{'s' if abs(won) > 1 else ''}."
                        )
                    for a in PLAYERS:
                        notes[a] = end
                        infos[a].update(success=rewards[a] > 0, chips=rewards[a], cards=self.cards)
            if self.agents and self.moves >= self.max_turns:
                self.agents = []
                loser = staller(self.invalid)
                if loser is None:
                    truncated = self.per_agent(True)
                    end = "Out of turns: the hand is void."
                else:
                    terminated = self.per_agent(True)
                    chips = stake(self.history, PLAYERS.index(loser))
                    winner = PLAYERS[1 - PLAYERS.index(loser)]
                    rewards[loser] -= chips
                    rewards[winner] += chips
                    end = f"Out of turns: {loser} made more invalid moves and forfeits {chips}."
                for a in PLAYERS:
                    infos[a]["success"] = loser is not None and a != loser
                    notes[a] = f"{notes.get(a, '')} {end}".strip()
        for a in PLAYERS:
            if over:
                self._obs[a] = notes.get(a, self._obs[a])
            else:
                self._obs[a] = self._view(a, notes.get(a, ""))
        return dict(self._obs), rewards, terminated, truncated, infos

    def random_action(self, rng: np.random.Generator) -> str:
        """A well-formed move (legal only half the time: the sampler sees no betting)."""
        return f"\\boxed{{{('check', 'bet', 'call', 'fold')[int(rng.integers(4))]}}}"

    def render(self) -> str:
        """Both cards and the betting."""
        return f"cards {self.cards}, betting {list(self.history)}"


def nash_strategy(
    seat: int, card: str, history: tuple[str, ...], alpha: float = 1 / 6
) -> dict[str, float]:
    """A Nash equilibrium of Kuhn poker: the probability of each legal move.

    Player 0 bluffs a J with probability `alpha` (0 <= alpha <= 1/3), bets a K with 3*alpha
    and calls a bet holding a Q with alpha + 1/3; player 1 bets a K, bluffs a J one time in
    three and calls with a Q one time in three. Player 0's expected value is -1/18.
    """
    if not 0 <= alpha <= 1 / 3:
        raise ValueError(f"alpha must be in [0, 1/3], got {alpha}")
    facing_bet = bool(history) and history[-1] == "bet"
    if seat == 0 and not facing_bet:
        p_bet = {"J": alpha, "Q": 0.0, "K": 3 * alpha}[card]
        return {"check": 1 - p_bet, "bet": p_bet}
    if facing_bet:
        third = alpha + 1 / 3 if seat == 0 else 1 / 3
        p_call = {"J": 0.0, "Q": third, "K": 1.0}[card]
        return {"call": p_call, "fold": 1 - p_call}
    p_bet = {"J": 1 / 3, "Q": 0.0, "K": 1.0}[card]
    return {"check": 1 - p_bet, "bet": p_bet}


def parse_history(text: str) -> tuple[str, ...]:
    """The betting sequence from the last `Betting:` line of an observation."""
    lines = BETTING_RE.findall(text)
    if not lines or lines[-1].strip() == "none":
        return ()
    return tuple(part.strip().split()[-1].removesuffix("s") for part in lines[-1].split(","))


class KuhnPokerNash(SyncPolicy):
    """Plays `nash_strategy`, sampling with its own `rng`."""

    def __init__(self, alpha: float = 1 / 6, seed: int | None = None, **_: object):
        self.alpha = alpha
        self.rng = np.random.default_rng(seed)

    def choose(self, observation: str) -> str:
        """Sample a move for the seat, card and betting shown in the observation."""
        seats = SEAT_RE.findall(observation)
        if not seats:
            return "\\boxed{check}"
        agent, card = seats[-1]
        probs = nash_strategy(PLAYERS.index(agent), card, parse_history(observation), self.alpha)
        moves = list(probs)
        pick = moves[0] if self.rng.random() < probs[moves[0]] else moves[1]
        return f"\\boxed{{{pick}}}"
