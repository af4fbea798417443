"""Multi-agent envs (`multiagent:` family) and their single-agent views against fixed policies.

`multiagent:TicTacToe-v0` is a `gemkit.multiagent.MultiAgentEnv` (dicts keyed by agent id);
`multiagent:TicTacToe-v0-vs_minimax` is a plain `gemkit.Env` for one seat, the other played
by the scripted policy. Modules are named here and load when an id is first made.
"""

from __future__ import annotations

from gemkit.registry import register

_M = "gemkit.envs.multiagent"

#: name -> (class path, description, tags, {opponent: (expert for the learner seat)})
GAMES = {
    "TicTacToe": (
        f"{_M}.tictactoe:TicTacToe",
        "Two players mark a 3x3 grid in turn; three in a row wins.",
        ("turn-based", "two-player", "perfect-information"),
        {
            "random": f"{_M}.tictactoe:TicTacToeMinimax",
            "minimax": f"{_M}.tictactoe:TicTacToeMinimax",
        },
    ),
    "KuhnPoker": (
        f"{_M}.kuhn_poker:KuhnPoker",
        "Three-card one-round poker: check, bet, call or fold with a hidden card.",
        ("turn-based", "two-player", "imperfect-information"),
        {"nash": f"{_M}.kuhn_poker:KuhnPokerNash"},
    ),
    "RockPaperScissors": (
        f"{_M}.rock_paper_scissors:RockPaperScissors",
        "Both players pick rock, paper or scissors at once, for a few rounds.",
        ("simultaneous", "two-player"),
        {"nash": f"{_M}.rock_paper_scissors:RockPaperScissorsNash"},
    ),
    "CustomerService": (
        f"{_M}.customer_service:CustomerService",
        "A simulated customer with a hidden goal; an assistant with shop-database tools.",
        ("turn-based", "tools", "user-simulation"),
        {"user": f"{_M}.customer_service:ScriptedAssistant"},
    ),
}

for _name, (_entry, _desc, _tags, _opponents) in GAMES.items():
    register(f"multiagent:{_name}-v0", _entry, description=_desc, tags=("multiagent", *_tags))
    for _opponent, _expert in _opponents.items():
        register(
            f"multiagent:{_name}-v0-vs_{_opponent}",
            f"{_M}.selfplay:make_vs",
            kwargs={"game": _name, "opponent": _opponent},
            description=f"{_desc} Single-agent view against the scripted {_opponent} policy.",
            tags=("multiagent", "single-agent", *_tags),
            expert=_expert,
        )
