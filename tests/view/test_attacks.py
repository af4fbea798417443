"""Attacks on the viewer: model-written markup, paths in requests and records, writes, other
hosts, and records built to break a page. Each test states the guarantee it proves."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import sqlite3
import threading
import time
from pathlib import Path
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gemkit.cli.view import check_task
from gemkit.view import ViewServer, catalog, collection, pages, sources
from gemkit.view import files as view_files
from gemkit.view.catalog import discover

PAYLOAD_PARTS = ("<script>window.__pwned", "<img src=x onerror", 'onerror="window')


def links(text: str) -> list[str]:
    """The local links of a page."""
    return sorted({html.unescape(h) for h in re.findall(r'href="(/[^"]*)"', text)})


def crawl(get, base: str, limit: int = 400) -> dict[str, object]:
    """Every page reachable from the overview (breadth first, up to `limit`)."""
    seen: dict[str, object] = {}
    todo = ["/"]
    while todo and len(seen) < limit:
        path = todo.pop(0)
        if path in seen or path.startswith("/static/"):
            continue
        got = get(base, path)
        seen[path] = got
        if got.headers.get("content-type", "").startswith("text/html"):
            todo += [p for p in links(got.text) if p not in seen]
    return seen


def test_no_page_carries_model_written_markup_unescaped(hostile, get, xss):
    """Every field a model or a record writes reaches the page as text, never as markup."""
    with ViewServer(hostile, task_check=check_task) as v:
        got = crawl(get, v.url)
    kinds = {p.split("?")[0] for p in got}
    assert {"/", "/list", "/record", "/plots", "/raw"} <= kinds
    records = [p for p in got if p.startswith("/record")]
    assert len(records) >= 4, "the episode, both QA records and the kept and rejected tasks"
    for path, page in got.items():
        assert page.status == 200, (path, page.status)
        assert "default-src 'none'" in page.headers["content-security-policy"]
        assert page.headers["x-content-type-options"] == "nosniff"
        if page.headers["content-type"].startswith("text/html"):
            for part in PAYLOAD_PARTS:
                assert part not in page.text, (path, part)
    episode = next(page.text for p, page in got.items() if "c=episodes" in p and "/record" in p)
    assert html.escape(xss, quote=True) in episode, "the payload is shown, as text"
    assert '<pre class="result">' + html.escape(xss, quote=True) in episode


@pytest.mark.parametrize(
    "path",
    [
        "/static/../server.py",
        "/static/..%2fserver.py",
        "/static/%2e%2e%2fcatalog.py",
        "/static/viewer.css%00.py",
        "/static//etc/passwd",
        "/static/%2Fetc%2Fpasswd",
        "/list?c=../../../../etc/passwd",
        "/list?c=%2Fetc%2Fpasswd",
        "/list?c=..",
        "/raw?c=..%2F..%2Fetc%2Fpasswd&r=0",
        "/record?c=episodes&r=-1",
        "/record?c=episodes&r=1e3",
        "/record?c=episodes&r=99999999999999999999999",
        "/raw?c=episodes&r=/etc/passwd",
        "/plots?c=/etc",
        "/../../etc/passwd",
        "/%2e%2e/%2e%2e/etc/passwd",
    ],
)
def test_a_request_cannot_name_a_file(viewer, get, path):
    """Nothing in a URL is a path: unknown collections, rows and static names are 404s."""
    got = get(viewer.url, path)
    assert got.status in (400, 404), got.status
    assert "root:x:0:0" not in got.text and "import " not in got.text
    assert "Traceback" not in got.text and "<h1>4" in got.text


def test_links_that_lead_out_of_the_folder_are_not_followed(tmp_path, get, write):
    """A symlinked file or folder under PATH that points elsewhere is neither listed nor read."""
    outside = tmp_path / "outside"
    secret = write(outside / "episodes.jsonl", [{"env_id": "SECRET-ENV", "turns": []}])
    root = tmp_path / "root"
    write(root / "episodes.jsonl", [{"env_id": "mine", "turns": []}])
    (root / "episodes-linked.jsonl").symlink_to(secret)
    (root / "linked-dir").symlink_to(outside, target_is_directory=True)
    with ViewServer(root) as v:
        pages_ = crawl(get, v.url)
    assert all("SECRET-ENV" not in p.text for p in pages_.values())
    overview = pages_["/"].text
    assert "episodes-linked.jsonl: a link to a file outside the folder" in overview
    assert "linked-dir" not in overview


def test_a_file_swapped_for_a_link_after_discovery_is_not_followed(tmp_path, get, write):
    """A record file replaced by a link once the viewer has indexed it is not read through."""
    secret = write(tmp_path / "outside" / "s.jsonl", [{"env_id": "SECRET-ENV", "turns": []}])
    root = tmp_path / "root"
    path = write(root / "episodes.jsonl", [{"env_id": "mine", "turns": []}])
    with ViewServer(root) as v:
        assert "mine" in get(v.url, "/record?c=episodes&r=0").text
        path.unlink()
        path.symlink_to(secret)
        record = get(v.url, "/record?c=episodes&r=0")
        listing = get(v.url, "/list?c=episodes")
    for page in (record, listing):
        assert "SECRET-ENV" not in page.text
    assert "episodes.jsonl was replaced by a link; it is not followed" in html.unescape(
        listing.text
    )


def test_a_task_record_cannot_make_the_viewer_open_a_database_outside(tmp_path, get, write):
    """A record's `database` is opened only if it resolves under PATH."""
    secret = sqlite3.connect(tmp_path / "secret.sqlite")
    secret.execute("CREATE TABLE secret_table (password TEXT)")
    secret.commit()
    secret.close()
    root = tmp_path / "run"
    base = {
        "category": "trip_planning",
        "level": 1,
        "tools": [],
        "constraints": [],
        "task": {"prompt": "p", "answer_format": "f"},
        "verifier": {},
        "solution": {},
    }
    write(root / "tasks.jsonl", [
        {**base, "id": "rel", "database": "../secret.sqlite"},
        {**base, "id": "abs", "database": str(tmp_path / "secret.sqlite")},
        {**base, "id": "uri", "database": "file:../secret.sqlite?mode=rw"},
    ])  # fmt: skip
    seen: list = []

    def spy(record, database):
        seen.append(database)
        return check_task(record, database)

    with ViewServer(root, task_check=spy) as v:
        bodies = [get(v.url, f"/record?c=tasks&r={r}").text for r in range(3)]
    for body in bodies[:2]:
        assert "leads outside the viewer&#x27;s folder; not opened" in body
    assert all("secret_table" not in b and "password" not in b for b in bodies)
    assert seen == [None, None, None], "the verifier never got a path outside PATH"


