"""`gemkit view` over the demo's output, through HTTP: pages, filters, records, bad input."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote

import pytest

from gemkit.cli import main as cli
from gemkit.view import ViewServer

BWRAP = shutil.which("bwrap")


def count(page: str) -> int:
    """The number of matching records a list page reports."""
    m = re.search(r"of <strong>([\d,]+)</strong> matching", page)
    assert m, "the list page shows its count"
    return int(m.group(1).replace(",", ""))


def test_the_overview_lists_every_collection_of_the_demo(viewer, get):
    page = get(viewer.url, "/")
    assert page.status == 200
    for key in ("episodes", "synth-qa/qa", "synth-tasks/tasks", "toolworld/episodes"):
        assert f"/list?c={quote(key, safe='')}" in page.text
    assert "synth-qa/dataset" not in page.text, "the run's export is its qa.jsonl: listed once"
    assert "18 records" in page.text, "6 games x 3 episodes"
    assert "summary.json" in page.text and "progress.log" in page.text


def test_a_filter_narrows_the_list_and_search_finds_text(viewer, get):
    everything = get(viewer.url, "/list?c=episodes").text
    assert count(everything) == 18
    sudoku = get(viewer.url, "/list?c=episodes&f.env_id=game:Sudoku-v0-easy").text
    assert count(sudoku) == 3 and "game:Wordle-v0-easy</td>" not in sudoku
    long = get(viewer.url, "/list?c=episodes&min.turns=6&sort=turns&desc=1").text
    assert 0 < count(long) < 18
    found = get(viewer.url, "/list?c=episodes&q=" + quote("WORDLE: I picked")).text
    assert count(found) == 3


def test_bad_filter_values_are_explained_on_the_page(viewer, get):
    page = get(viewer.url, "/list?c=episodes&min.reward=lots&sort=colour&page=x")
    assert page.status == 200
    text = html.unescape(page.text)
    assert "min reward must be a number, got 'lots'" in text
    assert "cannot sort by 'colour'" in text and "page must be a whole number" in text


def test_an_episode_page_shows_the_tool_call_its_result_and_the_context_edit(
    viewer, get, tool_episodes
):
    page = get(viewer.url, "/record?c=eval-tools/episodes&r=0").text
    assert '<span class="call-name">python</span>' in page
    assert html.escape('"code": "print(400 / 18)"', quote=True) in page
    assert '<pre class="result">22.22222222222222</pre>' in page
    assert "context edit: discard_all" in page and "removed: 2 message(s)" in page
    assert '<pre class="reasoning">400 pages at 18 a day.</pre>' in page


def test_a_qa_page_shows_edits_as_diffs_facts_with_documents_and_stages(viewer, get, demo):
    raw = json.loads((demo / "synth-qa" / "qa.jsonl").read_text().splitlines()[0])
    page = get(viewer.url, "/record?c=synth-qa/qa&r=0").text
    assert html.escape(raw["seed"]["question"], quote=True) in page
    first = raw["edits"][0]
    assert (
        f"<del>{html.escape(first['before'])}</del><ins>{html.escape(first['after'])}</ins>" in page
    )
    fact = raw["supporting_facts"][0]
    assert f"<mark>{html.escape(fact['text'], quote=True)}</mark>" in page, "fact in its document"
    for stage in ("quality", "difficulty", "uniqueness"):
        assert f"<h3>{stage} " in page


def test_a_task_page_shows_the_verifier_verdict_on_the_reference_answer(viewer, get, demo):
    kept = [json.loads(x) for x in (demo / "synth-tasks" / "tasks.jsonl").read_text().split("\n")
            if x]  # fmt: skip
    rows = get(viewer.url, "/list?c=synth-tasks/tasks&f.status=kept").text
    assert count(rows) == len(kept)
    page = get(viewer.url, "/record?c=synth-tasks/tasks&r=0").text
    assert 'The verifier on the reference answer: <span class="badge ok">passed</span>' in page
    assert "gemkit.envs.toolworld.trip_planning:TripPlanning.verify" in page
    assert page.count('<span class="badge ok">met</span>') >= len(kept[0]["constraints"])
    assert "def solve(" in page, "the reference solution's source"
    assert "get_all_cities" in page and "rows</span>" in page, "tools and the database"


def test_datasets_folders_are_browsable_like_their_jsonl(demo, tmp_path, get):
    shutil.copytree(demo / "synth-qa" / "dataset", tmp_path / "dataset")  # an export on its own
    lines = (demo / "synth-qa" / "qa.jsonl").read_text().splitlines()
    with ViewServer(tmp_path) as v:  # its train and test splits are one collection
        page = get(v.url, "/list?c=dataset/qa").text
        assert count(page) == len(lines)
        assert get(v.url, f"/record?c=dataset/qa&r={len(lines) - 1}").status == 200


def test_plots_are_inline_svg_for_each_kind(viewer, get):
    for key, title in (
        ("episodes", "success rate by env"),
        ("synth-qa/qa", "records by stage"),
        ("synth-tasks/tasks", "valid fraction by level"),
    ):
        page = get(viewer.url, f"/plots?c={quote(key)}").text
        assert title in page and page.count("<svg") >= 3


def test_raw_json_is_the_record(viewer, get, demo):
    raw = get(viewer.url, "/raw?c=synth-qa/qa&r=0")
    assert raw.headers["content-type"].startswith("application/json")
    first = json.loads((demo / "synth-qa" / "qa.jsonl").read_text().splitlines()[0])
    assert json.loads(raw.text) == first


def test_a_folder_that_is_not_a_run_says_so_on_the_page(tmp_path, get):
    (tmp_path / "notes.md").write_text("# not a run")
    with ViewServer(tmp_path) as v:
        page = get(v.url, "/")
    assert page.status == 200
    assert "holds no gemkit records" in page.text and "Traceback" not in page.text


def test_a_corrupt_line_is_a_message_on_the_page_and_the_rest_still_shows(tmp_path, get, write):
    write(tmp_path / "episodes.jsonl",
          [{"env_id": "a", "turns": [], "success": True}, '{"env_id": "b", "tur',
           {"env_id": "c", "turns": [], "success": False}])  # fmt: skip
    with ViewServer(tmp_path) as v:
        listing = get(v.url, "/list?c=episodes").text
        record = get(v.url, "/record?c=episodes&r=1").text
        missing = get(v.url, "/record?c=episodes&r=7")
    assert "1 unreadable line(s)" in listing and count(listing) == 3
    assert "line 2 is not valid JSON" in html.unescape(listing)
    assert "line 2 is not valid JSON" in html.unescape(record)
    assert missing.status == 404 and "has no record 7; it has 3" in html.unescape(missing.text)
    for text in (listing, record, missing.text):
        assert "Traceback" not in text


def test_a_torn_last_line_is_reported_not_shown(tmp_path, get, write):
    path = write(tmp_path / "episodes.jsonl", [{"env_id": "a", "turns": []}])
    with path.open("a") as f:
        f.write('{"env_id": "b", "tu')
    with ViewServer(tmp_path) as v:
        page = html.unescape(get(v.url, "/list?c=episodes").text)
    assert count(page) == 1 and "the last line is incomplete (19 bytes" in page


def test_a_single_jsonl_file_can_be_viewed(tmp_path, get, write):
    path = write(tmp_path / "run.jsonl", [{"env_id": "a", "turns": [], "num_turns": 0}])
    with ViewServer(path) as v:
        assert count(get(v.url, "/list?c=episodes").text) == 1


def test_gemkit_view_on_a_missing_path_is_one_line(tmp_path, capsys):
    assert cli(["view", str(tmp_path / "nope")]) == 2
    out = capsys.readouterr().out
    assert "error:" in out and "does not exist" in out and "Traceback" not in out


def test_gemkit_view_port_0_prints_the_address_it_serves(demo, tmp_path, get):
    log = tmp_path / "out.txt"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gemkit", "view", str(demo), "--port", "0", "--no-verify"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "COLUMNS": "200"},
        )
    try:
        address = None
        for _ in range(600):
            m = re.search(r"http://127\.0\.0\.1:(\d+)/", log.read_text())
            if m:
                address = m.group(0)
                break
            if proc.poll() is not None:
                break
            time.sleep(0.1)
        assert address, log.read_text()
        assert get(address, "/").status == 200
    finally:
        os.kill(proc.pid, signal.SIGINT)
        proc.wait(30)
    assert proc.returncode == 0 and "stopped" in log.read_text()


def test_importing_gemkit_does_not_import_the_viewer():
    code = "import sys, gemkit; print(sorted(m for m in sys.modules if m.startswith(('gemkit.view', 'aiohttp'))))"  # noqa: E501
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_cli_registers_view_without_importing_aiohttp():
    code = (
        "import sys; from gemkit.cli import build_parser; build_parser(); "
        "print('gemkit.view' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_static_files_are_the_vendored_ones(viewer, get):
    css = get(viewer.url, "/static/viewer.css")
    js = get(viewer.url, "/static/viewer.js")
    assert css.status == 200 and css.headers["content-type"].startswith("text/css")
    assert js.status == 200 and "addEventListener" in js.text
    here = Path(__file__).resolve().parents[2] / "gemkit" / "view" / "data"
    assert css.text == (here / "viewer.css").read_text()


PROGRAM = '''
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
TASK = {"prompt": "Name the cheapest item.", "answer_format": "a JSON string",
        "constraints": ["cheapest: the item is the cheapest"]}

def solution(tools, task):
    return min(tools.list_items(), key=lambda n: tools.get_price(n))

def verify(db, answer):
    best = db.execute("SELECT name FROM items ORDER BY price LIMIT 1").fetchone()[0]
    return [] if answer == best else ["cheapest: " + str(answer) + " is not the cheapest"]
'''


def test_a_model_written_verifier_gives_its_verdict_from_the_sandbox(tmp_path, get):
    from gemkit.cli.view import check_task
    from gemkit.synth.tasks.run import RunConfig, run_synthesis
    from gemkit.testing import ScriptedOpenAIServer

    if BWRAP is None:
        pytest.skip("a model-written verifier runs in the sandbox, which needs bubblewrap")
    submit = {"name": "submit_result", "arguments": {"answer": "dates"}}
    replies = [f"```python\n{PROGRAM}\n```", f"<tool_call>{json.dumps(submit)}</tool_call>"]
    with ScriptedOpenAIServer(replies) as server:
        config = RunConfig(category="shopping_basket", n=1, out=tmp_path, min_level=1,
                           max_level=1, k=1, llm=server.base_url, model="m", export=False,
                           max_attempts=1)  # fmt: skip
        assert len(run_synthesis(config).records) == 1
    tasks = tmp_path / "tasks.jsonl"
    (record,) = [json.loads(x) for x in tasks.read_text().splitlines()]
    assert record["verifier"]["kind"] == "code" and record["reference_answer"] == "dates"
    forged = {**record, "id": "forged", "reference_answer": "cheese"}
    tasks.write_text(json.dumps(record) + "\n" + json.dumps(forged) + "\n")
    with ViewServer(tmp_path, task_check=check_task) as v:
        good = html.unescape(get(v.url, "/record?c=tasks&r=0").text)
        bad = html.unescape(get(v.url, "/record?c=tasks&r=1").text)
    assert 'reference answer: <span class="badge ok">passed</span>' in good
    assert "the record's own verifier code, run in the sandbox" in good
    assert "def verify(db, answer)" in good, "the program's source is shown"
    assert 'reference answer: <span class="badge bad">failed</span>' in bad
    assert "cheapest: cheese is not the cheapest" in bad
