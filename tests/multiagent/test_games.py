"""Tic-tac-toe, Kuhn poker and rock-paper-scissors played by their scripted policies."""

from __future__ import annotations

import itertools
from fractions import Fraction

import pytest

import gemkit
from gemkit.envs.multiagent.kuhn_poker import (
    CARDS,
    KuhnPokerNash,
    legal_actions,
    nash_strategy,
    parse_history,
)
from gemkit.envs.multiagent.rock_paper_scissors import RockPaperScissorsNash
from gemkit.envs.multiagent.tictactoe import TicTacToeMinimax, TicTacToeRandom, parse_board


def play(env, policies, seed):
    obs, _ = env.reset(seed=seed)
    totals = dict.fromkeys(env.possible_agents, 0.0)
    infos = {}
    while env.agents:
        actions = {a: policies[a].choose(obs[a]) for a in env.current_agents}
        obs, rewards, terminated, truncated, infos = env.step(actions)
        for a, r in rewards.items():
            totals[a] += r
    return totals, infos, obs


# -- tic-tac-toe -----------------------------------------------------------------------------


def test_minimax_against_minimax_always_draws():
    env = gemkit.make("multiagent:TicTacToe-v0")
    for seed in range(10):
        policies = {"x": TicTacToeMinimax(seed=seed), "o": TicTacToeMinimax(seed=seed + 100)}
        totals, infos, obs = play(env, policies, seed)
        assert totals == {"x": 0.0, "o": 0.0} and infos["x"]["winner"] is None
        assert "Draw" in obs["x"]


def test_three_in_a_row_wins_plus_one_and_the_loser_gets_minus_one():
    env = gemkit.make("multiagent:TicTacToe-v0")
    env.reset(seed=0)
    for x, o in [(1, 4), (2, 5)]:
        env.step({"x": f"\\boxed{{{x}}}"})
        env.step({"o": f"\\boxed{{{o}}}"})
    obs, rewards, terminated, truncated, infos = env.step({"x": "\\boxed{3}"})
    assert rewards == {"x": 1.0, "o": -1.0} and all(terminated.values())
    assert infos["x"]["success"] and not infos["o"]["success"] and "X wins" in obs["o"]


@pytest.mark.parametrize(
    ("action", "message"),
    [
        ("five", "no move found"),
        ("\\boxed{10}", "not a cell number"),
        ("\\boxed{a1}", "not a cell"),
    ],
)
def test_invalid_tictactoe_moves_are_explained_and_keep_the_turn(action, message):
    env = gemkit.make("multiagent:TicTacToe-v0")
    env.reset(seed=0)
    obs, rewards, *_, infos = env.step({"x": action})
    assert message in obs["x"] and rewards["x"] == pytest.approx(-0.1) and infos["x"]["invalid"]
    assert env.agent_selection == "x"


def test_a_taken_cell_names_the_free_ones():
    env = gemkit.make("multiagent:TicTacToe-v0")
    env.reset(seed=0)
    env.step({"x": "\\boxed{5}"})
    obs, *_ = env.step({"o": "\\boxed{5}"})
    assert "cell 5 is taken by X; free cells: 1, 2, 3, 4, 6, 7, 8, 9" in obs["o"]


def test_endless_invalid_moves_end_the_game_at_the_turn_limit_as_a_forfeit():
    env = gemkit.make("multiagent:TicTacToe-v0", max_turns=9)
    env.reset(seed=0)
    for _ in range(9):
        obs, rewards, terminated, truncated, infos = env.step({"x": "pass"})
    assert all(terminated.values()) and not any(truncated.values()) and env.agents == []
    assert rewards == {"x": pytest.approx(-1.1), "o": 1.0}
    assert infos["o"]["success"] and infos["x"]["winner"] == "O"
    assert "Out of turns: X made more invalid moves and forfeits." in obs["x"]


def test_the_board_in_an_observation_parses_back():
    env = gemkit.make("multiagent:TicTacToe-v0")
    obs, _ = env.reset(seed=0)
    env.step({"x": "\\boxed{1}"})
    obs, *_ = env.step({"o": "\\boxed{9}"})
    assert parse_board(obs["x"]) == ("X", "", "", "", "", "", "", "", "O")


def test_random_policy_only_picks_free_cells():
    env = gemkit.make("multiagent:TicTacToe-v0")
    for seed in range(5):
        totals, infos, _ = play(
            env, {"x": TicTacToeRandom(seed), "o": TicTacToeRandom(seed + 1)}, seed
        )
        assert not infos["x"].get("invalid") and sorted(totals.values()) in (
            [-1.0, 1.0],
            [0.0, 0.0],
        )


# -- Kuhn poker ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cards", "moves", "chips0"),
    [
        (("K", "J"), ["bet", "fold"], 1),
        (("K", "J"), ["bet", "call"], 2),
        (("J", "Q"), ["check", "check"], -1),
        (("Q", "K"), ["check", "bet", "fold"], -1),
        (("Q", "J"), ["check", "bet", "call"], 2),
    ],
)
def test_kuhn_poker_pays_the_pot_to_the_right_player(cards, moves, chips0):
    env = gemkit.make("multiagent:KuhnPoker-v0")
    env.reset(seed=0, options={"cards": cards})
    for move in moves:
        obs, rewards, terminated, truncated, infos = env.step(
            {env.agent_selection: f"\\boxed{{{move}}}"}
        )
    assert rewards == {"player_0": float(chips0), "player_1": float(-chips0)}
    assert all(terminated.values()) and infos["player_0"]["success"] == (chips0 > 0)


