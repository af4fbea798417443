"""Shared fixtures: the demo's output (with an eval whose model calls a tool), a viewer on it,
and a folder of hostile records."""

from __future__ import annotations

import http.client
import json
import shutil
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from gemkit.cli import main as cli
from gemkit.cli.view import check_task
from gemkit.testing import Reply, ScriptedOpenAIServer
from gemkit.view import ViewServer

BWRAP = shutil.which("bwrap")

#: what every hostile field holds: markup that would run if a page pasted it unescaped
XSS = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=2">'


def _call(code: str) -> str:
    return '<tool_call>{"name": "python", "arguments": {"code": "' + code + '"}}</tool_call>'


def tool_replies() -> list[Reply]:
    """A model that thinks, calls the python tool three times, then answers (per episode);
    written for the first question of `math:Builtin-v0` (400 pages at 18 a day)."""
    one = [
        Reply(content=_call("print(400 / 18)"), reasoning_content="400 pages at 18 a day."),
        Reply(
            content=_call("import math; print(math.ceil(400 / 18))"),
            reasoning_content="22.2 days: a part of a day is still a day.",
        ),
        Reply(content=_call("print(22 * 18, 23 * 18)")),
        Reply(
            content="<think>22 days leave 4 pages</think>He needs \\boxed{23} days.",
            reasoning_content="396 < 400 <= 414.",
        ),
    ]
    return one * 2


