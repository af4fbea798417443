"""`--llm` mode end to end against the scripted OpenAI-protocol server."""

from __future__ import annotations

import json
import re

import pytest

from gemkit.synth.qa.llm import parse_reply, read_reply
from gemkit.synth.qa.run import RunConfig, read_records, run
from gemkit.testing import ScriptedOpenAIServer

CONFIG = {"world_size": 400, "seed": 4, "min_inject": 2, "min_fuzz": 1}
OPTION = re.compile(r'^(\d+)\. (\w+): replace "(.*?)" with "(.*?)"', re.M)


def rewriting_model(leak: bool = False):
    """A scripted model: takes option 1 and applies it; answers closed-book with a fixed name."""

    def reply(body: dict) -> str:
        system, user = body["messages"][0]["content"], body["messages"][-1]["content"]
        if "Reply with JSON" in system:
            question = user.split("\n")[0].removeprefix("Question: ")
            answer = re.search(r"^Answer \(do not reveal\): (.*)$", user, re.M)[1]
            n, _, before, after = OPTION.search(user).groups()
            new = question.replace(before, after)
            if leak:
                new = new[:-1] + f", like {answer}?"
            return json.dumps({"choice": int(n), "question": new})
        return "Nobody Knows"

    return reply


def test_llm_mode_writes_verified_records_with_model_questions_and_samples(tmp_path):
    model = rewriting_model()
    with ScriptedOpenAIServer(model) as srv:
        stats = run(
            tmp_path, RunConfig(n=2, llm_url=srv.base_url, model="m", **CONFIG), export=False
        )
        edit_requests = [
            r for r in srv.chat_requests if "Reply with JSON" in r.body["messages"][0]["content"]
        ]
    records = read_records(tmp_path)
    assert stats.kept == 2 and len(records) == 2
    assert edit_requests, "the model chose the edits"
    for r in records:
        samples = r["verification"]["difficulty"]["llm_closed_book"]["samples"]
        assert samples == ["Nobody Knows"] * 3
        assert r["verification"]["difficulty"]["closed_book_tries"] >= 3
        assert r["question"].endswith("?") and r["answer"] not in r["question"]


def test_llm_rewrites_that_leak_the_answer_are_rejected_at_quality(tmp_path):
    with ScriptedOpenAIServer(rewriting_model(leak=True)) as srv:
        stats = run(
            tmp_path,
            RunConfig(n=1, llm_url=srv.base_url, model="m", max_items_factor=2, **CONFIG),
            export=False,
        )
    assert stats.kept == 0
    assert stats.edit_rejections["quality"] > 0
    rejected = (tmp_path / "rejected.jsonl").read_text()
    assert "answer leaked" in rejected


def test_a_model_that_answers_closed_book_gets_the_record_rejected(tmp_path):
    model = rewriting_model()

    def knowing(body: dict) -> str:
        if "Reply with JSON" in body["messages"][0]["content"]:
            return model(body)
        return knowing.answer

    with ScriptedOpenAIServer(rewriting_model()) as srv:
        run(tmp_path / "a", RunConfig(n=1, llm_url=srv.base_url, model="m", **CONFIG), export=False)
    (first,) = read_records(tmp_path / "a")
    knowing.answer = first["answer"]
    with ScriptedOpenAIServer(knowing) as srv:
        stats = run(
            tmp_path / "b",
            RunConfig(n=1, llm_url=srv.base_url, model="m", max_items_factor=1, **CONFIG),
            export=False,
        )
    assert stats.rejected == {"difficulty": 1}
    assert read_records(tmp_path / "b") == []
    assert "the model answered it without tools" in (tmp_path / "b" / "rejected.jsonl").read_text()


def test_unusable_replies_are_refused_by_the_parser():
    assert parse_reply('{"choice": 2, "question": "Which city?"}', 3) == (1, "Which city?")
    assert parse_reply('sure! ```json\n{"choice": 1, "question": "Q?"}\n```', 1) == (0, "Q?")
    assert parse_reply('{"choice": 9, "question": "Q?"}', 3) is None
    assert parse_reply("no json here", 3) is None


@pytest.mark.parametrize(
    ("reply", "options", "why"),
    [  # replies of the real Qwen2.5-Coder-0.5B (tests/data/real-model/synth-qa-exchanges.jsonl)
        (
            'Mark: The book set in Feflesvik is "Songs of Drefeigrus" and it has 719 pages.',
            4,
            'it holds no JSON object {"choice": <option number>, "question": "..."}',
        ),
        ('{"choice": "INJECT", "question": "Which book has 334 pages?"}', 4,
         'its "choice" is "INJECT", not an option number'),
        ('{"choice": "2004", "question": "Which railway opened in 2004?"}', 4,
         "choice 2004 is not one of the options 1-4"),
        ('{"question": "Which city?"}', 3, 'its JSON has no "choice"'),
        ('{"choice": 1, "question": ""}', 3, 'its "question" is empty'),
        ('{"choice": 1 "question" x}', 3,
         'its JSON is invalid (Expecting \',\' delimiter at column 14) and no "choice" and '
         '"question" fields could be read from it'),
    ],
)  # fmt: skip
def test_an_unusable_reply_is_told_what_was_wrong(reply, options, why):
    assert read_reply(reply, options) == why