def test_each_player_sees_only_its_own_card_until_showdown():
    env = gemkit.make("multiagent:KuhnPoker-v0")
    obs, _ = env.reset(seed=0, options={"cards": ("K", "J")})
    assert "hold the K" in obs["player_0"] and "the J" not in obs["player_0"]
    assert "hold the J" in obs["player_1"] and "the K" not in obs["player_1"]
    env.step({"player_0": "\\boxed{check}"})
    obs, *_ = env.step({"player_1": "\\boxed{check}"})
    assert "player_0 holds the K, player_1 the J" in obs["player_1"]


def test_kuhn_poker_refuses_a_move_not_allowed_now():
    env = gemkit.make("multiagent:KuhnPoker-v0")
    env.reset(seed=0)
    obs, rewards, *_ = env.step({"player_0": "\\boxed{call}"})
    assert (
        "'call' is not allowed now" in obs["player_0"]
        and "\\boxed{check} or \\boxed{bet}" in obs["player_0"]
    )
    assert env.agent_selection == "player_0" and rewards["player_0"] == pytest.approx(-0.1)
    assert parse_history(obs["player_0"]) == ()


def _value_for_player_0(alpha: float) -> Fraction:
    # exact expected chips for player_0 when both play the Nash strategy, by walking the tree
    env = gemkit.make("multiagent:KuhnPoker-v0")
    total = Fraction(0)
    deals = list(itertools.permutations(CARDS, 2))
    for cards in deals:
        env.reset(seed=0, options={"cards": cards})
        stack = [(env, Fraction(1, len(deals)))]
        while stack:
            node, p = stack.pop()
            seat = len(node.history) % 2
            probs = nash_strategy(seat, node.cards[seat], node.history, alpha)
            for move in legal_actions(node.history):
                if probs[move] == 0:
                    continue
                child = node.clone()
                _, rewards, *_ = child.step({child.agent_selection: f"\\boxed{{{move}}}"})
                q = p * Fraction(probs[move]).limit_denominator(1000)
                if child.agents:
                    stack.append((child, q))
                else:
                    total += q * Fraction(rewards["player_0"]).limit_denominator(10)
    return total


@pytest.mark.parametrize("alpha", [0.0, 1 / 6, 1 / 3])
def test_the_nash_strategy_is_worth_minus_one_eighteenth_to_player_0(alpha):
    assert _value_for_player_0(alpha) == Fraction(-1, 18)


def test_nash_policy_never_folds_a_king_nor_calls_with_a_jack():
    env = gemkit.make("multiagent:KuhnPoker-v0")
    policy = KuhnPokerNash(seed=0)
    for _ in range(30):
        env.reset(seed=1, options={"cards": ("Q", "K")})
        obs, *_ = env.step({"player_0": "\\boxed{bet}"})
        assert policy.choose(obs["player_1"]) == "\\boxed{call}"
        env.reset(seed=1, options={"cards": ("Q", "J")})
        obs, *_ = env.step({"player_0": "\\boxed{bet}"})
        assert policy.choose(obs["player_1"]) == "\\boxed{fold}"


# -- rock-paper-scissors ---------------------------------------------------------------------


def test_both_players_move_at_once_and_paper_beats_rock():
    env = gemkit.make("multiagent:RockPaperScissors-v0")
    env.reset(seed=0)
    assert env.current_agents == ["player_0", "player_1"] and env.agent_selection is None
    obs, rewards, *_ = env.step({"player_0": "\\boxed{rock}", "player_1": "\\boxed{paper}"})
    assert rewards == {"player_0": -1.0, "player_1": 1.0} and "Round 2" in obs["player_0"]


def test_a_round_waits_for_both_moves_and_an_invalid_move_forfeits():
    env = gemkit.make("multiagent:RockPaperScissors-v0")
    env.reset(seed=0)
    obs, rewards, *_ = env.step({"player_0": "\\boxed{rock}"})
    assert "sent no action" in obs["player_1"] and env.round == 0
    obs, rewards, *_, infos = env.step({"player_0": "\\boxed{lizard}", "player_1": "\\boxed{rock}"})
    assert rewards["player_1"] == 1.0 and infos["player_0"]["invalid"]
    assert "\\boxed{rock}, \\boxed{paper} or \\boxed{scissors}" in obs["player_0"]


def test_nash_players_finish_a_zero_sum_game():
    env = gemkit.make("multiagent:RockPaperScissors-v0", rounds=5)
    totals, infos, obs = play(
        env, {"player_0": RockPaperScissorsNash(1), "player_1": RockPaperScissorsNash(2)}, 0
    )
    assert totals["player_0"] == -totals["player_1"] and "Game over" in obs["player_0"]