def test_a_record_cannot_choose_which_verifier_code_runs(tmp_path, get, demo, monkeypatch):
    """The viewer runs the registered category's verifier, whatever `ref` a record names:
    a module the record names is never imported, even one on the import path."""
    plant = tmp_path / "plant"
    plant.mkdir()
    marker = tmp_path / "imported"
    (plant / "gemkit_view_plant.py").write_text(
        f"from pathlib import Path\nPath({str(marker)!r}).write_text('ran')\n"
        "def verify(*a, **k):\n    return True\n"
    )
    monkeypatch.syspath_prepend(str(plant))
    run = tmp_path / "run"
    shutil.copytree(demo / "synth-tasks", run)
    tasks = run / "tasks.jsonl"
    recs = [json.loads(x) for x in tasks.read_text().splitlines()]
    recs[0]["verifier"] = {"kind": "builtin", "ref": "gemkit_view_plant:verify"}
    recs[1]["category"] = "no_such_category"
    tasks.write_text("".join(json.dumps(r) + "\n" for r in recs))
    with ViewServer(run, task_check=check_task) as v:
        forged = html.unescape(get(v.url, "/record?c=tasks&r=0").text)
        unknown = html.unescape(get(v.url, "/record?c=tasks&r=1").text)
    assert not marker.exists(), "the module the record named was imported"
    assert "the record names the verifier 'gemkit_view_plant:verify'; the viewer ran" in forged
    assert 'The verifier on the reference answer: <span class="badge ok">passed</span>' in forged
    assert "unknown task category 'no_such_category'" in unknown


