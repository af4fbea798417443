"""The multi-agent contract and the single-agent `OpponentEnv` wrapper, on every built-in env."""

from __future__ import annotations

import asyncio

import pytest
from gymnasium.utils.env_checker import check_env

import gemkit
from gemkit.envs.multiagent.tictactoe import TicTacToeMinimax, TicTacToeRandom
from gemkit.multiagent import MultiAgentEnv, MultiAgentError, OpponentEnv
from gemkit.policy import ScriptedPolicy

MULTI_IDS = [
    "multiagent:TicTacToe-v0",
    "multiagent:KuhnPoker-v0",
    "multiagent:RockPaperScissors-v0",
    "multiagent:CustomerService-v0",
]
SINGLE_IDS = [s.id for s in gemkit.list_envs("multiagent") if "single-agent" in s.tags]


@pytest.mark.parametrize("env_id", MULTI_IDS)
def test_results_are_dicts_over_every_possible_agent(env_id):
    env = gemkit.make(env_id)
    assert isinstance(env, MultiAgentEnv)
    obs, infos = env.reset(seed=0)
    agents = env.possible_agents
    assert set(obs) == set(infos) == set(agents) and env.agents == agents
    current = env.current_agents
    out = env.step({a: "gibberish" for a in current})
    for part in out:
        assert set(part) == set(agents)
    assert all(isinstance(o, str) and o for o in out[0].values())


@pytest.mark.parametrize("env_id", MULTI_IDS)
def test_same_seed_same_episode(env_id):
    def run(seed):
        env = gemkit.make(env_id)
        trace = [env.reset(seed=seed)[0]]
        for k in range(4):
            if not env.agents:
                break
            trace.append(env.step({a: f"\\boxed{{{k + 1}}}" for a in env.current_agents})[0])
        return trace

    assert run(7) == run(7)


@pytest.mark.parametrize("env_id", MULTI_IDS)
def test_unknown_agent_or_non_dict_action_raises_a_clear_error(env_id):
    env = gemkit.make(env_id)
    env.reset(seed=0)
    with pytest.raises(MultiAgentError, match="unknown agent ids"):
        env.step({"nobody": "hi"})
    with pytest.raises(MultiAgentError, match="dict"):
        env.step("\\boxed{1}")


def test_actions_out_of_turn_are_ignored_with_a_note():
    env = gemkit.make("multiagent:TicTacToe-v0")
    env.reset(seed=0)
    assert env.agent_selection == "x"
    obs, rewards, *_ = env.step({"o": "\\boxed{5}"})
    assert "not your turn" in obs["o"] and "You are on turn" in obs["x"]
    assert env.agent_selection == "x" and "5" in env.render()


def test_stepping_after_the_end_says_to_reset():
    env = gemkit.make("multiagent:RockPaperScissors-v0", rounds=1)
    env.reset(seed=0)
    env.step({"player_0": "\\boxed{rock}", "player_1": "\\boxed{paper}"})
    assert env.agents == [] and env.current_agents == []
    obs, rewards, terminated, *_ = env.step({"player_0": "\\boxed{rock}"})
    assert "call reset()" in obs["player_0"] and all(terminated.values())
    assert rewards == {"player_0": 0.0, "player_1": 0.0}


VALID = {
    "multiagent:TicTacToe-v0": ["\\boxed{1}", "\\boxed{2}"],
    "multiagent:KuhnPoker-v0": ["\\boxed{check}", "\\boxed{bet}"],
    "multiagent:RockPaperScissors-v0": ["\\boxed{rock}", "\\boxed{paper}"],
    "multiagent:CustomerService-v0": ["Hello, I need help.", "I want a refund."],
}


@pytest.mark.parametrize("env_id", MULTI_IDS)
def test_clone_continues_the_same_episode_independently(env_id):
    env = gemkit.make(env_id)
    env.reset(seed=3)
    twin = env.clone()
    first, second = VALID[env_id]
    assert env.step({a: first for a in env.current_agents}) == twin.step(
        {a: first for a in twin.current_agents}
    )
    before = twin.render()
    env.step({a: second for a in env.current_agents})
    assert twin.render() == before != env.render()


