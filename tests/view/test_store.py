"""The store: lazy byte-offset indexes, compact columns, filters, search, files that grow."""

from __future__ import annotations

import json
import random
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from multidict import MultiDict

from gemkit.view import pages
from gemkit.view.catalog import discover
from gemkit.view.collection import Collection
from gemkit.view.files import ViewError
from gemkit.view.query import parse_query

ENVS = ("game:Sudoku-v0-easy", "game:Wordle-v0-easy", "math:Builtin-v0", "qa:Builtin-v0")


def episode(i: int, rng: random.Random) -> dict:
    """A small synthetic episode in the `gemkit eval` shape."""
    turns = rng.randint(1, 6)
    success = rng.random() < 0.4
    return {
        "key": f"k#{i}", "index": i, "env_id": ENVS[i % len(ENVS)], "seed": i, "error": None,
        "turns": [{"observation": f"obs {i}.{t}", "action": f"act {i}.{t}", "reward": 0.0,
                   "terminated": t == turns - 1, "truncated": False, "info": {}, "usage": {}}
                  for t in range(turns)],
        "total_reward": round(rng.random() * 2, 3), "success": success, "num_turns": turns,
        "tool_calls": rng.randint(0, 9), "tokens": {"prompt_tokens": 9, "completion_tokens": 1},
    }  # fmt: skip