def test_a_dataset_state_file_cannot_name_a_file_outside_its_folder(tmp_path, get, demo):
    """`state.json` names the Arrow files; one outside the dataset folder is refused."""
    ds = tmp_path / "run" / "dataset"
    shutil.copytree(demo / "synth-qa" / "dataset" / "train", ds)  # one split: a plain folder
    shutil.copy(ds / "data-00000-of-00001.arrow", tmp_path / "secret.arrow")
    state = json.loads((ds / "state.json").read_text())
    state["_data_files"] = [{"filename": "../../secret.arrow"}]
    (ds / "state.json").write_text(json.dumps(state))
    with ViewServer(tmp_path / "run") as v:
        page = html.unescape(get(v.url, "/").text)
        listing = get(v.url, "/list?c=dataset/qa").text
    assert "names '../../secret.arrow', not a file in its folder" in page
    assert "Which" not in listing, "no question of the secret file is shown"


@pytest.mark.parametrize("name", ["data-00000-of-00001.arrow", "state.json", "dataset_info.json"])
def test_a_dataset_file_swapped_for_a_link_to_a_file_outside_is_not_read(tmp_path, get, demo, name):
    """An Arrow, state or info file of a datasets folder that is a link (here, to a copy of
    itself outside PATH, so only the link check can refuse it) is not read through."""
    ds = tmp_path / "run" / "dataset"
    shutil.copytree(demo / "synth-qa" / "dataset" / "train", ds)  # one split: a plain folder
    outside = tmp_path / f"secret-{name}"
    shutil.move(ds / name, outside)
    (ds / name).symlink_to(outside)
    with ViewServer(tmp_path / "run") as v:
        page = html.unescape(get(v.url, "/").text)
        listing = get(v.url, "/list?c=dataset/qa").text
        record = get(v.url, "/record?c=dataset/qa&r=0").text
    assert "is a link or not a regular file" in page, page
    assert "Which" not in listing and "Which" not in record, "no question is read through"


def _discover_within(root: Path, seconds: float = 30.0) -> catalog.Catalog:
    """`discover(root)` on a thread, so that a hang fails the test instead of the run."""
    got: list = []
    t = threading.Thread(target=lambda: got.append(discover(root)), daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), "discovery hung (a FIFO was opened)"
    assert got, "discovery raised"
    return got[0]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_named_like_a_record_or_side_file_does_not_hang_the_viewer(tmp_path, get, write):
    """A FIFO blocks whoever opens it until a writer comes: discovery and every page skip it
    (a FIFO named *.jsonl, and a FIFO progress.log next to records)."""
    root = tmp_path / "run"
    write(root / "episodes.jsonl", [{"env_id": "mine", "turns": []}])
    os.mkfifo(root / "episodes-2.jsonl")
    os.mkfifo(root / "progress.log")
    os.mkfifo(root / "qa-sniffed.jsonl")
    cat = _discover_within(root)
    assert cat.collection("episodes").files == ["episodes.jsonl"]
    assert cat.side.get("", []) == []
    assert "episodes-2.jsonl: not a regular file; not read" in cat.skipped
    assert "progress.log: not a regular file; not read" in cat.skipped
    out: dict = {}

    def browse() -> None:
        with ViewServer(root) as v:
            out["overview"] = html.unescape(get(v.url, "/").text)
            out["plots"] = get(v.url, "/plots?c=episodes").status
            (root / "progress.log").unlink()
            (root / "progress.log").write_text("ok\n")
            out["again"] = get(v.url, "/").status
            (root / "progress.log").unlink()
            os.mkfifo(root / "progress.log")  # a FIFO put in a side file's place later
            out["swapped"] = html.unescape(get(v.url, "/").text)
            out["plots2"] = get(v.url, "/plots?c=episodes").status

    t = threading.Thread(target=browse, daemon=True)
    t.start()
    t.join(60)
    assert not t.is_alive(), "a page hung on a FIFO"
    assert "mine" in out["overview"] or "episodes" in out["overview"]
    assert out["plots"] == out["again"] == out["plots2"] == 200
    assert "progress.log is not a regular file; it is not read" in out["swapped"]


