"""OpenEnv both ways, against the real package (openenv-core 0.3.0) on 127.0.0.1.

A gemkit id served by OpenEnv's own `create_app` is played by OpenEnv's own client over its
WebSocket sessions; the `openenv:` family plays OpenEnv servers (ours, and an env written
against OpenEnv's API alone) in gemkit's vectors and wrappers.
"""

from __future__ import annotations

import json
import urllib.request

import pytest

import gemkit

pytest.importorskip("openenv.core", reason="needs gemkit[openenv]")

from openenv.core import (  # noqa: E402
    Action,
    Environment,
    GenericEnvClient,
    Observation,
    State,
    create_app,
)

from gemkit.integrations.openenv import GemkitAction, GemkitEnvironment, openenv_app  # noqa: E402

DOORS = "toy:Doors-v0"


def direct(env_id: str, seed: int, actions: list[str]) -> list[tuple]:
    env = gemkit.make(env_id)
    out = [env.reset(seed=seed)[0]]
    for a in actions:
        obs, reward, terminated, truncated, info = env.step(a)
        out.append((obs, reward, terminated, truncated))
        if terminated or truncated:
            break
    return out


ACTIONS = ["a", "b", "c", "d"]


@pytest.fixture(scope="module")
def doors_url(serve_app):
    with serve_app(openenv_app(DOORS, max_concurrent_envs=4)) as url:
        yield url


async def test_openenvs_own_client_plays_a_gemkit_id_over_its_websocket_session(doors_url):
    expected = direct(DOORS, 7, ACTIONS)
    async with GenericEnvClient(base_url=doors_url) as client:
        result = await client.reset(seed=7)
        played = [result.observation["text"]]
        for a in ACTIONS:
            result = await client.step({"message": a})
            o = result.observation
            played.append((o["text"], result.reward, o["terminated"], o["truncated"]))
            if result.done:
                assert "success" in o["info"]
                break
    assert played == expected


async def test_two_sessions_keep_their_own_episodes(doors_url):
    async with GenericEnvClient(base_url=doors_url) as a, GenericEnvClient(base_url=doors_url) as b:
        first_a = (await a.reset(seed=1)).observation["text"]
        await b.reset(seed=2)
        await b.step({"message": "a"})
        step_a = (await a.step({"message": "a"})).observation["text"]
    assert [first_a, step_a] == [x if isinstance(x, str) else x[0] for x in direct(DOORS, 1, ["a"])]


def test_http_reset_and_step_keep_no_state_between_requests(doors_url):
    # OpenEnv's HTTP endpoints build a fresh env per request: a step is not the next move of
    # the episode a reset started (why the sessions are the WebSocket's)
    def post(path, body):
        req = urllib.request.Request(
            f"{doors_url}{path}", json.dumps(body).encode(), {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.load(r)

    post("/reset", {"seed": 7})
    step = post("/step", {"action": {"message": "a"}})
    assert step["observation"]["info"]["turn"] == 1  # a fresh env's first turn, every time
    again = post("/step", {"action": {"message": "a"}})
    assert again["observation"]["info"]["turn"] == 1


def test_the_openenv_family_plays_the_server_like_the_env_itself(doors_url):
    env = gemkit.make("openenv:Remote-v0", base_url=doors_url)
    played = [env.reset(seed=7)[0]]
    for a in ACTIONS:
        obs, reward, terminated, truncated, info = env.step(a)
        played.append((obs, reward, terminated, truncated))
        if terminated or truncated:
            break
    assert played == direct(DOORS, 7, ACTIONS)
    assert info["success"] == (played[-1][1] == 1.0)
    env.close()


async def test_openenv_sessions_in_an_async_vector_with_chat_history(doors_url):
    from gemkit.wrappers import ChatHistory

    vec = gemkit.make_vec(
        "openenv:Remote-v0", 3, mode="async", base_url=doors_url, wrappers=[ChatHistory]
    )
    obs, _ = await vec.areset(seed=[1, 2, 3])
    assert [o[-1]["content"] for o in obs] == [direct(DOORS, s, [])[0] for s in (1, 2, 3)]
    out = await vec.astep(["a", "b", "c"])
    for i, s in enumerate((1, 2, 3)):
        step = direct(DOORS, s, [["a", "b", "c"][i]])[1]
        assert (out[0][i][-1]["content"], out[1][i]) == step[:2]
    vec.close()


async def test_a_tool_wrapped_openenv_session_runs_the_tool_and_plays_on(doors_url):
    tooled = gemkit.make("openenv:Remote-v0", base_url=doors_url, tools=["python"])
    first, _ = await tooled.areset(seed=1)
    assert "python" in first  # the tool wrapper's instructions around the served task
    obs, *_ = await tooled.astep("<python>print(6 * 7)</python>")
    assert "42" in obs
    obs, reward, *_ = await tooled.astep("a")  # a final answer reaches the served env
    assert (obs, reward) == direct(DOORS, 1, ["a"])[1][:2]
    tooled.close()


def test_a_refused_action_is_answered_and_the_episode_goes_on(doors_url):
    env = gemkit.make("openenv:Remote-v0", base_url=doors_url)
    env.reset(seed=7)
    obs, reward, terminated, truncated, info = env.step('{"msg": "a"}')  # no such field
    assert "refused" in obs and reward == 0 and not terminated and "invalid" in info
    assert env.step("a")[0]  # the session still plays
    env.close()


def test_without_a_server_url_the_message_says_what_to_pass():
    with pytest.raises(gemkit.GemkitError, match="base_url"):
        gemkit.make("openenv:Remote-v0")


class CountAction(Action):
    add: int


class CountObservation(Observation):
    total: int = 0
    prompt: str = ""


class CountTo(Environment):
    """An env written against OpenEnv's API alone: add numbers to reach 5 exactly."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self):
        super().__init__()
        self.total, self._state = 0, State()

    def reset(self, seed=None, episode_id=None, **kwargs):
        self.total, self._state = 0, State(episode_id=episode_id)
        return CountObservation(total=0, prompt='Reach 5 exactly: send {"add": n}.')

    def step(self, action, timeout_s=None, **kwargs):
        self.total += action.add
        self._state.step_count += 1
        done = self.total >= 5
        return CountObservation(
            total=self.total, prompt=f"total {self.total}", done=done, reward=float(self.total == 5)
        )

    @property
    def state(self):
        return self._state


def test_an_env_written_for_openenv_plays_in_gemkit(serve_app):
    app = create_app(CountTo, CountAction, CountObservation, max_concurrent_envs=2)
    with serve_app(app) as url:
        env = gemkit.make("openenv:Remote-v0", base_url=url)
        obs, _ = env.reset()
        assert obs.startswith("Reach 5")
        assert env.step("2")[0] == "total 2"  # plain text into the one required field
        obs, reward, terminated, truncated, info = env.step('{"add": 3}')
        assert (obs, reward, terminated, truncated, info["success"]) == (
            "total 5",
            1.0,
            True,
            False,
            True,
        )
        assert env.step("1")[2]  # after the end: an ended step, nothing sent
        env.close()


def test_gemkit_environment_is_an_openenv_environment_with_its_state():
    env = GemkitEnvironment(DOORS)
    first = env.reset(seed=3, episode_id="e1")
    after = env.step(GemkitAction(message="a"))
    assert isinstance(env, Environment) and first.text == direct(DOORS, 3, [])[0]
    assert env.state.episode_id == "e1" and env.state.step_count == 1 and env.state.env_id == DOORS
    assert after.reward in (0.0, 1.0)
    env.close()