def episodes(n: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    return [episode(i, rng) for i in range(n)]


def only(folder: Path) -> Collection:
    (coll,) = discover(folder).collections.values()
    return coll


def query(coll: Collection, **params: str | list[str]):
    items = MultiDict()
    for k, v in params.items():
        for x in v if isinstance(v, list) else [v]:
            items.add(k.replace("__", "."), x)
    q, problems = parse_query(coll.kind, items, coll.files if len(coll.sources) > 1 else ())
    assert problems == []
    return coll.query(q)


def test_the_index_is_built_on_first_use_and_only_once(tmp_path, write):
    write(tmp_path / "episodes.jsonl", episodes(50))
    coll = only(tmp_path)
    assert coll.parsed == 0 and len(coll.index) == 0, "discovery parses nothing"
    coll.refresh()
    assert coll.parsed == 50 and len(coll.index) == 50
    page = query(coll, f__env_id=ENVS[0], sort="reward", desc="1")
    query(coll, q="act 7.0")
    coll.refresh()
    assert coll.parsed == 50, "the index is not built again"
    assert coll.reads == 0, "a query reads no record; only the page's rows are read to show"
    raw, error = coll.record(page.rows[0])
    assert error is None and raw["env_id"] == ENVS[0] and coll.reads == 1


def test_lines_a_run_appends_are_indexed_from_where_the_index_stopped(tmp_path, write):
    path = write(tmp_path / "episodes.jsonl", episodes(10))
    coll = only(tmp_path)
    coll.refresh()
    more = [json.dumps(r) for r in episodes(16, seed=1)[10:]]
    with path.open("a") as f:
        f.write("\n".join(more[:5]) + "\n" + more[5][:40])  # a line still being written
    coll.refresh()
    assert len(coll.index) == 15 and coll.parsed == 15, "only the new complete lines"
    assert coll.sources[0].torn == 40, "the torn tail is noticed, not indexed"
    with path.open("a") as f:
        f.write(more[5][40:] + "\n")
    coll.refresh()
    assert len(coll.index) == 16 and coll.parsed == 16 and coll.sources[0].torn == 0
    raw, _ = coll.record(15)
    assert raw == json.loads(more[5])


def test_a_file_that_was_rewritten_shorter_is_indexed_again(tmp_path, write):
    path = write(tmp_path / "episodes.jsonl", episodes(10))
    coll = only(tmp_path)
    coll.refresh()
    write(path, episodes(3, seed=5))
    coll.refresh()
    assert len(coll.index) == 3
    assert coll.record(2)[0] == episodes(3, seed=5)[2]


def test_unreadable_lines_are_kept_in_place_with_their_line_number(tmp_path, write):
    good = episodes(3)
    path = tmp_path / "episodes.jsonl"
    lines = [json.dumps(good[0]), '{"env_id": "x", "turns": [', json.dumps(good[1]), "[1, 2]",
             "", json.dumps(good[2])]  # fmt: skip
    path.write_bytes(("\n".join(lines) + "\n").encode() + b'{"bad": "\xff"}\n')
    coll = only(tmp_path)
    coll.refresh()
    assert len(coll.index) == 6, "the blank line is not a record"
    errors = [coll.record(r)[1] for r in range(6)]
    assert errors[0] is None and errors[2] is None and errors[4] is None
    assert errors[1].startswith("line 2 is not valid JSON")
    assert errors[3] == "line 4 is JSON but not an object (a list)"
    assert errors[5] == "line 7 is not UTF-8 text"
    assert np.count_nonzero(coll.index.arrays()["bad"]) == 3
    assert query(coll, f__success="yes").matched + query(coll, f__success="no").matched == 3


def test_filters_sort_and_search_agree_with_a_direct_computation(tmp_path, write):
    recs = episodes(2_000, seed=3)
    write(tmp_path / "episodes.jsonl", recs)
    coll = only(tmp_path)
    coll.refresh()
    page = query(coll, f__env_id=[ENVS[1], ENVS[2]], f__success="yes", min__turns="2",
                 max__turns="4", sort="reward", desc="1", per="500")  # fmt: skip
    want = [i for i, r in enumerate(recs) if r["env_id"] in ENVS[1:3] and r["success"]
            and 2 <= r["num_turns"] <= 4]  # fmt: skip
    want.sort(key=lambda i: -recs[i]["total_reward"])  # stable, like the index
    assert page.matched == len(want) and page.rows == want[:500]
    hits = query(coll, q="ACT 17.0", per="500")  # any case; a literal, not a word
    assert hits.rows == [i for i, r in enumerate(recs) if "act 17.0" in json.dumps(r)]
    assert query(coll, q=".*").matched == 0, "a search is a literal, not a pattern"
    last = query(coll, page="999999")
    assert last.page == last.pages == 40 and len(last.rows) == 50


def test_search_finds_text_the_file_holds_json_escaped(tmp_path, write):
    recs = episodes(3)
    recs[1]["turns"][0]["action"] = 'say "hi" to the café\nnow'
    write(tmp_path / "episodes.jsonl", recs)  # json.dumps escapes quotes, é and the newline
    coll = only(tmp_path)
    coll.refresh()
    for text in ('say "hi"', "café", "CAFÉ NOW"[:4], "café\nnow"):
        assert query(coll, q=text).rows == [1], text


def test_one_hundred_thousand_records_page_from_disk_with_a_compact_index(tmp_path, write):
    n = 100_000
    path = write(tmp_path / "episodes.jsonl", episodes(n, seed=7))
    coll = only(tmp_path)
    coll.refresh()
    assert len(coll.index) == n and coll.parsed == n
    per_record = coll.index.nbytes / n
    assert per_record < 100, f"{per_record:.0f} bytes a record in the index"
    assert coll.index.nbytes < path.stat().st_size / 4, "the index is far smaller than the file"
    cat = discover(tmp_path)
    cat.collections[coll.key] = coll
    coll.index.arrays()  # the numpy views, built once per index size
    params = MultiDict([("c", coll.key), ("f.env_id", ENVS[3]), ("min.turns", "3"),
                        ("sort", "tool_calls"), ("desc", "1"), ("page", "7")])  # fmt: skip
    tracemalloc.start()
    html = pages.list_page(cat, coll, params)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert coll.reads == 50, "a page reads the 50 records it shows, no more"
    assert coll.parsed == n, "and parses nothing else"
    assert peak < 8 * 2**20, f"a page of 100,000 records peaked at {peak / 2**20:.1f} MB"
    assert "of <strong>" in html and "page 7 of" in html
    before = coll.reads
    hits = query(coll, q="act 99999.0")
    assert hits.rows == [99_999] and coll.reads == before


def test_discovery_groups_the_demo_by_kind_and_folder(demo):
    cat = discover(demo)
    keys = set(cat.collections)
    assert {"episodes", "synth-qa/qa", "synth-tasks/tasks", "toolworld/episodes"} <= keys
    qa = cat.collections["synth-qa/qa"]
    assert [(s.rel, s.role) for s in qa.sources] == [
        ("synth-qa/qa.jsonl", "kept"),
        ("synth-qa/rejected.jsonl", "rejected"),
    ]
    assert "synth-qa" in cat.corpora, "corpus.jsonl is used for the supporting facts"
    # `gemkit run --out DIR`: one episodes file for every game (no errors.jsonl: none failed)
    assert [s.rel for s in cat.collections["episodes"].sources] == ["episodes.jsonl"]


def test_documents_are_found_by_id_in_the_corpus(demo):
    cat = discover(demo)
    corpus = cat.corpora["synth-qa"]
    first = json.loads((demo / "synth-qa" / "corpus.jsonl").read_text().splitlines()[123])
    assert corpus.get(first["id"]) == first
    assert corpus.get("no-such-doc") is None


def test_a_folder_without_records_or_a_missing_path(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    write_other = tmp_path / "other.jsonl"
    write_other.write_text('{"a": 1}\n')
    cat = discover(tmp_path)
    assert cat.collections == {}
    assert any("other.jsonl: not episodes" in s for s in cat.skipped)
    with pytest.raises(ViewError, match="does not exist"):
        discover(tmp_path / "missing")
    with pytest.raises(ViewError, match="holds no gemkit records"):
        discover(write_other)


def test_a_runs_own_export_is_listed_once_with_its_jsonl_and_a_lone_export_is_listed(
    demo, tmp_path
):
    keys = set(discover(demo).collections)
    assert "synth-qa/qa" in keys and not any(k.startswith("synth-qa/dataset") for k in keys)
    import shutil

    shutil.copytree(demo / "synth-qa" / "dataset", tmp_path / "copied" / "dataset")
    assert set(discover(tmp_path).collections) == {"copied/dataset/qa"}, "an export alone shows"