def test_a_record_file_swapped_for_a_fifo_after_discovery_is_not_opened(tmp_path, get, write):
    """A record file replaced by a FIFO once indexed is refused, not waited on."""
    root = tmp_path / "run"
    path = write(root / "episodes.jsonl", [{"env_id": "mine", "turns": []}])
    out: dict = {}

    def browse() -> None:
        with ViewServer(root) as v:
            get(v.url, "/list?c=episodes")
            path.unlink()
            os.mkfifo(path)
            out["record"] = get(v.url, "/record?c=episodes&r=0").status
            out["overview"] = html.unescape(get(v.url, "/").text)

    t = threading.Thread(target=browse, daemon=True)
    t.start()
    t.join(60)
    assert not t.is_alive(), "a page hung on a FIFO"
    assert out["record"] == 404
    assert "episodes.jsonl: not a regular file; not read" in out["overview"]


def test_a_long_log_beside_the_records_shows_its_last_lines(tmp_path, get, write):
    """progress.log over 1 MB is not hidden: the page reads and shows only its tail."""
    root = tmp_path / "run"
    write(root / "episodes.jsonl", [{"env_id": "mine", "turns": []}])
    lines = [f"2026-01-01T00:00:00 line {i:07d}: kept" for i in range(60_000)]
    (root / "progress.log").write_text("\n".join(lines) + "\n")
    assert (root / "progress.log").stat().st_size > 2**20
    with ViewServer(root) as v:
        page = get(v.url, "/").text
        plots = get(v.url, "/plots?c=episodes").status
    assert "over 1 MB" not in page
    assert "line 0059999" in page and "line 0000000" not in page
    assert plots == 200


def snapshot(root: Path) -> dict[str, tuple[int, int, bytes]]:
    out = {}
    for dirpath, _, files in os.walk(root):
        for f in files:
            p = Path(dirpath) / f
            st_ = p.stat()
            out[str(p)] = (st_.st_mtime_ns, st_.st_size, p.read_bytes())
    return out


def test_the_viewer_never_writes_not_even_to_cut_a_torn_line(tmp_path, get, demo, hostile):
    """Browsing every page changes no byte, no time stamp and adds no file under PATH
    (`gemkit eval --resume` cuts a torn last line; the viewer must not)."""
    root = tmp_path / "all"
    shutil.copytree(demo, root / "demo", symlinks=True)
    shutil.copytree(hostile, root / "hostile", symlinks=True)
    with (root / "demo" / "eval-tools" / "episodes.jsonl").open("a") as f:
        f.write('{"key": "torn", "env_')
    before = snapshot(root)
    with ViewServer(root, task_check=check_task) as v:
        got = crawl(get, v.url, limit=600)
    assert len(got) > 60
    assert snapshot(root) == before


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH"])
def test_only_get_is_answered(viewer, get, method):
    """The viewer is read-only: any other method is 405."""
    got = get(viewer.url, "/list?c=episodes", method=method)
    assert got.status == 405 and "read-only" in got.text


