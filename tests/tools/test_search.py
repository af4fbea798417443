"""Local search: the FTS5 index (build, reuse, ranking, hostile queries), the HTTP server, tools."""

from __future__ import annotations

import asyncio
import json
import os
import socket
from pathlib import Path

import aiohttp
import pytest

from gemkit.errors import GemkitError
from gemkit.search import SearchIndex, SearchIndexError, fts_query
from gemkit.search.client import SearchClient
from gemkit.search.server import start_server
from gemkit.tools.search import AccessArgs, AccessTool, SearchArgs, SearchTool, search_tools

DOCS = [
    {
        "id": "paris",
        "title": "Paris",
        "text": "Paris is the capital and largest city of France, on the river Seine.",
        "url": "https://example.org/paris",
    },
    {
        "id": "lyon",
        "title": "Lyon",
        "text": "Lyon is a city in France known for its cuisine. It is not the capital.",
        "url": "https://example.org/lyon",
    },
    {
        "id": "berlin",
        "title": "Berlin",
        "text": "Berlin is the capital of Germany and its largest city.",
        "url": "https://example.org/berlin",
    },
    {
        "id": "seine",
        "title": "Seine",
        "text": "The Seine is a river in northern France that flows through Paris. " * 30,
    },
]

HOSTILE_QUERIES = [
    '"',
    '""',
    "*",
    "capital*",
    "NEAR(paris france)",
    "paris AND",
    "AND OR NOT",
    "((paris",
    "paris)",
    "title:paris",
    "-paris",
    "^paris",
    "'; DROP TABLE docs; --",
    "\x00\x01",
    "",
    "   ",
    "é中文🙂",
    "a" * 5000,
    " ".join(["paris"] * 500),
    "{}[]<>|\\/",
]


def write_corpus(path: Path, docs: list[dict]) -> Path:
    path.write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    return path


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    return write_corpus(tmp_path / "docs.jsonl", DOCS)


@pytest.fixture
def index(corpus: Path, tmp_path: Path) -> SearchIndex:
    return SearchIndex.open(corpus, cache_dir=tmp_path / "cache")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- the index ----------------------------------------------------------------------------


def test_first_open_builds_the_index_and_second_open_reuses_the_file(corpus, tmp_path):
    first = SearchIndex.open(corpus, cache_dir=tmp_path / "cache")
    stamp = first.db_path.stat().st_mtime_ns
    second = SearchIndex.open(corpus, cache_dir=tmp_path / "cache")
    assert first.rebuilt and not second.rebuilt
    assert second.db_path == first.db_path
    assert second.db_path.stat().st_mtime_ns == stamp  # the file was not rewritten
    assert len(second) == len(DOCS)


def test_a_changed_corpus_is_rebuilt_on_the_next_open(corpus, tmp_path):
    SearchIndex.open(corpus, cache_dir=tmp_path / "cache")
    write_corpus(corpus, [*DOCS, {"id": "rome", "title": "Rome", "text": "Capital of Italy."}])
    reopened = SearchIndex.open(corpus, cache_dir=tmp_path / "cache")
    assert reopened.rebuilt
    assert reopened.search("Italy")[0]["id"] == "rome"


