"""The guard every gemkit server shares, rule by rule, on every server (no browser needed).

`test_web_pages.py` attacks the servers from a real browser; here each request a web page
could make is sent by hand, one refused header at a time, so that each rule is proven on its
own (a browser sends several of them at once), and what must still pass does.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from gemkit.integrations.http_env import EnvServer
from gemkit.search import SearchIndex
from gemkit.search.server import make_app as search_app
from gemkit.view.server import make_app as view_app

from .conftest import Background

JSON = {"Content-Type": "application/json"}


def send(url: str, method: str, path: str, body: bytes | None, headers: dict[str, str]):
    """One request with exactly `headers` (a Host header of its own too); (status, text)."""
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=120)
    try:
        conn.putrequest(method, path, skip_host="Host" in headers, skip_accept_encoding=True)
        for k, v in headers.items():
            conn.putheader(k, v)
        if body is not None:
            conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body)
        resp = conn.getresponse()
        return resp.status, resp.read().decode("utf-8", "replace")
    finally:
        conn.close()


def _env_app(tmp_path: Path):
    return EnvServer("toy:Copy-v0").app(), "/reset", {"seed": 1}


def _search_app(tmp_path: Path):
    corpus = tmp_path / "docs.jsonl"
    corpus.write_text(json.dumps({"id": "d1", "title": "Paris", "text": "paris"}) + "\n")
    index = SearchIndex.open(corpus, cache_dir=tmp_path / "cache")
    return search_app(index), "/retrieve", {"queries": ["paris"]}


def _model_app(tmp_path: Path):
    pytest.importorskip("torch", reason="needs the `train` extra (torch, transformers)")
    from gemkit.train.engine import load_engine
    from gemkit.train.model_server import ModelServer

    server = ModelServer(load_engine(tiny="toy:Copy-v0"))
    return server.app(), "/v1/completions", {"prompt": [1, 2], "max_tokens": 1}


SERVERS: dict[str, Callable] = {"env": _env_app, "search": _search_app, "model": _model_app}

#: what a web page's request carries, one at a time, and the status each must get
REFUSED = [
    ({"Sec-Fetch-Site": "cross-site"}, 403),
    ({"Sec-Fetch-Site": "same-site"}, 403),  # another port of localhost is the same site
    ({"Origin": "http://evil.example"}, 403),
    ({"Origin": "null"}, 403),  # a sandboxed frame, a file:// page
    ({"Origin": "http://127.0.0.1:1"}, 403),  # another port: another origin
    ({"Host": "evil.example"}, 403),  # DNS rebinding
    ({"Host": "127.0.0.1.evil.example:80"}, 403),
    ({"Host": ""}, 403),
    ({"Content-Type": "text/plain"}, 415),  # the three types a page sends without a preflight
    ({"Content-Type": "text/plain;charset=UTF-8"}, 415),
    ({"Content-Type": "application/x-www-form-urlencoded"}, 415),
    ({"Content-Type": "multipart/form-data; boundary=x"}, 415),
    ({"Content-Type": ""}, 415),  # no type at all: a fetch with a Blob body
]


@pytest.mark.parametrize("name", list(SERVERS))
@pytest.mark.parametrize(("change", "status"), REFUSED)
def test_each_request_a_page_could_send_is_refused_before_the_server_acts(
    tmp_path, name, change, status
):
    app, path, body = SERVERS[name](tmp_path)
    with Background(app) as srv:
        headers = {"Host": f"127.0.0.1:{srv.port}", **JSON, **change}
        if headers["Content-Type"] == "":
            del headers["Content-Type"]
        got, text = send(srv.url, "POST", path, json.dumps(body).encode(), headers)
        assert (got, srv.passed) == (status, []), text
        message = json.loads(text)["error"]
        message = message["message"] if isinstance(message, dict) else message
        assert "\n" not in message and len(message) < 300
        ok, _ = send(srv.url, "POST", path, json.dumps(body).encode(), {"Host": f"127.0.0.1:{srv.port}", **JSON})  # fmt: skip
        assert ok == 200 and srv.passed == [f"POST {path}"]


ALLOWED = [
    {"Host": "localhost"},
    {"Host": "127.0.0.1"},
    {"Host": "[::1]:9"},
    {"Sec-Fetch-Site": "same-origin"},
    {"Sec-Fetch-Site": "none"},  # typed in the address bar
]


@pytest.mark.parametrize("name", list(SERVERS))
@pytest.mark.parametrize("change", ALLOWED)
def test_programs_and_the_servers_own_origin_are_answered(tmp_path, name, change):
    app, path, body = SERVERS[name](tmp_path)
    with Background(app) as srv:
        headers = {"Host": f"127.0.0.1:{srv.port}", **JSON, **change}
        got, text = send(srv.url, "POST", path, json.dumps(body).encode(), headers)
        assert got == 200, text
        own = {"Host": f"127.0.0.1:{srv.port}", "Origin": f"http://127.0.0.1:{srv.port}", **JSON}
        assert send(srv.url, "POST", path, json.dumps(body).encode(), own)[0] == 200


@pytest.mark.parametrize("name", list(SERVERS))
def test_with_a_token_any_host_name_is_answered_but_no_page_is(tmp_path, monkeypatch, name):
    monkeypatch.setenv("GEMKIT_SERVE_TOKEN", "t0ken")  # every server reads it when given none
    app, path, body = SERVERS[name](tmp_path)
    auth = {"Authorization": "Bearer t0ken", **JSON}
    with Background(app) as srv:
        data = json.dumps(body).encode()
        assert (
            send(srv.url, "POST", path, data, {"Host": "gpu-box.internal:8000", **auth})[0] == 200
        )
        assert (
            send(srv.url, "POST", path, data, {"Host": "gpu-box.internal:8000", **JSON})[0] == 401
        )
        page = {"Host": "gpu-box.internal", "Origin": "http://evil.example", **auth}
        assert send(srv.url, "POST", path, data, page)[0] == 403


def test_a_server_answers_the_name_it_is_bound_to(tmp_path):
    app, path, body = _env_app(tmp_path)
    with Background(app) as srv:
        data = json.dumps(body).encode()
        assert send(srv.url, "POST", path, data, {"Host": "box.lan:8010", **JSON})[0] == 403
        for m in app.middlewares:  # what `run_app(app, "box.lan", ...)` does
            if hasattr(m, "guard"):
                m.guard.bind("box.lan")
        assert send(srv.url, "POST", path, data, {"Host": "box.lan:8010", **JSON})[0] == 200


def test_the_model_servers_weight_route_takes_octet_stream_only(tmp_path):
    app, _, _ = _model_app(tmp_path)
    with Background(app) as srv:
        host = {"Host": f"127.0.0.1:{srv.port}"}
        for kind in ("text/plain", "application/json", ""):
            headers = {**host, **({"Content-Type": kind} if kind else {})}
            got, text = send(srv.url, "POST", "/update_weights", b"x" * 64, headers)
            assert got == 415 and "application/octet-stream" in text, text
        got, text = send(srv.url, "POST", "/update_weights", b"x", {**host, "Content-Type": "application/octet-stream"})  # fmt: skip
        assert got == 400 and "safetensors" in text  # past the guard, refused as no weights


def test_the_viewer_renders_the_same_guards_refusals_as_pages(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "episodes.jsonl").write_text(json.dumps({"env_id": "toy:Copy-v0"}) + "\n")
    with Background(view_app(folder)) as srv:
        own = {"Host": f"127.0.0.1:{srv.port}"}
        for change, _ in REFUSED[:8]:
            got, text = send(srv.url, "GET", "/raw?c=episodes&r=0", None, {**own, **change})
            assert got == 403 and "<html" in text.lower(), change
        assert srv.passed == []
        assert send(srv.url, "GET", "/raw?c=episodes&r=0", None, own)[0] == 200