@pytest.mark.parametrize(
    ("host", "status"),
    [
        ("evil.example", 403),
        ("evil.example:8765", 403),
        ("127.0.0.1.evil.example", 403),
        ("", 403),
        ("localhost", 200),
        ("127.0.0.1:1234", 200),
        ("[::1]:1234", 200),
    ],
)
def test_a_request_for_another_host_name_is_refused(viewer, get, host, status):
    """Bound to loopback, the viewer answers only loopback Host names (DNS rebinding)."""
    assert get(viewer.url, "/list?c=episodes", host=host).status == status


@pytest.mark.parametrize(
    "headers",
    [
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site"},
        {"Origin": "https://evil.example"},
        {"Origin": "null"},
        {"Origin": "http://127.0.0.1:1"},
    ],
)
@pytest.mark.parametrize("path", ["/record?c=synth-tasks/tasks&r=0", "/list?c=episodes&q=x"])
def test_a_request_another_site_makes_is_refused(viewer, get, headers, path):
    """An `<img src=http://127.0.0.1:PORT/record?...>` on a web page passes the Host check;
    the browser marks it cross-site, and the viewer refuses it (no verifier runs, no search)."""
    got = get(viewer.url, path, headers=headers)
    assert got.status == 403, got.status
    assert "answers no web page of another" in html.unescape(got.text)


def test_a_request_of_the_viewer_own_pages_is_answered(viewer, get):
    """No fetch metadata (curl, an old browser), a typed address, a link of its own pages."""
    own = viewer.url.rstrip("/")
    for headers in (
        {},
        {"Sec-Fetch-Site": "none"},
        {"Sec-Fetch-Site": "same-origin", "Origin": own},
        {"Origin": own},
    ):
        assert get(viewer.url, "/list?c=episodes", headers=headers).status == 200, headers


