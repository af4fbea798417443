"""`gemkit eval` and rollouts against a real scripted OpenAI-protocol server."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

import gemkit
from gemkit.cli import main as cli
from gemkit.envs.games.guess_the_number import GuessTheNumberExpert
from gemkit.rollout import Episode, load_jsonl, run_episodes, to_dataset
from gemkit.testing.openai_server import ScriptedOpenAIServer

ENV = "game:GuessTheNumber-v0-easy"


def binary_search_model(request: dict) -> str:
    """A stand-in model: replays the chat's feedback through the binary-search expert."""
    expert = GuessTheNumberExpert(low=1, high=20)
    action = ""
    for message in request["messages"]:
        if message["role"] == "user":
            action = expert.choose(message["content"])
    return f"Let me think. {action}"


async def slow_model(request: dict) -> str:
    await asyncio.sleep(0.05)
    return binary_search_model(request)


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_eval_with_a_model_survives_faults_and_loses_nothing(tmp_path):
    with ScriptedOpenAIServer(
        binary_search_model, fault_rate=0.25, fault_kinds=("429", "500", "drop"), seed=3
    ) as srv:
        code = cli(
            [
                "eval",
                ENV,
                "--base-url",
                srv.base_url,
                "--model",
                "m",
                "-n",
                "12",
                "--concurrency",
                "4",
                "--out",
                str(tmp_path),
            ]
        )
        answered = len(srv.answered)
        faults = sum(r.fault is not None for r in srv.chat_requests)
    assert code == 0
    rows = lines(tmp_path / "episodes.jsonl")
    assert sorted(r["index"] for r in rows) == list(range(12))
    assert all(r["success"] for r in rows), "the binary-search model solves every easy game"
    assert faults > 0, "the run must have met injected faults"
    # one answered request per turn: no turn was lost or asked twice
    assert answered == sum(r["num_turns"] for r in rows)
    first_turn = rows[0]["turns"][0]
    assert first_turn["observation"][0]["role"] == "user"  # the model saw chat messages
    assert first_turn["usage"]["completion_tokens"] > 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary[ENV]["success_rate"] == 1.0 and summary[ENV]["missing"] == 0


# killed and resumed evals (byte-equal to an uninterrupted run): tests/runstore/test_kill_resume.py


def test_eval_refuses_to_overwrite_a_run_without_resume(tmp_path, capsys):
    assert cli(["eval", ENV, "--policy", "expert", "-n", "3", "--out", str(tmp_path)]) == 0
    assert cli(["eval", ENV, "--policy", "expert", "-n", "3", "--out", str(tmp_path)]) == 2
    assert "--resume" in capsys.readouterr().out
    assert len(lines(tmp_path / "episodes.jsonl")) == 3


def test_eval_with_expert_needs_no_model(tmp_path, monkeypatch):
    for var in ("GEMKIT_BASE_URL", "GEMKIT_MODEL"):
        monkeypatch.delenv(var, raising=False)
    assert cli(["eval", ENV, "--policy", "expert", "-n", "5", "--out", str(tmp_path)]) == 0
    assert json.loads((tmp_path / "summary.json").read_text())[ENV]["success_rate"] == 1.0


def test_eval_without_a_model_says_what_to_set(tmp_path, monkeypatch, capsys):
    for var in ("GEMKIT_BASE_URL", "GEMKIT_MODEL"):
        monkeypatch.delenv(var, raising=False)
    assert cli(["eval", ENV, "-n", "1", "--out", str(tmp_path)]) == 2
    line = capsys.readouterr().out
    assert "--base-url" in line and "GEMKIT_BASE_URL" in line and "base_url=" not in line
    assert not (tmp_path / "run.json").exists(), "refused before the run folder was made"


def test_rollout_exports_turns_returns_and_dataset(tmp_path):
    eps = run_episodes(ENV, lambda: gemkit.make_policy("expert", ENV), 4, seed=11)
    ep = eps[0]
    g = ep.returns(gamma=0.5)
    assert g[-1] == ep.turns[-1].reward and g[0] == pytest.approx(0.5 ** (len(g) - 1))
    ds = to_dataset(eps)
    assert len(ds) == sum(e.num_turns for e in eps)
    assert set(ds.column_names) >= {"observation", "action", "reward", "return", "episode"}
    per_episode = to_dataset(eps, per="episode")
    assert per_episode["success"] == [True] * 4
    ds.save_to_disk(str(tmp_path / "ds"))
    from gemkit.rollout import save_jsonl

    path = save_jsonl(eps, tmp_path / "eps.jsonl")
    with path.open("a") as f:
        f.write('{"torn": ')  # a killed writer's last line
    back = load_jsonl(path)
    assert [e.to_dict() for e in back] == [e.to_dict() for e in eps]
    assert isinstance(back[0], Episode)


def test_the_manifest_keeps_no_key_of_the_endpoint_address():
    # run.json is shown by the viewer and copied with results: a key in the URL stays out
    from gemkit.cli.eval import _without_credentials

    url = "https://user:sk-secret@api.example/v1?api-key=sk-other#frag"
    assert _without_credentials(url) == "https://api.example/v1"
    assert _without_credentials("http://127.0.0.1:8000/v1") == "http://127.0.0.1:8000/v1"
