"""A web page attacks every gemkit server on this machine, from a real browser.

The operator (or an agent driving a browser tool) opens a page of another site. The page
cannot read the answers of its cross-origin requests, but it does not need to: a POST that
the server acts on is enough (swap the served weights, open sessions, run searches). Each
server here is real and bound to 127.0.0.1 with no token, as `gemkit serve` starts it by
default; the page is served from 127.0.0.2 (another site, on this machine's loopback), and a
DNS-rebinding page is played by a name that the browser resolves to 127.0.0.1.

What a page tries: a "simple" `fetch` (`mode: "no-cors"`, a `text/plain` body, or a JSON body
whose type the browser drops), a `text/plain` form whose fields spell JSON, a CORS request with
`application/json` (which needs a preflight), an `<img>` for a GET, and, after rebinding, a
same-origin JSON POST. Each must leave the server untouched: no request reaches a handler, and
the model server's weights and version, the env server's sessions and the search index are as
they were. A program on this machine still gets its answers.
"""

from __future__ import annotations

import json
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from gemkit.integrations.http_env import EnvServer
from gemkit.search import SearchIndex
from gemkit.search.server import make_app as search_app
from gemkit.testing.browser import chromium, skip_without_browser
from gemkit.view.server import make_app as view_app

from .conftest import Background

REBIND = "rebind.test"  # a name a rebinding attacker points at this machine

skip_without_browser()


@pytest.fixture(scope="module")
def browser():
    with chromium((f"--host-resolver-rules=MAP {REBIND} 127.0.0.1",)) as driver:
        yield driver