def test_content_hash_reuses_the_index_when_only_the_mtime_changed(corpus, tmp_path):
    SearchIndex.open(corpus, cache_dir=tmp_path / "cache", content_hash=True)
    st = corpus.stat()
    os.utime(corpus, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    by_hash = SearchIndex.open(corpus, cache_dir=tmp_path / "cache", content_hash=True)
    by_mtime = SearchIndex.open(corpus, cache_dir=tmp_path / "cache")
    assert not by_hash.rebuilt
    assert by_mtime.rebuilt


def test_index_path_can_be_chosen_explicitly(corpus, tmp_path):
    index = SearchIndex.open(corpus, index_path=tmp_path / "my.sqlite")
    assert index.db_path == tmp_path / "my.sqlite" and (tmp_path / "my.sqlite").exists()


def test_best_matching_document_ranks_first(index):
    assert index.search("capital of France")[0]["id"] == "paris"
    assert index.search("Germany capital")[0]["id"] == "berlin"
    assert index.search("river Seine")[0]["id"] == "seine"


def test_title_match_outranks_a_body_mention(index):
    hits = index.search("Lyon")
    assert hits[0]["id"] == "lyon"


def test_results_carry_id_title_url_text_snippet_and_descending_scores(index):
    hits = index.search("capital city", topk=3)
    assert len(hits) == 3
    assert set(hits[0]) == {"id", "title", "url", "text", "snippet", "score"}
    scores = [h["score"] for h in hits]
    assert scores == sorted(scores, reverse=True)
    assert hits[0]["snippet"] and len(hits[0]["snippet"]) <= len(hits[0]["text"]) + 10


def test_topk_limits_the_number_of_results(index):
    assert len(index.search("France", topk=1)) == 1
    assert index.search("France", topk=0) == []


def test_query_without_a_matching_word_returns_nothing(index):
    assert index.search("xylophone") == []


@pytest.mark.parametrize("query", HOSTILE_QUERIES)
def test_hostile_query_strings_never_raise(index, query):
    hits = index.search(query)
    assert isinstance(hits, list)


def test_words_match_across_inflections(index):
    assert index.search("rivers flowing")[0]["id"] == "seine"  # river / flows, by their stems


@pytest.fixture(scope="module")
def big_index(tmp_path_factory) -> SearchIndex:
    """3,000 docs that all say 'common'; 'uncommon' is in doc 7 only, 'usual' in half."""
    folder = tmp_path_factory.mktemp("big")
    docs = [
        {
            "id": f"d{i}",
            "title": f"doc {i}",
            "text": "common words " + ("usual " if i % 2 else "") + ("uncommon" if i == 7 else ""),
        }
        for i in range(3000)
    ]
    return SearchIndex.open(write_corpus(folder / "big.jsonl", docs), cache_dir=folder)


def test_words_in_most_documents_are_dropped_when_a_rarer_word_is_left(big_index):
    assert big_index._prune(["common", "uncommon"]) == ["uncommon"]
    assert big_index._prune(["common", "usual"]) == ["usual"]  # all common: keep the rarest
    assert big_index.search("common uncommon", topk=1)[0]["id"] == "d7"


def test_max_df_one_keeps_every_query_word(big_index):
    exact = SearchIndex(big_index.db_path, max_df=1.0)
    assert exact._prune(["common", "uncommon"]) == ["common", "uncommon"]
    assert exact.search("common uncommon", topk=1)[0]["id"] == "d7"


def test_fts_query_quotes_every_word_and_drops_operators():
    assert fts_query('NEAR("paris" france)*') == '"near" OR "paris" OR "france"'
    assert fts_query("what is the capital") == '"capital"'
    assert fts_query("the") == '"the"'  # only stopwords: keep them rather than match nothing
    assert fts_query("((**") == ""


def test_access_finds_a_document_by_url_or_id(index):
    assert index.access("https://example.org/berlin")["id"] == "berlin"
    assert index.access("seine")["title"] == "Seine"
    assert index.access("https://example.org/nowhere") is None


def test_search_r1_contents_lines_are_split_into_title_and_text(tmp_path):
    path = tmp_path / "r1.jsonl"
    path.write_text(json.dumps({"id": "0", "contents": '"Aaron"\nAaron was a prophet.'}) + "\n")
    index = SearchIndex.open(path, cache_dir=tmp_path / "cache")
    assert index.access("0") == {
        "id": "0",
        "title": "Aaron",
        "url": None,
        "text": "Aaron was a prophet.",
    }


def test_a_bad_corpus_line_names_the_file_and_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(DOCS[0]) + "\n{not json\n")
    with pytest.raises(SearchIndexError, match=r"bad.jsonl:2: not valid JSON"):
        SearchIndex.open(path, cache_dir=tmp_path / "cache")
    assert not list((tmp_path / "cache").glob("*.sqlite"))  # no half-built index left behind


def test_a_missing_corpus_says_what_is_expected(tmp_path):
    with pytest.raises(SearchIndexError, match="does not exist; expected a JSONL file"):
        SearchIndex.open(tmp_path / "missing.jsonl")


def test_queries_from_many_threads_share_one_index(index):
    async def many() -> list[list[dict]]:
        return await asyncio.gather(*(asyncio.to_thread(index.search, "Paris") for _ in range(16)))

    results = asyncio.run(many())
    assert all(r[0]["id"] == "paris" for r in results)


# --- the HTTP server ------------------------------------------------------------------------


@pytest.fixture
async def server_url(index):
    runner, port = await start_server(index, "127.0.0.1", free_port())
    yield f"http://127.0.0.1:{port}"
    await runner.cleanup()


async def post(url: str, body: object) -> tuple[int, dict]:
    async with aiohttp.ClientSession() as s:
        data = body if isinstance(body, (str, bytes)) else json.dumps(body)
        async with s.post(url, data=data, headers={"Content-Type": "application/json"}) as r:
            return r.status, await r.json()


async def test_retrieve_returns_one_ranked_list_per_query(server_url):
    status, body = await post(
        f"{server_url}/retrieve", {"queries": ["France capital", "Germany"], "topk": 2}
    )
    assert status == 200
    first, second = body["result"]
    assert [d["id"] for d in first][0] == "paris" and len(first) == 2
    assert second[0]["id"] == "berlin"
    assert second[0]["contents"].startswith('"Berlin"\n')  # the field Search-R1 clients read


