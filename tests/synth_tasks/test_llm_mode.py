"""LLM mode end to end against the scripted OpenAI-protocol server: the model's program is run
in the sandbox, its errors are fed back, a harder level is asked for, and the kept record plays
as a `toolworld:` env whose tools and verifier run in the sandbox."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gemkit.envs.toolworld.env import load_records, make_toolworld
from gemkit.synth.tasks.llm import extract_program, program_problems, run_program
from gemkit.synth.tasks.run import RunConfig, run_synthesis
from gemkit.testing.openai_server import ScriptedOpenAIServer

try:
    from gemkit.sandbox import Sandbox

    Sandbox(timeout=5).close()
    SANDBOX = None
except Exception as e:  # pragma: no cover - depends on the host
    SANDBOX = f"no sandbox backend on this host: {e}"

pytestmark = pytest.mark.skipif(SANDBOX is not None, reason=SANDBOX or "")

BASE = '''
import sqlite3

def build_database(conn):
    conn.execute("CREATE TABLE items (name TEXT, price REAL)")
    conn.executemany("INSERT INTO items VALUES (?, ?)",
                     [("apple", 1.5), ("bread", 2.5), ("cheese", 4.0), ("dates", 0.9)])

def list_items() -> list:
    """List every item."""
    return [r[0] for r in db.execute("SELECT name FROM items ORDER BY name")]

def get_price(name: str) -> float:
    """The price of one item."""
    return db.execute("SELECT price FROM items WHERE name = ?", (name,)).fetchone()[0]

TOOLS = [list_items, get_price]
'''

LEVEL1 = (
    BASE
    + """
TASK = {"prompt": "Name the cheapest item.", "answer_format": "a JSON string",
        "constraints": ["cheapest: the item is the cheapest"]}

def solution(tools, task):
    return min(tools.list_items(), key=lambda n: tools.get_price(n))

def verify(db, answer):
    best = db.execute("SELECT name FROM items ORDER BY price LIMIT 1").fetchone()[0]
    return [] if answer == best else ["cheapest: " + str(answer) + " is not the cheapest"]
"""
)

CHEATING = LEVEL1.replace(
    "def solution(tools, task):\n",
    "def solution(tools, task):\n    import sqlite3\n",
)

LEVEL2 = (
    BASE
    + """
TASK = {"prompt": "Name the two cheapest items, cheapest first.", "answer_format": "a JSON list",
        "constraints": ["cheapest_two: the two cheapest items, cheapest first"]}

def solution(tools, task):
    return sorted(tools.list_items(), key=lambda n: tools.get_price(n))[:2]

def verify(db, answer):
    best = [r[0] for r in db.execute("SELECT name FROM items ORDER BY price LIMIT 2")]
    return [] if answer == best else ["cheapest_two: expected the two cheapest items"]
