"""LLM mode end to end against the scripted OpenAI-protocol server: the model's program is run
in the sandbox, its errors are fed back, a harder level is asked for, and the kept record plays
as a `toolworld:` env whose tools and verifier run in the sandbox."""

from __future__ import annotations

import json

import pytest

from gemkit.envs.toolworld.env import load_records, make_toolworld
from gemkit.synth.tasks.llm import run_program
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

LEVEL1 = BASE + '''
TASK = {"prompt": "Name the cheapest item.", "answer_format": "a JSON string",
        "constraints": ["cheapest: the item is the cheapest"]}

def solution(tools, task):
    return min(tools.list_items(), key=lambda n: tools.get_price(n))

def verify(db, answer):
    best = db.execute("SELECT name FROM items ORDER BY price LIMIT 1").fetchone()[0]
    return [] if answer == best else ["cheapest: " + str(answer) + " is not the cheapest"]
'''

CHEATING = LEVEL1.replace(
    "def solution(tools, task):\n",
    "def solution(tools, task):\n    import sqlite3\n",
)

LEVEL2 = BASE + '''
TASK = {"prompt": "Name the two cheapest items, cheapest first.", "answer_format": "a JSON list",
        "constraints": ["cheapest_two: the two cheapest items, cheapest first"]}

def solution(tools, task):
    return sorted(tools.list_items(), key=lambda n: tools.get_price(n))[:2]

def verify(db, answer):
    best = [r[0] for r in db.execute("SELECT name FROM items ORDER BY price LIMIT 2")]
    return [] if answer == best else ["cheapest_two: expected the two cheapest items"]
'''


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
    record = load_records(tmp_path)[0]
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
    obs, *_ = env.step('<tool_call>{"name": "get_price", "arguments": {"name": "cheese"}}</tool_call>')
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
    with pytest.raises(TaskSynthesisError, match="run the same command again to resume"):
        run_synthesis(config)
    assert not (tmp_path / "rejected.jsonl").exists()