async def test_retrieve_with_return_scores_uses_the_search_r1_shape(server_url):
    status, body = await post(
        f"{server_url}/retrieve", {"queries": ["Germany"], "topk": 1, "return_scores": True}
    )
    entry = body["result"][0][0]
    assert status == 200 and set(entry) == {"document", "score"}
    assert entry["document"]["id"] == "berlin" and entry["score"] > 0


async def test_access_returns_documents_or_null_in_order(server_url):
    status, body = await post(
        f"{server_url}/access", {"urls": ["https://example.org/lyon", "nope", "paris"]}
    )
    assert status == 200
    lyon, missing, paris = body["result"]
    assert lyon["id"] == "lyon" and missing is None and paris["title"] == "Paris"


async def test_health_reports_the_number_of_documents(server_url):
    async with aiohttp.ClientSession() as s, s.get(f"{server_url}/health") as r:
        assert r.status == 200 and (await r.json()) == {"status": "ok", "docs": len(DOCS)}


@pytest.mark.parametrize(
    ("path", "body", "message"),
    [
        ("/retrieve", "{not json", "not valid JSON"),
        ("/retrieve", [1, 2], "expected a JSON object"),
        ("/retrieve", {"queries": [1, 2]}, "'queries' must be a list of strings"),
        ("/retrieve", {"topk": 3}, "'queries' must be a list of strings"),
        ("/retrieve", {"queries": ["x"], "topk": "3"}, "'topk' must be an integer"),
        ("/retrieve", {"queries": ["x"], "topk": 0}, "'topk' must be an integer from 1"),
        ("/retrieve", {"queries": ["x"], "return_scores": "yes"}, "'return_scores' must be"),
        ("/access", {"urls": 5}, "'urls' must be a list of strings"),
    ],
)
async def test_bad_requests_get_400_with_a_message_saying_what_is_expected(
    server_url, path, body, message
):
    status, payload = await post(server_url + path, body)
    assert status == 400
    assert message in payload["error"]


async def test_unknown_routes_answer_json_listing_the_endpoints(server_url):
    async with aiohttp.ClientSession() as s, s.get(f"{server_url}/search") as r:
        assert r.status == 404
        assert "POST /retrieve" in (await r.json())["error"]


async def test_client_retries_then_reports_an_unreachable_server():
    client = SearchClient(f"http://127.0.0.1:{free_port()}", retries=2, backoff=0.01, timeout=2)
    with pytest.raises(GemkitError, match="unavailable after 3 attempts"):
        await client.search("paris", 3)
    await client.close()


# --- the tools ------------------------------------------------------------------------------


async def test_search_tool_in_process_numbers_results_with_title_url_and_snippet(corpus, tmp_path):
    search = SearchTool(corpus, cache_dir=tmp_path / "cache")
    result = await search.call(SearchArgs(query="capital of France", topk=2))
    assert not result.is_error
    assert result.text.startswith("1. Paris [https://example.org/paris]\n   ")
    assert "\n2. " in result.text
    assert [d["id"] for d in result.metadata["docs"]][0] == "paris"


async def test_search_tool_over_http_gives_the_same_hits_as_in_process(server_url, index):
    remote = SearchTool(url=server_url)
    local = SearchTool(index=index)
    args = SearchArgs(query="river through Paris")
    r1, r2 = await remote.call(args), await local.call(args)
    await remote.close()
    assert r1.text == r2.text
    assert [d["id"] for d in r1.metadata["docs"]] == [d["id"] for d in r2.metadata["docs"]]


async def test_search_tool_reports_an_unreachable_server_as_an_error_result():
    search = SearchTool(url=f"http://127.0.0.1:{free_port()}", retries=1, timeout=2)
    search.backend.backoff = 0.01  # type: ignore[attr-defined]
    result = await search.call(SearchArgs(query="paris"))
    assert result.is_error and "unavailable" in result.text


async def test_empty_query_and_no_hits_get_clear_texts(index):
    search = SearchTool(index=index)
    empty = await search.call(SearchArgs(query="   "))
    none = await search.call(SearchArgs(query="xylophone"))
    assert empty.is_error and "query is empty" in empty.text
    assert not none.is_error and none.text.startswith("No results for 'xylophone'")


async def test_access_tool_returns_the_full_text_or_says_how_to_find_one(index):
    access = AccessTool(index=index, max_chars=100)
    found = await access.call(AccessArgs(url="seine"))
    missing = await access.call(AccessArgs(url="https://nowhere"))
    assert found.text.startswith("Seine [seine]\n\nThe Seine is a river")
    assert "more characters]" in found.text  # cut at max_chars
    assert missing.is_error and "as shown in the search results" in missing.text


