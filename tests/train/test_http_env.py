"""The HTTP env server and RemoteEnv: the same Env API across a process boundary."""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.error
import urllib.request

import pytest

import gemkit
from gemkit.envs.toy.copy_word import CopyWordExpert
from gemkit.integrations.http_env import EnvServer, RemoteEnv, RemoteEnvError
from gemkit.rollout import run_episode


@pytest.fixture
def server_url():
    """A real env server for toy:Copy-v0 on 127.0.0.1, in a background thread."""
    from aiohttp import web

    loop = asyncio.new_event_loop()
    runner = web.AppRunner(EnvServer("toy:Copy-v0", max_sessions=20).app())
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    port = runner.addresses[0][1]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{port}"
    asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)
    loop.close()


def test_remote_env_plays_exactly_like_the_local_env(server_url):
    local, remote = gemkit.make("toy:Copy-v0"), RemoteEnv(server_url)
    assert remote.reset(seed=5) == local.reset(seed=5)
    for action in ("apple", "river", "stone"):
        assert remote.step(action) == local.step(action)
    remote.close()


async def test_concurrent_async_sessions_stay_independent(server_url):
    envs = [RemoteEnv(server_url) for _ in range(12)]
    episodes = await asyncio.gather(
        *(run_episode(env, CopyWordExpert(), seed=k) for k, env in enumerate(envs))
    )
    assert all(ep.error is None and ep.total_reward == 3.0 for ep in episodes)
    firsts = {ep.turns[0].observation for ep in episodes}
    assert len(firsts) > 1  # different seeds, different sessions
    await asyncio.gather(*(env.aclose() for env in envs))
    with urllib.request.urlopen(server_url + "/health") as r:
        assert json.loads(r.read()) == {"env_id": "toy:Copy-v0", "sessions": 0}


def test_clone_replays_the_same_start_state_in_a_new_session(server_url):
    env = RemoteEnv(server_url)
    obs, _ = env.reset(seed=9)
    twin = env.clone()
    assert twin.session_id != env.session_id
    word = obs.rsplit("Word:", 1)[1].strip()
    assert env.step(word) == twin.step(word)
    env.close()
    twin.close()


def test_step_before_reset_and_unknown_sessions_explain_what_to_do(server_url):
    with pytest.raises(RemoteEnvError, match="call reset"):
        RemoteEnv(server_url).step("x")
    with pytest.raises(RemoteEnvError, match="404: no session 'gone'.*POST /reset"):
        RemoteEnv(server_url, session_id="gone").step("x")


def test_bad_json_and_bad_seed_get_a_400_with_the_expected_form(server_url):
    request = urllib.request.Request(
        server_url + "/reset",
        data=b"{nope",
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(request)
    assert e.value.code == 400 and "JSON object" in json.loads(e.value.read())["error"]
    with pytest.raises(RemoteEnvError, match="seed must be an integer"):
        RemoteEnv(server_url).reset(seed="one")  # type: ignore[arg-type]


def test_the_server_caps_open_sessions(server_url):
    envs = [RemoteEnv(server_url) for _ in range(20)]
    for env in envs:
        env.reset()
    with pytest.raises(RemoteEnvError, match="maximum of 20 sessions"):
        RemoteEnv(server_url).reset()
    for env in envs:
        env.close()


def test_an_unreachable_server_is_a_clear_error():
    with pytest.raises(RemoteEnvError, match="cannot reach the env server.*gemkit serve env"):
        RemoteEnv("http://127.0.0.1:9", timeout=2).reset()


def test_serve_env_parser_registers_the_env_target():
    from gemkit.cli import build_parser

    args = build_parser().parse_args(["serve", "env", "toy:Copy-v0", "--port", "8123"])
    assert (args.env_id, args.port, args.host) == ("toy:Copy-v0", 8123, "127.0.0.1")
    assert callable(args.serve)
