"""`gemkit eval` against slow and small servers: bounded replies, cut replies marked and
counted, over-window chats ended as outcomes, and a timeout that is not re-sent."""

from __future__ import annotations

import json
from pathlib import Path

from gemkit.cli import main as cli
from gemkit.testing import Fault, Reply, ScriptedOpenAIServer

ENV = "game:GuessTheNumber-v0-easy"
REAL = Path(__file__).parents[1] / "data" / "real-model"


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def eval_args(srv: ScriptedOpenAIServer, out: Path, *more: str) -> list[str]:
    return ["eval", ENV, "--base-url", srv.base_url, "--model", "m", "--out", str(out), *more]


def over_window_refusal() -> dict:
    """vLLM's answer to a chat longer than its window (tests/data/real-model)."""
    for line in (REAL / "vllm-probes.jsonl").read_text().splitlines():
        row = json.loads(line)
        if row["probe"] == "over_window":
            return row
    raise AssertionError("no recorded over-window refusal")


def test_eval_bounds_every_reply_and_marks_and_counts_the_cut_ones(tmp_path, capsys):
    # the scripted server cuts a reply at max_tokens words with finish_reason "length"
    replies = ["I will guess the middle of the range first: 10", "10"]
    with ScriptedOpenAIServer(lambda body: replies[len(body["messages"]) > 1]) as srv:
        code = cli(eval_args(srv, tmp_path, "-n", "1", "--max-tokens", "4"))
        bodies = [r.body for r in srv.chat_requests]
    assert code == 0
    assert {b["max_tokens"] for b in bodies} == {4}
    (episode,) = lines(tmp_path / "episodes.jsonl")
    reasons = [t["finish_reason"] for t in episode["turns"]]
    assert reasons[0] == "length" and episode["turns"][0]["action"] == "I will guess the"
    summary = json.loads((tmp_path / "summary.json").read_text())[ENV]
    assert summary["replies_cut"] == reasons.count("length") >= 1
    out = capsys.readouterr().out
    assert f"{summary['replies_cut']} model replies were cut at their token limit" in out


def test_eval_max_tokens_defaults_to_the_client_bound(tmp_path):
    from gemkit.llm.client import DEFAULT_MAX_TOKENS

    with ScriptedOpenAIServer(lambda body: "10") as srv:
        assert cli(eval_args(srv, tmp_path, "-n", "1")) == 0
        assert {r.body["max_tokens"] for r in srv.chat_requests} == {DEFAULT_MAX_TOKENS}
    manifest = json.loads((tmp_path / "run.json").read_text())
    assert manifest["settings"]["max_tokens"] == DEFAULT_MAX_TOKENS


def test_an_over_window_chat_ends_its_episode_as_an_outcome_not_an_error(tmp_path, capsys):
    refusal = over_window_refusal()
    reject = Fault("reject", status=refusal["status"], body=refusal["response"])
    with ScriptedOpenAIServer(lambda body: "1", faults={2: reject}) as srv:
        code = cli(eval_args(srv, tmp_path, "-n", "1"))
        asked = len(srv.chat_requests)
        # a resume finds the episode settled: its chat would outgrow the window again
        assert cli(eval_args(srv, tmp_path, "-n", "1", "--resume")) == 0
        assert len(srv.chat_requests) == asked == 2
    assert code == 0
    (episode,) = lines(tmp_path / "episodes.jsonl")
    assert "does not fit the model's context window" in episode["context_overflow"]
    assert "maximum context length is 4096 tokens" in episode["context_overflow"]
    assert episode["error"] is None and not episode["success"] and episode["num_turns"] == 1
    assert lines(tmp_path / "errors.jsonl") == []
    summary = json.loads((tmp_path / "summary.json").read_text())[ENV]
    assert (summary["context_overflows"], summary["errors"], summary["missing"]) == (1, 0, 0)
    assert "1 episodes ended when their chat outgrew the model's context window" in (
        capsys.readouterr().out
    )