def test_verifier_checks_from_many_threads_run_a_few_at_a_time(tmp_path, demo, monkeypatch):
    """Pages are built on worker threads: the check cache is guarded, and at most
    CHECK_SLOTS verifiers run at once."""
    from gemkit.view.server import CHECK_SLOTS, Viewer

    running, peak = [0], [0]
    lock = threading.Lock()

    def slow(record, database):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.05)
        with lock:
            running[0] -= 1
        return {"note": "ok"}

    v = Viewer(demo / "synth-tasks", task_check=slow)
    coll = v.catalog.collection("tasks")
    coll.refresh()
    n = min(len(coll.index), 12)
    threads = [threading.Thread(target=v.check_task, args=("tasks", r % n)) for r in range(24)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert peak[0] <= CHECK_SLOTS
    results = [v.check_task("tasks", r) for r in range(n)]
    assert any(results) and all(r == {"note": "ok"} for r in results if r is not None), results


def test_a_huge_line_is_listed_not_parsed(tmp_path, get, write, monkeypatch):
    """A record over the size limit costs no parse: it is listed with its size."""
    for module in (view_files, sources, collection):  # each reads the limit it imported
        monkeypatch.setattr(module, "MAX_RECORD_BYTES", 4096)
    write(
        tmp_path / "episodes.jsonl",
        [{"env_id": "small", "turns": []}, {"env_id": "big", "turns": [], "pad": "x" * 20_000}],
    )
    with ViewServer(tmp_path) as v:
        listing = html.unescape(get(v.url, "/list?c=episodes").text)
        record = html.unescape(get(v.url, "/record?c=episodes&r=1").text)
        raw = get(v.url, "/raw?c=episodes&r=1")
    assert "line 2 is 0 MB, over the viewer's 0 MB limit" in listing
    assert "over the viewer's 0 MB limit" in record and raw.status == 404


def test_nesting_deeper_than_json_allows_is_an_unreadable_line(tmp_path, get, write):
    """A line nested past the parser's limit is a message; one just under it still shows."""
    deep = {"env_id": "deep", "turns": [{"action": "a", "info": {"x": [[[[[[[[[[1]]]]]]]]]]}}]}
    nested: object = "bottom"
    for _ in range(400):
        nested = [nested]
    deep["turns"][0]["info"]["y"] = nested
    write(tmp_path / "episodes.jsonl", ["[" * 200_000, deep])
    with ViewServer(tmp_path) as v:
        listing = html.unescape(get(v.url, "/list?c=episodes").text)
        page = get(v.url, "/record?c=episodes&r=1")
    assert "line 1 is not valid JSON (RecursionError)" in listing
    assert page.status == 200 and "<h1>deep " in page.text


def test_text_that_is_not_valid_unicode_does_not_break_a_page(tmp_path, get, write):
    """A lone surrogate (valid JSON, invalid UTF-8) is replaced, not a 500."""
    write(
        tmp_path / "episodes.jsonl",
        ['{"env_id": "s\\ud800", "turns": [{"action": "x\\udfff", "observation": "o"}]}'],
    )
    with ViewServer(tmp_path) as v:
        for path in ("/", "/list?c=episodes", "/record?c=episodes&r=0", "/plots?c=episodes"):
            assert get(v.url, path).status == 200, path


def test_a_page_shows_at_most_500_records_and_cuts_long_text(tmp_path, get, write):
    """`per` is capped; one huge text is cut at the page's limit with a note."""
    write(tmp_path / "episodes.jsonl",
          [{"env_id": "e", "turns": [{"action": "a" * 300_000}]}] * 3
          + [{"env_id": "e", "turns": []}] * 700)  # fmt: skip
    with ViewServer(tmp_path) as v:
        listing = get(v.url, "/list?c=episodes&per=1000000000").text
        record = get(v.url, "/record?c=episodes&r=0").text
    assert listing.count('<td class="where">') == 500
    assert "250,000 more characters" in record and len(record) < 200_000


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6),
    lambda kids: (
        st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=5), kids, max_size=3)
    ),
    max_leaves=20,
)
fields = [
    "env_id",
    "turns",
    "success",
    "total_reward",
    "num_turns",
    "tool_calls",
    "error",
    "question",
    "answer",
    "edits",
    "verification",
    "seed",
    "supporting_facts",
    "rejected_stage",
    "task",
    "tools",
    "stats",
    "level",
    "category",
    "history",
    "reference_answer",
    "database",
    "constraints",
    "observation",
    "action",
    "info",
]
turn_fields = ["observation", "action", "info", "reward", "role", "content", "tool_calls",
               "parsed_calls", "tool_results", "context_edits", "removed_messages"]  # fmt: skip
hostile_records = st.dictionaries(
    st.sampled_from(fields),
    json_values | st.lists(st.dictionaries(st.sampled_from(turn_fields), json_values, max_size=6),
                           max_size=3),
    max_size=12,
)  # fmt: skip


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(records=st.lists(hostile_records, min_size=1, max_size=4))
def test_no_record_breaks_a_page(tmp_path_factory, records):
    """Any JSON object, in any file name, renders every page without an exception."""
    root = tmp_path_factory.mktemp("any")
    for name in ("episodes.jsonl", "qa.jsonl", "tasks.jsonl"):
        (root / name).write_text("".join(json.dumps(r) + "\n" for r in records))
    cat = discover(root)
    pages.overview(cat)
    for coll in cat.collections.values():
        pages.list_page(cat, coll, {"c": coll.key, "sort": "reward"})
        pages.plots_page(cat, coll)
        for row in range(len(coll.index)):
            pages.record_page(cat, coll, row, {"c": coll.key})


def test_search_text_is_a_literal_not_a_pattern(viewer, get):
    """Regex syntax in the search box matches only itself."""
    for q in (".*", "(a+)+$", "[a-z]+", "\\d{3}"):
        page = get(viewer.url, "/list?c=episodes&q=" + quote(q)).text
        assert "of <strong>0</strong> matching" in page, q
