"""Against both real servers: the commands a user runs, `eval`, `synth qa --llm` and `filter`.

Each runs as a user types it, through `gemkit.cli.main`, against vLLM and llama.cpp serving
Qwen2.5-Coder-0.5B-Instruct, with small counts and short replies (a 0.5B model on 2 CPU
cores: 5 to 20 tokens a second). `test_slow_servers.py` covers `synth tasks --llm`, timeouts
and windows; `test_vllm_tokens.py` and `test_llama_cpp_tokens.py` the token-mode paths.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gemkit.cli import main as cli

pytestmark = pytest.mark.live


@pytest.fixture(params=["vllm", "llama"])
def server(request) -> str:
    """Base URL of each real server in turn."""
    return request.getfixturevalue(request.param)


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_eval_plays_and_records_every_reply_with_why_it_ended(server, tmp_path):
    code = cli(["eval", "game:GuessTheNumber-v0-easy", "--base-url", server, "--model", "qwen",
                "-n", "2", "--max-tokens", "48", "--concurrency", "2", "--timeout", "900",
                "--out", str(tmp_path / "run")])  # fmt: skip
    assert code == 0
    episodes = rows(tmp_path / "run" / "episodes.jsonl")
    assert len(episodes) == 2 and all(ep["error"] is None for ep in episodes)
    turns = [t for ep in episodes for t in ep["turns"]]
    assert turns and all(t.get("finish_reason") in ("stop", "length") for t in turns)
    assert all(t["usage"].get("completion_tokens", 0) <= 48 for t in turns)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    (s,) = [v for k, v in summary.items() if k.startswith("game:")]
    assert s["replies_cut"] == sum(t["finish_reason"] == "length" for t in turns)


def test_native_tool_calls_arrive_when_forced_and_the_report_counts_them(vllm, tmp_path, capsys):
    # vLLM's hermes parser with tool_choice=required constrains the reply to a call
    out = tmp_path / "run"
    code = cli(["eval", "qa:Builtin-v0", "--base-url", vllm, "--model", "qwen", "-n", "1",
                "--tools", "search", "--tool-format", "native", "--tool-choice", "required",
                "--max-tokens", "96", "--timeout", "900", "--out", str(out)])  # fmt: skip
    assert code == 0
    report = capsys.readouterr().out
    summary = json.loads((out / "summary.json").read_text())
    (s,) = [v for k, v in summary.items() if k.startswith("qa:")]
    turns = [t for ep in rows(out / "episodes.jsonl") for t in ep["turns"]]
    calls = [(t, c) for t in turns for c in t["info"].get("parsed_calls", [])]
    native = [t for t, c in calls if c["format"] == "openai"]
    text = [t for t, c in calls if c["format"] != "openai"]
    # the summary counts what the episodes hold, and most calls came as the server's
    # tool_calls: in the CI run of 2026-12-03, 2 of 12 came as text in replies vLLM ended by
    # itself (its parser left them in the content), so "every one" is not vLLM's guarantee
    assert (s["native_tool_calls"], s["text_tool_calls"]) == (len(native), len(text)), s
    assert len(native) >= 1 and len(native) >= len(text), [t["action"] for t in text]
    assert all(t["action"].get("tool_calls") for t in native)
    assert all(t["finish_reason"] in ("tool_calls", "length") for t in native)
    # the fallback read calls only from replies that came with none of the server's
    assert not any(t["action"].get("tool_calls") for t in text)
    assert ("came as text in the reply" in report) == bool(text)


def test_synth_qa_with_a_real_model_writes_its_records_or_says_why_not(server, tmp_path, capsys):
    out = tmp_path / "qa"
    code = cli(["synth", "qa", "-n", "1", "--world-size", "300", "--min-inject", "1",
                "--min-fuzz", "0", "--llm", server, "--model", "qwen", "--timeout", "900",
                "--out", str(out)])  # fmt: skip
    text = capsys.readouterr()
    assert "Traceback" not in text.out + text.err
    assert code == 0, text.out[-2000:] + text.err[-2000:]

    # every work item is accounted for: kept, or rejected by a stage that says why
    def read(name: str) -> list[dict]:
        return rows(out / name) if (out / name).exists() else []

    kept, rejected = read("qa.jsonl"), read("rejected.jsonl")
    assert len(kept) <= 1
    assert all(r["rejected_stage"] and r["reason"] for r in rejected), rejected
    if not kept:  # it tried all it may (n x max_items_factor) before giving up
        assert len(rejected) + len(read("failed.jsonl")) == 20


def test_filter_with_a_real_model_plays_every_attempt_and_judges_or_says_it_cannot(
    server, tmp_path, capsys
):
    source = tmp_path / "qa"
    assert cli(["synth", "qa", "-n", "2", "--world-size", "300", "--out", str(source)]) == 0
    out = tmp_path / "filter"
    code = cli(["filter", str(source), "--llm", server, "--model", "qwen", "--k", "1",
                "--max-steps", "3", "--max-tokens", "64", "--limit", "1", "--timeout", "900",
                "--out", str(out)])  # fmt: skip
    text = capsys.readouterr()
    assert "Traceback" not in text.out + text.err
    summary = json.loads((out / "summary.json").read_text())
    if summary.get("judged") is False:  # the 0.5B model solved nothing: no verdict, exit 1
        assert code == 1 and "cannot judge" in " ".join((text.out + text.err).split())
    else:
        assert code == 0