def test_eval_timeout_is_not_re_sent_and_the_error_names_the_flag(tmp_path, capsys):
    slow = Fault("slow", delay=3.0)
    with ScriptedOpenAIServer(lambda body: "10", faults={1: slow}) as srv:
        code = cli(eval_args(srv, tmp_path, "-n", "1", "--timeout", "0.3"))
        asked = len(srv.chat_requests)
    assert code == 1, "the episode did not finish: a resume plays it again"
    assert asked == 1, "the accepted request was not sent again"
    (failed,) = lines(tmp_path / "errors.jsonl")
    assert "sent no answer within 0.3 s" in failed["error"]
    assert "--timeout SECONDS or GEMKIT_TIMEOUT=SECONDS" in failed["error"]
    manifest = json.loads((tmp_path / "run.json").read_text())
    assert manifest["info"]["timeout"] == 0.3
    # the resume that plays it again, on a server now quick enough: the error is gone
    with ScriptedOpenAIServer(lambda body: "10") as srv:
        assert cli(eval_args(srv, tmp_path, "-n", "1", "--timeout", "30", "--resume")) == 0
    assert not (tmp_path / "errors.jsonl").exists()
    assert json.loads((tmp_path / "summary.json").read_text())[ENV]["errors"] == 0
    assert "ended in an error" not in capsys.readouterr().out.split("results in")[-1]


def test_eval_reads_the_timeout_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("GEMKIT_TIMEOUT", "0.3")
    with ScriptedOpenAIServer(lambda body: "10", faults={1: Fault("slow", delay=3.0)}) as srv:
        assert cli(eval_args(srv, tmp_path, "-n", "1")) == 1
    (failed,) = lines(tmp_path / "errors.jsonl")
    assert "within 0.3 s" in failed["error"]


def test_a_bad_timeout_is_a_usage_error(tmp_path, capsys):
    import pytest

    for bad in ("0", "-1", "soon"):
        with pytest.raises(SystemExit) as e:
            cli(["eval", ENV, "--model", "m", "--out", str(tmp_path), "--timeout", bad])
        assert e.value.code == 2
        assert "--timeout: expected a number of seconds" in capsys.readouterr().err


def recorded(kind: str, probe: str) -> dict:
    for line in (REAL / f"{kind}-probes.jsonl").read_text().splitlines():
        row = json.loads(line)
        if row["probe"] == probe:
            return row
    raise AssertionError(f"no {probe} probe of {kind}")


def test_a_reply_cut_at_the_end_of_the_window_is_told_apart_from_one_cut_at_max_tokens(
    tmp_path, capsys
):
    # llama.cpp's answer when a chat nearly filled a 4,096-token slot: `length` after 26 of
    # the 200 tokens asked (vLLM shortens max_tokens instead)
    answer = recorded("llama-cpp", "cut_at_window")["response"]
    choice = answer["choices"][0]
    assert choice["finish_reason"] == "length" and answer["usage"]["total_tokens"] == 4096
    reply = Reply(choice["message"]["content"], finish_reason="length", usage=answer["usage"])
    with ScriptedOpenAIServer([reply, "10"] * 20) as srv:
        assert cli(eval_args(srv, tmp_path, "-n", "1", "--max-tokens", "200")) == 0
    (episode,) = lines(tmp_path / "episodes.jsonl")
    assert episode["turns"][0]["finish_reason"] == "length"
    summary = json.loads((tmp_path / "summary.json").read_text())[ENV]
    assert summary["replies_cut"] == summary["replies_cut_at_window"] >= 1
    assert "of them at the end of the model's context window" in capsys.readouterr().out


def test_a_context_strategy_counts_with_the_servers_tokenizer_within_its_window(tmp_path, capsys):
    # a server with vLLM's /tokenize (tests/data/real-model/vllm-probes.jsonl: count and
    # max_model_len): --max-context defaults to its window, the budget counts its tokens
    with ScriptedOpenAIServer(lambda body: "10", window=5000) as srv:
        assert cli(eval_args(srv, tmp_path, "-n", "1", "--context", "discard-75")) == 0
        paths = [r.path for r in srv.requests]
    manifest = json.loads((tmp_path / "run.json").read_text())
    assert manifest["settings"]["max_context"] == 5000
    assert manifest["info"]["token_counter"] == "vllm"
    assert paths.count("/tokenize") >= 2, "the detection, then the chat of every step"
    assert "--context token counts" not in capsys.readouterr().out


def test_without_a_server_tokenizer_the_heuristic_is_used_and_said(tmp_path, capsys):
    with ScriptedOpenAIServer(lambda body: "10") as srv:
        args = eval_args(srv, tmp_path, "-n", "1", "--context", "discard-75")
        assert cli(args) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "--context token counts: the heuristic estimate (" in out and "has no /tokenize" in out
    manifest = json.loads((tmp_path / "run.json").read_text())
    assert manifest["settings"]["max_context"] == 32_000
    assert manifest["info"]["token_counter"] == "heuristic"