async def test_access_tool_over_http_finds_documents_by_url(server_url):
    access = AccessTool(url=server_url)
    result = await access.call(AccessArgs(url="https://example.org/berlin"))
    await access.close()
    assert result.text.startswith("Berlin [https://example.org/berlin]")


def test_search_tools_share_one_backend(index):
    search, access = search_tools(index=index)
    assert search.name == "search" and access.name == "access"
    assert search.backend is access.backend  # type: ignore[attr-defined]


def test_tool_without_a_corpus_or_url_says_how_to_give_one(monkeypatch):
    monkeypatch.delenv("GEMKIT_SEARCH_URL", raising=False)
    monkeypatch.delenv("GEMKIT_SEARCH_CORPUS", raising=False)
    with pytest.raises(GemkitError, match="pass corpus="):
        SearchTool()


def test_tool_reads_its_server_from_the_environment(monkeypatch):
    monkeypatch.setenv("GEMKIT_SEARCH_URL", "http://127.0.0.1:9")
    assert isinstance(SearchTool().backend, SearchClient)


def test_search_schema_is_a_query_with_an_optional_topk():
    schema = SearchTool.Args.model_json_schema()
    assert schema["required"] == ["query"]
    assert schema["properties"]["topk"]["anyOf"][0]["maximum"] == 20


def test_cloned_tool_shares_the_index(index):
    search = SearchTool(index=index)
    clone = search.clone()
    assert clone is not search and clone.backend is search.backend  # type: ignore[attr-defined]


# --- the CLI --------------------------------------------------------------------------------


def test_serve_search_cli_reports_a_missing_corpus_without_a_traceback(capsys, tmp_path):
    from gemkit.cli import main

    code = main(["serve", "search", "--corpus", str(tmp_path / "nope.jsonl")])
    out = " ".join(capsys.readouterr().out.split())  # rich wraps long lines
    assert code == 2 and "does not exist" in out and "Traceback" not in out


def test_serve_without_a_target_shows_the_targets(capsys):
    from gemkit.cli import main

    assert main(["serve"]) == 2
    assert "search" in capsys.readouterr().out


def test_serve_search_cli_answers_retrieve_requests(corpus, tmp_path):
    import subprocess
    import sys
    import time
    import urllib.error
    import urllib.request

    port = free_port()
    cmd = [sys.executable, "-m", "gemkit", "serve", "search", "--corpus", str(corpus)]
    cmd += ["--port", str(port), "--cache-dir", str(tmp_path / "cache"), "--max-queries", "2"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    assert json.load(r)["docs"] == len(DOCS)
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, "server did not start"
                time.sleep(0.1)
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/retrieve",
            data=json.dumps({"queries": ["Germany"], "topk": 1}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=5) as r:
            assert json.load(r)["result"][0][0]["id"] == "berlin"
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/retrieve",
            data=json.dumps({"queries": ["a", "b", "c"]}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(request, timeout=5)
        assert e.value.code == 400 and "at most 2 queries" in json.load(e.value)["error"]
    finally:
        proc.terminate()
        proc.wait(10)


# --- in an env ------------------------------------------------------------------------------


def test_env_episode_searches_with_a_tag_then_answers(index):
    import gemkit

    env = gemkit.make("game:GuessTheNumber-v0-easy", tools=search_tools(index=index))
    try:
        obs, info = env.reset(seed=0)
        assert {s["function"]["name"] for s in info["tools"]} == {"search", "access"}
        obs, reward, terminated, truncated, info = env.step("<search>capital of France</search>")
        assert not terminated and "1. Paris [https://example.org/paris]" in obs
        obs, reward, terminated, truncated, info = env.step("<access>berlin</access>")
        assert "Berlin is the capital of Germany" in obs
        obs, reward, terminated, truncated, info = env.step(f"\\boxed{{{env.unwrapped.target}}}")
        assert terminated and reward == 1.0
    finally:
        env.close()


def test_search_tool_by_name_finds_its_corpus_in_the_environment(monkeypatch, corpus, tmp_path):
    import gemkit

    monkeypatch.setenv("GEMKIT_SEARCH_CORPUS", str(corpus))
    monkeypatch.setenv("GEMKIT_CACHE_DIR", str(tmp_path / "cache"))
    env = gemkit.make("game:GuessTheNumber-v0-easy", tools=["search"])
    try:
        env.reset(seed=0)
        obs, *_ = env.step("<search>Lyon cuisine</search>")
        assert obs.splitlines()[1].startswith("1. Lyon")
    finally:
        env.close()
