"""Single-agent views of the multi-agent envs: one seat for the learner, policies in the rest."""

from __future__ import annotations

from typing import Any

from gemkit.multiagent import OpponentEnv

#: game -> (env class path, {opponent name: policy class path}, default learner seat)
GAMES: dict[str, tuple[str, dict[str, str], str]] = {
    "TicTacToe": (
        "gemkit.envs.multiagent.tictactoe:TicTacToe",
        {
            "random": "gemkit.envs.multiagent.tictactoe:TicTacToeRandom",
            "minimax": "gemkit.envs.multiagent.tictactoe:TicTacToeMinimax",
        },
        "x",
    ),
    "KuhnPoker": (
        "gemkit.envs.multiagent.kuhn_poker:KuhnPoker",
        {"nash": "gemkit.envs.multiagent.kuhn_poker:KuhnPokerNash"},
        "player_0",
    ),
    "RockPaperScissors": (
        "gemkit.envs.multiagent.rock_paper_scissors:RockPaperScissors",
        {"nash": "gemkit.envs.multiagent.rock_paper_scissors:RockPaperScissorsNash"},
        "player_0",
    ),
    "CustomerService": (
        "gemkit.envs.multiagent.customer_service:CustomerService",
        {"user": "gemkit.envs.multiagent.customer_service:ScriptedUser"},
        "assistant",
    ),
}


def _load(path: str) -> Any:
    from gemkit.registry import _resolve

    return _resolve(path)


def make_vs(
    game: str, opponent: str, agent: str | None = None, seed: int | None = None, **env_kwargs: Any
) -> OpponentEnv:
    """`game` with the learner in seat `agent` and the named scripted `opponent` elsewhere."""
    if game not in GAMES:
        raise ValueError(f"unknown game {game!r}; expected one of {sorted(GAMES)}")
    env_path, opponents, default_seat = GAMES[game]
    if opponent not in opponents:
        raise ValueError(f"{game} has no opponent {opponent!r}; choose one of {sorted(opponents)}")
    env = _load(env_path)(**env_kwargs)
    return OpponentEnv(env, _load(opponents[opponent])(seed=seed), agent or default_seat)