class _Page(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - the http.server API
        body = b"<!doctype html><title>a page</title><iframe name=sink></iframe>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def evil_page():
    """The attacker's page, on another site of this machine (127.0.0.2)."""
    server = ThreadingHTTPServer(("127.0.0.2", 0), _Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.2:{server.server_address[1]}/"
    finally:
        server.shutdown()


FETCH = """
const [url, body, mode, type, done] = arguments;
const init = {method: "POST", mode: mode, body: body};
if (type) init.headers = {"Content-Type": type};
fetch(url, init).then(r => done("answered " + r.type), e => done("failed " + e));
"""
FORM = """
const [url, name, value, done] = arguments;
const frame = document.getElementsByName("sink")[0];
frame.onload = () => done("submitted");
const form = document.createElement("form");
form.method = "POST"; form.action = url; form.enctype = "text/plain"; form.target = "sink";
const field = document.createElement("input");
field.type = "hidden"; field.name = name; field.value = value;
form.appendChild(field); document.body.appendChild(form); form.submit();
"""
IMAGE = """
const [url, done] = arguments;
const img = new Image();
img.onload = () => done("loaded"); img.onerror = () => done("refused");
img.src = url;
"""


def attacks(browser, page: str, url: str, body: dict) -> list[str]:
    """Every way a page of another site posts `body` to `url`; what the browser saw of each.

    Each script returns once its answer came back (a fetch settled, the form's frame loaded),
    so the server has handled every request before the caller counts what it let through."""
    browser.get(page)
    text = json.dumps(body)
    seen = [
        browser.execute_async_script(FETCH, url, text, "no-cors", "text/plain"),
        browser.execute_async_script(FETCH, url, text, "no-cors", None),
        browser.execute_async_script(FETCH, url, text, "no-cors", "application/json"),
        browser.execute_async_script(FETCH, url, text, "cors", "application/json"),
    ]
    # a text/plain form sends `name=value`: the name opens the JSON, the value closes it
    name, value = text[:-1] + ', "pad": "', '"}'
    seen.append(browser.execute_async_script(FORM, url, name, value))
    return seen


def rebound(browser, server: Background, path: str, body: dict) -> str:
    """A same-origin JSON POST from a page whose name now resolves to this machine."""
    browser.get(f"http://{REBIND}:{server.port}/")
    return browser.execute_async_script(FETCH, path, json.dumps(body), "same-origin", "application/json")  # fmt: skip


def program_post(url: str, body: dict) -> dict:
    """What a program on this machine sends (and the server must still answer)."""
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=120) as r:
        return json.loads(r.read())


# -- the servers --------------------------------------------------------------------------------


def test_a_page_cannot_drive_the_env_server(browser, evil_page):
    server = EnvServer("toy:Copy-v0")
    with Background(server.app()) as srv:
        seen = attacks(browser, evil_page, srv.url + "/reset", {"seed": 1})
        seen.append(rebound(browser, srv, "/reset", {"seed": 1}))
        assert srv.passed == [] and server.sessions == {}, seen
        assert "session_id" in program_post(srv.url + "/reset", {"seed": 1})
        assert len(server.sessions) == 1


class CountingIndex(SearchIndex):
    """A real index that counts its searches."""

    searches = 0

    def search(self, query, topk=5):
        CountingIndex.searches += 1
        return super().search(query, topk)


def test_a_page_cannot_drive_the_search_server(browser, evil_page, tmp_path):
    corpus = tmp_path / "docs.jsonl"
    corpus.write_text(json.dumps({"id": "d1", "title": "Paris", "text": "paris france"}) + "\n")
    index = CountingIndex(SearchIndex.open(corpus, cache_dir=tmp_path / "cache").db_path)
    with Background(search_app(index)) as srv:
        body = {"queries": ["paris"], "topk": 1}
        seen = attacks(browser, evil_page, srv.url + "/retrieve", body)
        seen.append(rebound(browser, srv, "/retrieve", body))
        assert srv.passed == [] and CountingIndex.searches == 0, seen
        assert program_post(srv.url + "/retrieve", body)["result"][0][0]["id"] == "d1"


def test_a_page_cannot_swap_the_served_weights_or_jump_their_version(browser, evil_page, tmp_path):
    pytest.importorskip("torch", reason="needs the `train` extra (torch, transformers)")
    from gemkit.train.engine import load_engine
    from gemkit.train.model_server import ModelServer

    engine = load_engine(tiny="toy:Copy-v0")
    load_engine(tiny="toy:Copy-v0", seed=1).model.save_pretrained(tmp_path / "other")
    before = {k: v.clone() for k, v in engine.model.state_dict().items()}
    server = ModelServer(engine)
    with Background(server.app()) as srv:
        swap = {"model_path": str(tmp_path / "other"), "weight_version": 10**15}
        seen = attacks(browser, evil_page, srv.url + "/update_weights_from_disk", swap)
        seen += attacks(browser, evil_page, srv.url + "/v1/completions", {"prompt": [1, 2]})
        seen.append(rebound(browser, srv, "/update_weights_from_disk", swap))
        seen.append(rebound(browser, srv, "/v1/completions", {"prompt": [1, 2]}))
        assert srv.passed == [] and engine.version == 0 and server.rows == 0, seen
        after = engine.model.state_dict()
        assert all(bool((before[k] == after[k]).all()) for k in before)
        # the trainer's own next update still lands
        done = program_post(srv.url + "/update_weights_from_disk", {"model_path": str(tmp_path / "other")})  # fmt: skip
        assert done["weight_version"] == "1"


def test_a_page_cannot_make_the_viewer_run_verifiers_or_read_records(browser, evil_page, tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    episode = {"env_id": "toy:Copy-v0", "turns": [], "total_reward": 1.0, "success": True}
    (folder / "episodes.jsonl").write_text(json.dumps(episode) + "\n")
    app = view_app(folder)
    with Background(app) as srv:
        browser.get(evil_page)
        for path in ("/record?c=episodes&r=0", "/raw?c=episodes&r=0", "/list?c=episodes&q=x"):
            browser.execute_async_script(IMAGE, srv.url + path)
        browser.get(f"http://{REBIND}:{srv.port}/list?c=episodes")  # rebound: the page is refused
        assert "answers only requests addressed to" in browser.page_source
        assert srv.passed == []
        with urllib.request.urlopen(srv.url + "/raw?c=episodes&r=0", timeout=120) as r:
            assert json.loads(r.read())["env_id"] == "toy:Copy-v0"
        assert srv.passed == ["GET /raw"]


def test_the_browser_really_sent_what_the_attacks_claim(browser, evil_page):
    """The attacks above prove something only if the browser sends them: with the guard off,
    the same page's requests reach the server (so a refusal above is the guard's)."""
    from aiohttp import web

    got: list[tuple[str, str]] = []

    async def sink(request: web.Request) -> web.Response:
        got.append((request.headers.get("Content-Type", ""), await request.text()))
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/x", sink)
    with Background(app) as srv:
        attacks(browser, evil_page, srv.url + "/x", {"seed": 1})
    types = sorted(t.split(";")[0] for t, _ in got)
    # no-cors and form requests all arrive (as text/plain); the CORS JSON request needs a
    # preflight first, which this bare server does not answer, so the browser never sends it
    assert types == ["text/plain"] * 4, got
    assert all(json.loads(text)["seed"] == 1 for _, text in got), got