"""
)


def fenced(code: str) -> str:
    return f"Here is the program:\n```python\n{code}\n```"


def test_a_program_whose_solution_reads_the_database_is_refused():
    result = run_program(CHEATING)
    assert not result["ok"]
    assert "imports are not allowed" in result["error"]
    assert run_program(LEVEL1)["ok"]


def test_llm_mode_repairs_hardens_records_and_plays(tmp_path):
    submit = {"name": "submit_result", "arguments": {"answer": ["dates", "apple"]}}
    replies = [
        fenced(CHEATING),
        fenced(LEVEL1),
        fenced(LEVEL2),
        f"<tool_call>{json.dumps(submit)}</tool_call>",
    ]
    with ScriptedOpenAIServer(replies) as server:
        config = RunConfig(
            category="shopping_basket",
            n=1,
            out=tmp_path,
            min_level=2,
            max_level=2,
            k=1,
            llm=server.base_url,
            model="scripted-model",
            export=False,
            max_attempts=1,
        )
        summary = run_synthesis(config)
        asked = [r.body["messages"] for r in server.chat_requests]
    assert len(summary.records) == 1
    record = load_records(tmp_path)[0].to_json()
    assert record["level"] == 2 and [h["level"] for h in record["history"]] == [1, 2]
    assert record["history"][0]["repairs"] == 1
    assert record["solution"]["kind"] == "code" and "def solution" in record["solution"]["code"]
    assert record["verifier"]["kind"] == "code"
    assert record["reference_answer"] == ["dates", "apple"]
    assert record["stats"]["pass_at_k"] == {"k": 1, "passes": 1}
    assert {t["name"] for t in record["tools"]} == {"list_items", "get_price", "submit_result"}
    assert (tmp_path / record["database"]).is_file()
    assert "imports are not allowed" in asked[1][-1]["content"]  # the error was fed back
    assert "harder" in asked[2][-1]["content"]

    env = make_toolworld("shopping_basket", path=tmp_path)
    obs, info = env.reset(seed=0)
    assert "two cheapest" in obs and {t["function"]["name"] for t in info["tools"]} >= {"get_price"}
    obs, *_ = env.step(
        '<tool_call>{"name": "get_price", "arguments": {"name": "cheese"}}</tool_call>'
    )
    assert "4.0" in obs
    _, reward, terminated, _, info = env.step(json.dumps(["apple", "dates"]))
    assert terminated and reward == 0.0
    assert info["violations"] == ["cheapest_two: expected the two cheapest items"]
    env.close()


def test_an_unreachable_endpoint_stops_the_run_with_a_resumable_message(tmp_path, monkeypatch):
    import gemkit.llm.client as client_mod
    from gemkit.synth.tasks import TaskSynthesisError

    original = client_mod.LLMClient.__init__

    def no_retries(self, *args, **kwargs):
        original(self, *args, **{**kwargs, "max_retries": 0, "timeout": 2.0})

    monkeypatch.setattr(client_mod.LLMClient, "__init__", no_retries)
    config = RunConfig(
        n=1, out=tmp_path, k=0, llm="http://127.0.0.1:9/v1", model="m", export=False,
        max_attempts=1,
    )  # fmt: skip
    with pytest.raises(TaskSynthesisError, match="run the same command with --resume"):
        run_synthesis(config)
    assert not (tmp_path / "rejected.jsonl").exists()


# -- a weak model's repair loop: what changed is fed back, repeats end the conversation ---------

FIXTURES = Path(__file__).resolve().parents[1] / "data" / "real-model"


def recorded_program() -> str:
    """The first program the real small model sent (solution as a dict, no TOOLS/TASK/verify)."""
    path = FIXTURES / "synth-tasks-exchanges.jsonl"
    for line in path.read_text().splitlines():
        row = json.loads(line)
        if row.get("request"):
            return row["response"]["choices"][0]["message"]["content"]
    raise AssertionError("no recorded program")


def llm_config(server, tmp_path, **kw) -> RunConfig:
    base = dict(
        category="shopping_basket", n=1, out=tmp_path, min_level=1, max_level=1, k=0,
        llm=server.base_url, model="m", export=False, max_attempts=1,
    )  # fmt: skip
    return RunConfig(**{**base, **kw})


def test_every_missing_definition_is_named_at_once():
    problems = program_problems(extract_program(recorded_program()))
    text = "\n".join(problems)
    assert "solution (line" in text and "is a dict, it must be: def solution(tools, task)" in text
    assert "missing TASK (it defines 'task': the name must be 'TASK')" in text
    assert "missing TOOLS" in text and "missing verify" in text
    assert run_program(extract_program(recorded_program()))["error"].startswith(
        "the program cannot run:\n- "
    )


def test_the_same_program_sent_again_is_not_run_and_ends_the_conversation(tmp_path):
    reply = recorded_program()
    with ScriptedOpenAIServer(lambda body: reply) as server:
        summary = run_synthesis(llm_config(server, tmp_path))
        asked = [r.body["messages"] for r in server.chat_requests]
    assert summary.records == []
    # reply 1 fails, reply 2 is told it is a repeat, reply 3 (the same again) ends it
    assert len(asked) == 3, "the old loop asked 1 + max_repairs times with the same error"
    assert asked[2][-1]["content"].startswith("This program is the same as your attempt 1")
    rejected = json.loads((tmp_path / "rejected.jsonl").read_text())
    assert rejected["reason"].endswith("the model sent a program it had already sent, again")
    log = (tmp_path / "progress.log").read_text()
    assert "attempt 1: failed: the program cannot run:" in log
    assert "attempt 2: the same program as before" in log
    assert "rejected: the model's code never verified" in log


def test_a_changed_program_with_the_same_error_is_told_so(tmp_path):
    first = fenced(LEVEL1.replace("def verify(db, answer):", "def check(db, answer):"))
    second = fenced(LEVEL1.replace("def verify(db, answer):", "def checker(db, answer):"))
    with ScriptedOpenAIServer([first, second, fenced(LEVEL1)]) as server:
        summary = run_synthesis(llm_config(server, tmp_path))
        asked = [r.body["messages"] for r in server.chat_requests]
    assert len(summary.records) == 1 and summary.records[0]["history"][0]["repairs"] == 2
    assert "missing verify" in asked[1][-1]["content"]
    assert "Compared with" not in asked[1][-1]["content"]
    told = asked[2][-1]["content"]
    assert "Compared with your previous program you changed 1 lines (+1, -1)" in told
    assert "the error is the same, so that change did not fix it" in told


def test_an_unchanged_program_does_not_pass_as_a_harder_level(tmp_path):
    with ScriptedOpenAIServer([fenced(LEVEL1)] * 3) as server:
        summary = run_synthesis(llm_config(server, tmp_path, min_level=2, max_level=2))
        asked = [r.body["messages"] for r in server.chat_requests]
    (record,) = summary.records
    assert record["level"] == 1, "the level-2 request got the level-1 program back"
    assert asked[2][-1]["content"].startswith("This program is the same as your attempt 1")
    assert "make the task harder (level 2)" in asked[2][-1]["content"]


def test_attempts_are_at_most_three_per_task_kept():
    assert RunConfig(n=1).attempts == 3 and RunConfig(n=5).attempts == 15
    assert RunConfig(n=5, max_attempts=2).attempts == 2


# -- slow and small servers: bounded replies, cut replies, refused conversations ----------------


def over_window_refusals() -> list[dict]:
    """What real vLLM and llama.cpp answered to a chat longer than the window (HTTP 400)."""
    rows = [
        json.loads(line)
        for path in sorted(FIXTURES.glob("*-probes.jsonl"))
        for line in path.read_text().splitlines()
    ]
    found = [r for r in rows if r["probe"] == "over_window"]
    assert found and all(r["status"] == 400 for r in found)
    return found


def test_every_request_is_bounded_and_holds_only_the_last_exchange(tmp_path):
    first = fenced(LEVEL1.replace("def verify(db, answer):", "def check(db, answer):"))
    second = fenced(LEVEL1.replace("def verify(db, answer):", "def checker(db, answer):"))
    with ScriptedOpenAIServer([first, second, fenced(LEVEL1)]) as server:
        summary = run_synthesis(llm_config(server, tmp_path, max_tokens=700))
        bodies = [r.body for r in server.chat_requests]
    assert len(summary.records) == 1
    assert [b["max_tokens"] for b in bodies] == [700, 700, 700]
    # system, the first ask, then the latest program and the answer to it: the conversation
    # does not grow with every repair (a 4,096-token window held four 800-token programs)
    assert [len(b["messages"]) for b in bodies] == [2, 4, 4]
    assert bodies[2]["messages"][2]["content"] == second
    assert "Compared with your previous program" in bodies[2]["messages"][3]["content"]


def test_a_reply_cut_at_max_tokens_is_answered_with_a_request_for_a_shorter_program(tmp_path):
    # the scripted server cuts a reply at max_tokens words, with finish_reason "length", as
    # real servers do: the program's closing fence never comes
    with ScriptedOpenAIServer(lambda body: fenced(LEVEL1)) as server:
        summary = run_synthesis(llm_config(server, tmp_path, max_tokens=40))
        asked = [r.body["messages"] for r in server.chat_requests]
    assert summary.records == []
    told = asked[1][-1]["content"]
    assert told.startswith("Your reply was cut off at the 40-token limit before the program ended")
    assert "no ```python block" not in told
    log = (tmp_path / "progress.log").read_text()
    assert "attempt 1: cut at 40 tokens" in log


@pytest.mark.parametrize(
    "refusal", over_window_refusals(), ids=lambda r: r["response"]["error"]["message"][:20]
)
def test_an_over_window_conversation_rejects_its_task_and_the_run_goes_on(tmp_path, refusal):
    from gemkit.testing import Fault

    reject = Fault("reject", status=refusal["status"], body=refusal["response"])
    with ScriptedOpenAIServer([fenced(LEVEL1)], faults={1: reject}) as server:
        config = llm_config(server, tmp_path, max_attempts=2)
        summary = run_synthesis(config)
        assert len(server.chat_requests) == 2
        (rejected,) = [
            json.loads(x) for x in (tmp_path / "rejected.jsonl").read_text().splitlines()
        ]
        assert "the model server refused the conversation" in rejected["reason"]
        assert "context window" in rejected["reason"]
        assert len(summary.records) == 1  # the next task was made
        # a resume settles nothing again: the refused task is not replayed
        again = run_synthesis(config)
        assert len(server.chat_requests) == 2 and again.new == 0


def test_tools_listed_as_names_is_named_before_the_sandbox_runs():
    program = LEVEL1.replace(
        "TOOLS = [list_items, get_price]", 'TOOLS = ["list_items", "get_price"]'
    )
    (problem,) = program_problems(program)
    assert problem == (
        "TOOLS (line 17) lists names as strings ('list_items', 'get_price'): list the tool "
        "functions themselves, without quotes: TOOLS = [list_items, get_price]"
    )


def test_a_program_error_shows_the_programs_lines_not_the_harness():
    # TOOLS built at run time (no static check can see it) and a tool that fails when called
    names = LEVEL1.replace(
        "TOOLS = [list_items, get_price]", 'TOOLS = [n for n in ("list_items",)]'
    )
    result = run_program(names)
    assert result["error"] == (
        "TypeError: TOOLS must list the tool functions themselves, TOOLS = [tool_a, tool_b]; "
        "item 1 is the str 'list_items'"
    )
    assert "trace" not in result, "the harness's own lines mean nothing to the model"
    broken = LEVEL1.replace(
        'return [r[0] for r in db.execute("SELECT name FROM items ORDER BY name")]',
        'return [r[0] for r in db.execute("SELECT nom FROM items")]',
    )
    result = run_program(broken)
    assert result["error"].startswith("OperationalError: no such column: nom")
    trace = result["trace"]
    assert trace.startswith("Where (your program's lines, innermost last):")
    assert (
        'line 11, in list_items: return [r[0] for r in db.execute("SELECT nom FROM items")]'
        in trace
    )
    assert "line 23, in solution: return min(tools.list_items()" in trace
    assert "<string>" not in trace and "restrict.py" not in trace and "harness" not in trace


def test_a_failed_attempt_keeps_its_whole_error_in_the_progress_log(tmp_path):
    reply = recorded_program()  # several problems: a multi-line error
    with ScriptedOpenAIServer(lambda body: reply) as server:
        run_synthesis(llm_config(server, tmp_path))
    log = (tmp_path / "progress.log").read_text().splitlines()
    at = next(
        i for i, line in enumerate(log) if "attempt 1: failed: the program cannot run:" in line
    )
    more = log[at + 1 : at + 5]
    assert more and all(x.startswith("    - ") for x in more[:3])
    assert any("missing verify" in x for x in more)