@pytest.fixture(scope="session")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`gemkit demo --out` (games, synth qa, synth tasks), plus `eval-tools/`: an eval whose
    scripted model calls the python tool and whose context a discard strategy trims."""
    out = tmp_path_factory.mktemp("view") / "demo-out"
    assert cli(["demo", "--out", str(out), "-n", "3"]) == 0
    if BWRAP:
        with ScriptedOpenAIServer(tool_replies()) as srv:
            code = cli(
                [
                    "eval", "math:Builtin-v0", "--base-url", srv.base_url, "--model", "m",
                    "-n", "2", "--concurrency", "1", "--tools", "python", "--tool-format",
                    "native", "--context", "discard-all", "--max-context", "150",
                    "--out", str(out / "eval-tools"),
                ]
            )  # fmt: skip
        assert code == 0
    return out


@pytest.fixture(scope="session")
def tool_episodes(demo: Path) -> Path:
    """The eval with tool calls (needs the python tool's sandbox)."""
    if not BWRAP:
        pytest.skip("the python tool's sandbox needs bubblewrap (bwrap) to record tool calls")
    return demo / "eval-tools"


@pytest.fixture(scope="session")
def viewer(demo: Path):
    """A viewer over the demo's output, with the task checker `gemkit view` uses."""
    with ViewServer(demo, task_check=check_task) as v:
        yield v


@dataclass
class Got:
    """One HTTP answer."""

    status: int
    headers: dict[str, str]
    text: str


def fetch(
    base: str,
    path: str,
    *,
    method: str = "GET",
    host: str | None = None,
    headers: dict[str, str] | None = None,
) -> Got:
    """One request to the viewer (Host header settable, unlike urllib's)."""
    parts = urlsplit(base)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    try:
        headers = dict(headers or {})
        if host is not None:
            headers["Host"] = host
        conn.request(method, path, headers=headers)
        resp = conn.getresponse()
        body = resp.read().decode("utf-8", "replace")
        return Got(resp.status, {k.lower(): v for k, v in resp.getheaders()}, body)
    finally:
        conn.close()


def write_jsonl(path: Path, records: list) -> Path:
    """Write records (dicts, or raw text lines) as JSONL."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [r if isinstance(r, str) else json.dumps(r) for r in records]
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


@pytest.fixture
def hostile(tmp_path: Path) -> Path:
    """A folder whose every text field a model or a record could write is markup."""
    root = tmp_path / "hostile"
    turn = {
        "observation": [
            {"role": "user", "content": XSS},
            {"role": "assistant", "content": None, "reasoning_content": XSS,
             "tool_calls": [{"id": XSS, "type": "function",
                             "function": {"name": XSS, "arguments": json.dumps({"x": XSS})}}]},
            {"role": "tool", "tool_call_id": XSS, "name": XSS, "content": XSS},
        ],
        "action": {"role": "assistant", "content": f"<think>{XSS}</think>{XSS}",
                   "reasoning_content": XSS},
        "reward": 1.0, "terminated": True, "truncated": False,
        "info": {
            XSS: XSS, "success": True, "tool_calls": 1,
            "tool_results": [{"tool_call_id": "c1", "name": XSS, "content": XSS, "is_error": True}],
            "parsed_calls": [{"id": "c1", "name": XSS, "arguments": {XSS: XSS}, "format": XSS,
                              "raw": XSS}],
            "context_edits": [{"strategy": XSS, "step": 1, "removed_messages": [0, 1],
                               "inserted_messages": [{"index": 0, "message": {"role": XSS,
                                                                              "content": XSS}}],
                               XSS: XSS}],
            "context_warnings": [{"strategy": XSS, "reason": XSS}],
        },
        "usage": {XSS: 1},
    }  # fmt: skip
    write_jsonl(
        root / "episodes.jsonl",
        [{"key": XSS, "index": 0, "env_id": XSS, "seed": XSS, "turns": [turn], "error": XSS,
          "success": True, "total_reward": 1.0, "num_turns": 1, "tool_calls": 1, XSS: XSS}],
    )  # fmt: skip
    (root / "summary.json").write_text(json.dumps({XSS: {XSS: XSS}}))
    qa = root / "qa"
    write_jsonl(
        qa / "qa.jsonl",
        [{"id": XSS, "question": XSS, "answer": XSS, "answer_aliases": [XSS],
          "supporting_facts": [{"doc_id": XSS, "text": XSS}],
          "edits": [{"op": XSS, "before": "Q", "after": XSS, "fact": {"doc_id": XSS, "text": XSS}}],
          "n_inject": 1, "n_fuzz": 0, "answer_type": XSS,
          "verification": {XSS: {"passed": True, "reason": XSS, XSS: XSS}},
          "seed": {"question": f"Q {XSS}", "answer": XSS}, "rejected_edits":
              [{"op": XSS, "before": XSS, "after": XSS, "stage": XSS, "reason": XSS}]}],
    )  # fmt: skip
    write_jsonl(qa / "rejected.jsonl", [{"id": "r", "k": 1, "rejected_stage": XSS, "reason": XSS,
                                        "question": XSS, "answer": XSS}])  # fmt: skip
    write_jsonl(qa / "corpus.jsonl", [{"id": XSS, "title": XSS, "text": f"a {XSS} b"}])
    (qa / "run.json").write_text(json.dumps({XSS: XSS}))
    tasks = root / "tasks"
    (tasks / "db").mkdir(parents=True)
    db = sqlite3.connect(tasks / "db" / "t.sqlite")
    name = '"' + XSS.replace('"', '""') + '"'  # a quoted SQL name may hold any text
    db.execute(f"CREATE TABLE {name} ({name} TEXT)")
    db.execute(f"INSERT INTO {name} VALUES (?)", (XSS,))
    db.commit()
    db.close()
    write_jsonl(
        tasks / "tasks.jsonl",
        [{"id": XSS, "category": XSS, "level": 1, "database": "db/t.sqlite",
          "tools": [{"name": XSS, "description": XSS, "parameters": {"properties": {XSS: {}}}}],
          "task": {"prompt": XSS, "answer_format": XSS, "spec": {XSS: XSS}},
          "constraints": [f"{XSS}: {XSS}"], "verifier": {"kind": "builtin", "ref": XSS},
          "solution": {"kind": "builtin", "ref": XSS}, "reference_answer": [{XSS: XSS}],
          "stats": {"valid_fraction": 0.5, "pass_at_k": {"k": 1, "passes": 1}},
          "history": [{"level": 1, "added": [XSS], "tools_added": [XSS]}]}],
    )  # fmt: skip
    write_jsonl(tasks / "rejected.jsonl", [{"id": XSS, "reason": XSS}])
    (tasks / "progress.log").write_text(f"2026-01-01T00:00:00 {XSS}: kept {XSS}\n")
    return root


@pytest.fixture
def write():
    """`write(path, records)`: records (dicts or raw lines) as a JSONL file."""
    return write_jsonl


@pytest.fixture
def get():
    """`get(base_url, path, method=, host=, headers=)`: one HTTP request to a viewer."""
    return fetch


@pytest.fixture
def xss() -> str:
    """The markup every hostile field holds."""
    return XSS
