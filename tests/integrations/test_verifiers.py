"""verifiers both ways, against the real package (verifiers 0.4.0), offline on 127.0.0.1.

A gemkit id as verifiers' taskset `gemkit-verifiers`, its episodes run by verifiers' own
machinery (`Env.run_episode`, its interception server, traces and rewards) against gemkit's
scripted OpenAI-protocol server; and verifiers tasksets played in gemkit (`verifiers:`):
ours, and one written against verifiers' API alone.
"""

from __future__ import annotations

import os

import pytest

import gemkit
from gemkit.testing import ScriptedOpenAIServer

pytest.importorskip("verifiers.v1", reason="needs gemkit[verifiers]")

from verifiers.v1.clients import EvalClientConfig, ModelContext  # noqa: E402
from verifiers.v1.utils.loaders import load_environment  # noqa: E402

from gemkit.integrations.verifiers import (  # noqa: E402
    TASKSET_ID,
    GemkitEnv,
    GemkitEnvConfig,
    GemkitTaskset,
)

DOORS = "toy:Doors-v0"
os.environ.setdefault("GEMKIT_TEST_KEY", "test")


def vf_env(env_id: str = DOORS, **taskset):
    config = GemkitEnvConfig.model_validate(
        {"taskset": {"id": TASKSET_ID, "env_id": env_id, "num_tasks": 4, **taskset}}
    )
    return load_environment(config)


def context(server) -> ModelContext:
    return ModelContext(
        model="scripted",
        client=EvalClientConfig(base_url=server.base_url, api_key_var="GEMKIT_TEST_KEY"),
    )


def direct_return(env_id: str, seed: int, policy) -> tuple[float, int, bool]:
    env = gemkit.make(env_id)
    obs, _ = env.reset(seed=seed)
    policy.reset()
    total, steps = 0.0, 0
    while True:
        obs, reward, terminated, truncated, info = env.step(policy.choose(obs))
        total, steps = total + reward, steps + 1
        if terminated or truncated:
            return total, steps, bool(info.get("success"))


def test_verifiers_loads_the_taskset_by_its_id_and_tasks_carry_env_id_and_seed():
    env = vf_env(seed=10)
    assert isinstance(env, GemkitEnv) and isinstance(env.taskset, GemkitTaskset)
    tasks = list(env.taskset)
    assert [t.data.info["seed"] for t in tasks] == [10, 11, 12, 13]
    assert {t.data.info["env_id"] for t in tasks} == {DOORS}
    assert tasks[2].data.prompt == gemkit.make(DOORS).reset(seed=12)[0]


@pytest.mark.parametrize("seed", [0, 3])
async def test_a_verifiers_episode_scores_the_gemkit_return(seed):
    expert = gemkit.make_policy("expert", DOORS)

    def reply(body):
        return expert.choose(body["messages"][-1]["content"])

    env = vf_env(seed=seed, num_tasks=1)
    (task,) = list(env.taskset)
    expected = direct_return(DOORS, seed, gemkit.make_policy("expert", DOORS))
    expert.reset()
    async with ScriptedOpenAIServer(reply) as server:
        async with env.serving():
            episode = await env.run_episode(task, context(server))
    assert episode.ok, episode.errors
    (trace,) = episode.traces
    assert (
        trace.rewards["gemkit_return"].score,
        trace.info["steps"],
        trace.info["success"],
    ) == expected
    assert trace.num_turns == expected[1]  # every reply went through verifiers' interception


async def test_junk_replies_are_played_as_the_env_plays_them():
    from gemkit.policy import ScriptedPolicy

    env = vf_env("game:GuessTheNumber-v0-easy", num_tasks=1)
    (task,) = list(env.taskset)
    async with ScriptedOpenAIServer(lambda body: "no idea") as server:
        async with env.serving():
            episode = await env.run_episode(task, context(server))
    (trace,) = episode.traces
    expected = direct_return("game:GuessTheNumber-v0-easy", 0, ScriptedPolicy(["no idea"]))
    assert episode.ok and expected[2] is False  # format penalties, turn limit, no success
    assert (
        trace.rewards["gemkit_return"].score,
        trace.info["steps"],
        trace.info["success"],
    ) == expected