def drifting_model(body: dict) -> str:
    """Applies option 1, then asks for a city and names an entity the form never mentions:
    the drift a real small model showed ("In which city did Pouharn Propim work for ...?")."""
    system, user = body["messages"][0]["content"], body["messages"][-1]["content"]
    if "Reply with JSON" not in system:
        return "Nobody Knows"
    question = user.split("\n")[0].removeprefix("Question: ")
    n, _, before, after = OPTION.search(user).groups()
    rest = question.replace(before, after).split(" ", 2)[2]
    return json.dumps({"choice": int(n), "question": f"In which city did Pouharn Propim {rest}"})


def rejected_items(tmp_path, model, max_items_factor: int) -> list[dict]:
    """Run one record's worth of work items against `model`; check none is kept; the rejected."""
    with ScriptedOpenAIServer(model) as srv:
        config = RunConfig(
            n=1, llm_url=srv.base_url, model="m", max_items_factor=max_items_factor, **CONFIG
        )
        stats = run(tmp_path, config, export=False)
    assert stats.kept == 0 and read_records(tmp_path) == []
    return [json.loads(x) for x in (tmp_path / "rejected.jsonl").read_text().splitlines()]


def test_a_model_whose_text_drifts_from_the_form_gets_no_record_kept(tmp_path):
    rejected = rejected_items(tmp_path, drifting_model, 3)
    reasons = [e["reason"] for r in rejected for e in r.get("rejected_edits", ())]
    assert any("text and logical form disagree: the question asks for city" in x for x in reasons)
    drifted = [
        e for r in rejected for e in r.get("rejected_edits", ()) if "disagree" in e["reason"]
    ]
    assert all(e["question"].startswith("In which city did Pouharn Propim") for e in drifted)


def unchanged_model(body: dict) -> str:
    """A scripted model that picks option 1 and sends the question back as it was."""
    system, user = body["messages"][0]["content"], body["messages"][-1]["content"]
    if "Reply with JSON" in system:
        question = user.split("\n")[0].removeprefix("Question: ")
        return json.dumps({"choice": 1, "question": question})
    return "Nobody Knows"


def test_a_rewrite_that_keeps_the_replaced_phrase_is_rejected_with_what_it_wrote(tmp_path):
    rejected = rejected_items(tmp_path, unchanged_model, 2)
    kept = [
        e
        for r in rejected
        for e in r.get("rejected_edits", ())
        if "still states the replaced phrase" in e["reason"]
    ]
    assert kept
    for e in kept:
        # the reason names the phrase and its replacement; the model's text is kept with it
        assert e["after"] and repr(e["before"]) in e["reason"] and repr(e["after"]) in e["reason"]
        assert e["before"].lower() in e["question"].lower()


def test_a_reply_with_unescaped_quotes_is_still_read():
    text = '{"choice": 5, "question": "In which city is the film "A Winter in Tor" set?"}'
    assert parse_reply(text, 6) == (4, 'In which city is the film "A Winter in Tor" set?')
    assert parse_reply('{"choice": "2", "question": "Which city?"', 3) == (1, "Which city?")


class Log:
    """A log file stand-in for stderr (not a terminal) that says when a line was written."""

    def __init__(self) -> None:
        import threading

        self.text = ""
        self.wrote = threading.Event()

    def write(self, text: str) -> int:
        self.text += text
        if "synth qa:" in text:
            self.wrote.set()
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


def test_synth_qa_off_a_terminal_prints_progress_lines_while_the_model_is_slow(
    tmp_path, monkeypatch
):
    import sys

    import gemkit.cli.console as console_mod
    from gemkit.cli import main as cli

    log = Log()
    monkeypatch.setattr(sys, "stderr", log)
    monkeypatch.setattr(console_mod, "HEARTBEAT_S", 0.01)
    model = rewriting_model()

    def slow_model(body: dict) -> str:
        # the model answers only once the run has said it is alive: a slow server, as
        # llama.cpp on 2 cores, whose first reply took minutes with nothing printed
        assert log.wrote.wait(120), "no progress line while the model was busy"
        return model(body)

    with ScriptedOpenAIServer(slow_model) as srv:
        code = cli(["synth", "qa", "--llm", srv.base_url, "--model", "m", "-n", "1",
                    "--world-size", "400", "--seed", "4", "--min-inject", "2", "--min-fuzz", "1",
                    "--out", str(tmp_path)])  # fmt: skip
    assert code == 0
    beats = [x for x in log.text.splitlines() if x.startswith("synth qa:")]
    shape = (
        r"synth qa: (preparing .*|\d/1 kept, \d+ rejected after \d+ work items .*) \(\d+s elapsed\)"
    )
    assert beats and all(re.fullmatch(shape, x) for x in beats), beats[:3]


def test_no_progress_line_on_a_terminal(monkeypatch):
    import threading

    from rich.console import Console

    import gemkit.cli.console as console_mod

    def beating() -> bool:
        return any(t.name == "gemkit-heartbeat" for t in threading.enumerate())

    log = Log()
    with console_mod.heartbeat(lambda: "synth qa: x", every=60, stream=log):
        assert beating(), "off a terminal (pytest captures stdout) the heartbeat runs"
    monkeypatch.setattr(console_mod, "console", Console(force_terminal=True))
    with console_mod.heartbeat(lambda: "synth qa: x", every=0.001, stream=log):
        assert not beating(), "a terminal has the progress bar"
    assert log.text == ""
