"""A gemkit id as a NeMo Gym resources server, served by the real nemo-gym (0.4.0).

NeMo Gym needs Python 3.12 or later; this suite runs on the project's Python, so the server
runs in a Python 3.12 virtualenv that has gemkit and nemo-gym (`.ci/run` builds `.venv-nemo`
when a Python 3.12 is on the machine; `$GEMKIT_NEMO_PYTHON` names another). The test talks to
it over HTTP on 127.0.0.1 with the session cookie NeMo Gym's agents keep per rollout.
"""

from __future__ import annotations

import http.cookiejar
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

import gemkit

ROOT = Path(__file__).resolve().parents[2]
PYTHON = os.environ.get("GEMKIT_NEMO_PYTHON") or str(ROOT / ".venv-nemo" / "bin" / "python")
REQUIRED = os.environ.get("GEMKIT_REQUIRE_NEMO") == "1"

if not Path(PYTHON).exists():
    reason = (
        f"NeMo Gym needs Python >= 3.12 and this suite runs on {sys.version.split()[0]}: no "
        f"Python 3.12 virtualenv with nemo-gym at {PYTHON} (.ci/run builds .venv-nemo when a "
        "python3.12 is on the machine; or set GEMKIT_NEMO_PYTHON)"
    )
    if REQUIRED:
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason, allow_module_level=True)

ENV = "toy:Doors-v0"
SERVER = """
import socket, sys, uvicorn
from gemkit.integrations.nemo_gym import nemo_gym_app, nemo_gym_rows
import json
sock = socket.socket(); sock.bind(("127.0.0.1", 0))
print(json.dumps({"port": sock.getsockname()[1], "rows": nemo_gym_rows(sys.argv[1], 2, seed=5)}), flush=True)
uvicorn.run(nemo_gym_app(sys.argv[1]), fd=sock.fileno(), log_level="warning")
"""


@pytest.fixture(scope="module")
def server():
    proc = subprocess.Popen(
        [PYTHON, "-c", SERVER, ENV], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        line = proc.stdout.readline()
        if not line:
            pytest.fail(f"the NeMo Gym server did not start: {proc.stderr.read()[-2000:]}")
        hello = json.loads(line)
        yield f"http://127.0.0.1:{hello['port']}", hello["rows"]
    finally:
        proc.terminate()
        proc.wait(30)


class Rollout:
    """One rollout's HTTP client: NeMo Gym's session cookie kept across requests."""

    def __init__(self, base: str):
        self.base = base
        self.opener = urllib.request.build_opener(
            urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar())
        )

    def post(self, path: str, body: dict) -> dict:
        import time

        req = urllib.request.Request(
            self.base + path, json.dumps(body).encode(), {"Content-Type": "application/json"}
        )
        for _ in range(600):  # the server may still be starting
            try:
                with self.opener.open(req, timeout=60) as r:
                    return json.load(r)
            except urllib.error.URLError as e:
                if isinstance(e, urllib.error.HTTPError):
                    raise
                time.sleep(0.1)
        raise RuntimeError("no answer")


def response(text: str) -> dict:
    """A Responses API response whose output is one assistant message."""
    return {
        "id": "resp-1",
        "created_at": 0,
        "model": "m",
        "object": "response",
        "output": [
            {
                "type": "message",
                "id": "msg-1",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        ],
        "parallel_tool_calls": False,
        "tool_choice": "auto",
        "tools": [],
    }


def test_rows_hold_the_seeded_task_and_the_step_tool(server):
    _, rows = server
    assert [r["seed"] for r in rows] == [5, 6]
    assert (
        rows[0]["responses_create_params"]["input"][-1]["content"]
        == gemkit.make(ENV).reset(seed=5)[0]
    )
    (tool,) = rows[0]["responses_create_params"]["tools"]
    assert tool["name"] == "step" and tool["parameters"]["required"] == ["action"]


def test_a_rollout_seeds_steps_and_verifies_as_the_env_plays(server):
    base, rows = server
    env = gemkit.make(ENV)
    obs, _ = env.reset(seed=5)
    rollout = Rollout(base)
    assert rollout.post("/seed_session", {"seed": 5})["observation"] == obs
    total = 0.0
    for action in ["a", "b", "c", "d"]:
        expected = env.step(action)
        got = rollout.post("/step", {"action": action})
        assert (got["observation"], got["reward"], got["terminated"], got["truncated"]) == expected[
            :4
        ]
        total += expected[1]
        if got["done"]:
            break
    verdict = rollout.post(
        "/verify",
        {
            "responses_create_params": rows[0]["responses_create_params"],
            "response": response("done"),
        },
    )
    assert verdict["reward"] == total and verdict["success"] == (total == 1.0)


def test_two_rollouts_keep_their_own_episodes(server):
    base, rows = server
    a, b = Rollout(base), Rollout(base)
    a.post("/seed_session", {"seed": 5})
    b.post("/seed_session", {"seed": 6})
    env = gemkit.make(ENV)
    env.reset(seed=5)
    b.post("/step", {"action": "a"})
    assert a.post("/step", {"action": "b"})["observation"] == env.step("b")[0]


def test_verify_plays_the_final_text_of_an_open_episode(server):
    base, rows = server
    env = gemkit.make(ENV)
    env.reset(seed=6)
    rollout = Rollout(base)
    rollout.post("/seed_session", {"seed": 6})
    expected = env.step("c")
    verdict = rollout.post(
        "/verify",
        {"responses_create_params": rows[1]["responses_create_params"], "response": response("c")},
    )
    assert verdict["reward"] == expected[1] and verdict["steps"] == 1


def test_a_step_without_a_session_is_refused_with_what_to_do(server):
    base, _ = server
    with pytest.raises(urllib.error.HTTPError) as e:
        Rollout(base).post("/step", {"action": "a"})
    assert e.value.code == 400 and "seed_session" in e.value.read().decode()


def tool_call(action: str) -> str:
    call = {"name": "step", "arguments": {"action": action}}
    return f"<tool_call>{json.dumps(call)}</tool_call>"


def test_the_nemo_gym_family_plays_a_resources_server_from_this_python(server):
    base, rows = server
    env = gemkit.make("nemo_gym:Server-v0", base_url=base, rows=rows)
    direct = gemkit.make(ENV)
    obs, info = env.reset(seed=1)  # row 1: seed 6
    assert obs == direct.reset(seed=6)[0] and info["tools"][0]["name"] == "step"
    total = 0.0
    for action in "ab":
        expected = direct.step(action)
        obs, reward, terminated, _, _ = env.step(tool_call(action))
        assert json.loads(obs)["observation"] == expected[0] and (reward, terminated) == (
            0.0,
            False,
        )
        total += expected[1]
        if expected[2]:
            break
    else:
        total += direct.step("c")[1]  # the final answer, played by verify
    obs, reward, terminated, truncated, info = env.step("c")
    assert (reward, terminated, info["success"]) == (total, True, total > 0)
    assert info["verify"]["steps"] in (2, 3)


def test_the_nemo_gym_family_answers_an_unknown_tool_with_the_tools_offered(server):
    base, rows = server
    env = gemkit.make("nemo_gym:Server-v0", base_url=base, rows=rows)
    env.reset(seed=0)
    obs, reward, terminated, _, info = env.step('{"name": "shell", "arguments": {}}')
    assert "no tool 'shell'" in obs and "step" in obs and not terminated and "invalid" in info