def test_the_taskset_without_an_env_id_says_what_to_pass():
    with pytest.raises(ValueError, match="env-id"):
        GemkitEnvConfig.model_validate({"taskset": {"id": TASKSET_ID}})


def test_the_verifiers_family_plays_a_taskset_as_the_env_itself_plays():
    env = gemkit.make(
        "verifiers:Env-v0", taskset=TASKSET_ID, taskset_config={"env_id": DOORS, "num_tasks": 5}
    )
    direct = gemkit.make(DOORS)
    for seed in (2, 3):  # a second reset starts the next episode on the same env
        obs, info = env.reset(seed=seed)
        assert obs == direct.reset(seed=seed)[0] and info["task"] == f"{DOORS}#{seed}"
        for action in "abcd":
            d_obs, d_reward, d_term, _, _ = direct.step(action)
            obs, reward, terminated, truncated, info = env.step(action)
            if d_term:
                assert (reward, terminated, info["success"]) == (d_reward, True, d_reward > 0)
                assert info["rewards"] == {"gemkit_return": d_reward}
                break
            assert (obs, reward, terminated) == (d_obs, 0.0, False)
    assert env.step("a")[2]  # after the end: an ended step
    env.close()


SPELL = '''
"""A taskset written against verifiers' API alone: spell a word, one letter per turn."""
import verifiers.v1 as vf


class SpellConfig(vf.TasksetConfig):
    pass


class SpellTask(vf.Task[vf.TaskData, vf.State, vf.TaskConfig]):
    pass


class SpellTaskset(vf.Taskset[SpellTask, SpellConfig]):
    def load(self):
        for word in ("cat", "dog", "owl"):
            yield SpellTask(vf.TaskData(name=word, prompt=f"Spell {word}, one letter a turn."), self.config.task)


class SpellEnvConfig(vf.EnvConfig):
    player: vf.AgentConfig = vf.AgentConfig()


class SpellEnv(vf.Env[SpellEnvConfig]):
    async def run(self, task, agents):
        word, letters = task.data.name, []
        async with agents.player.interaction(task) as interaction:
            segment = await interaction.turn()
            while not segment.terminated:
                letters.append(segment.last_reply[:1])
                if len(letters) == len(word):
                    break
                segment = await interaction.turn(f"{len(letters)} letters so far; the next?")
        interaction.trace.record_reward("spelled", float("".join(letters) == word))


__all__ = ["SpellTaskset", "SpellEnv"]
'''


@pytest.fixture
def spell_taskset(tmp_path, monkeypatch):
    (tmp_path / "vf_spell.py").write_text(SPELL)
    monkeypatch.syspath_prepend(str(tmp_path))
    return "vf-spell"


@pytest.mark.parametrize(("letters", "reward"), [("dog", 1.0), ("dig", 0.0)])
def test_the_verifiers_family_plays_a_taskset_written_for_verifiers(spell_taskset, letters, reward):
    env = gemkit.make("verifiers:Env-v0", taskset=spell_taskset)
    obs, info = env.reset(seed=4)  # task 4 of 3: the second, "dog"
    assert obs == "Spell dog, one letter a turn." and info["task"] == "dog"
    assert env.step(letters[0])[0] == "1 letters so far; the next?"
    assert env.step(letters[1])[:3] == ("2 letters so far; the next?", 0.0, False)
    obs, got, terminated, truncated, info = env.step(letters[2])
    assert (got, terminated, info["rewards"], info["success"]) == (
        reward,
        True,
        {"spelled": reward},
        reward > 0,
    )
    env.close()


def test_the_verifiers_family_without_a_taskset_says_what_to_pass():
    with pytest.raises(gemkit.GemkitError, match="taskset"):
        gemkit.make("verifiers:Env-v0")