@pytest.mark.parametrize("env_id", SINGLE_IDS)
def test_single_agent_views_pass_the_gymnasium_env_checker(env_id):
    env = gemkit.make(env_id)
    check_env(env, skip_render_check=True)
    obs, info = env.reset(seed=1)
    assert isinstance(obs, str) and "opponent_actions" in info


def test_minimax_opponent_never_loses_to_random():
    for seed in range(25):
        for seat in ("x", "o"):
            game = gemkit.make("multiagent:TicTacToe-v0")
            env = OpponentEnv(game, TicTacToeMinimax(), agent=seat)
            learner = TicTacToeRandom(seed=seed)
            obs, _ = env.reset(seed=seed)
            total, done = 0.0, False
            while not done:
                obs, reward, terminated, truncated, _ = env.step(learner.choose(obs))
                total += reward
                done = terminated or truncated
            assert total in (0.0, -1.0), f"random as {seat} beat minimax (seed {seed})"


def test_opponent_moves_first_when_the_learner_takes_the_second_seat():
    env = gemkit.make("multiagent:TicTacToe-v0-vs_minimax", agent="o")
    obs, info = env.reset(seed=0)
    assert "You play O" in obs and len(info["opponent_actions"]) == 1
    assert "Your move." in obs


def test_an_invalid_learner_move_costs_a_penalty_and_keeps_the_turn():
    env = gemkit.make("multiagent:TicTacToe-v0-vs_random")
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step("I pick the middle")
    assert reward == pytest.approx(-0.1) and info["invalid"] and info["opponent_actions"] == []
    assert "Invalid move" in obs and "\\boxed{" in obs


def test_simultaneous_play_asks_the_opponent_for_the_same_round():
    env = gemkit.make("multiagent:RockPaperScissors-v0-vs_nash")
    env.reset(seed=0)
    obs, reward, *_, info = env.step("\\boxed{rock}")
    assert "player_0 played rock" in obs and len(info["opponent_actions"]) == 1
    assert reward in (-1.0, 0.0, 1.0)


def test_async_opponents_are_awaited_in_astep():
    class AsyncMinimax:
        def __init__(self):
            self.inner = TicTacToeMinimax()

        def reset(self):
            pass

        async def act(self, observation):
            await asyncio.sleep(0)
            return self.inner.choose(observation)

    env = OpponentEnv(gemkit.make("multiagent:TicTacToe-v0"), AsyncMinimax(), agent="x")
    assert not env.runs_sync()

    async def play():
        await env.areset(seed=0)
        return await env.astep("\\boxed{5}")

    obs, *_, info = asyncio.run(play())
    assert len(info["opponent_actions"]) == 1 and "O played" in obs
    # the sync step drives the async opponent on a private loop
    env.reset(seed=0)
    assert len(env.step("\\boxed{1}")[4]["opponent_actions"]) == 1


@pytest.mark.parametrize(
    "env_id",
    [
        "multiagent:TicTacToe-v0-vs_minimax",
        "multiagent:KuhnPoker-v0-vs_nash",
        "multiagent:RockPaperScissors-v0-vs_nash",
    ],
)
def test_the_random_policy_plays_well_formed_moves_of_the_game(env_id):
    policy = gemkit.make_policy("random", env_id, seed=0)
    env = gemkit.make(env_id)
    obs, _ = env.reset(seed=0)
    obs, *_ = env.step(policy.choose(obs))
    assert "no move found" not in obs


def test_opponent_env_arguments_are_checked():
    game = gemkit.make("multiagent:TicTacToe-v0")
    with pytest.raises(MultiAgentError, match="choose one of"):
        OpponentEnv(game, ScriptedPolicy(["\\boxed{1}"]), agent="z")
    with pytest.raises(MultiAgentError, match="no opponent policy"):
        OpponentEnv(game, {"x": ScriptedPolicy(["\\boxed{1}"])}, agent="x")
