"""Attacks on the HTTP servers (`gemkit serve env`, `gemkit serve search`) by hostile clients.

Every server here is real (aiohttp on 127.0.0.1); the envs are small real `Env` classes whose
steps can be held on a `threading.Event`, so the tests assert on the order of events, never on
how long anything took.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from gemkit.core import Env
from gemkit.integrations.http_env import EnvServer, RemoteEnv, RemoteEnvError
from gemkit.search import SearchIndex

HOLD = 20.0  # seconds a held env call waits at most: a failing test ends instead of hanging


class Gate:
    """A call that announces it started, then waits until released."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def hold(self) -> None:
        self.entered.set()
        self.release.wait(HOLD)

    async def wait_entered(self) -> None:
        assert await asyncio.to_thread(self.entered.wait, HOLD), "the held call never started"


class Probe(Env):
    """A sync env: `step("slow")` holds on its gate, `step("boom")` raises, others echo.

    It counts calls running at once on one instance, to catch two threads in one env.
    """

    def __init__(self, gate: Gate | None = None, events: list[str] | None = None):
        self.gate = gate or Gate()
        self.events = events if events is not None else []
        self.running = 0
        self.most_at_once = 0
        self.closed = False
        self._count = threading.Lock()

    def close(self) -> None:
        self.closed = True

    def _enter(self) -> None:
        with self._count:
            self.running += 1
            self.most_at_once = max(self.most_at_once, self.running)

    def _leave(self) -> None:
        with self._count:
            self.running -= 1

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        options = options or {}
        if options.get("fail"):
            raise RuntimeError("the env's private state: expected answer is 42")
        if options.get("index", 0) >= 3:
            raise ValueError(f"index must be in [0, 3), got {options['index']}")
        if options.get("slow"):
            self.gate.hold()
        return "ready", {}

    def step(self, action: str):
        self._enter()
        try:
            if action == "slow":
                self.gate.hold()
                self.events.append("slow step done")
            elif action == "boom":
                raise RuntimeError("grader internals: expected answer is 42")
            elif action == "count":
                self.gate.hold()
            return f"echo {action}", 1.0, False, False, {}
        finally:
            self._leave()


class AsyncProbe(Probe):
    """An env with an async `astep` that still does blocking work inside (a common mix)."""

    async def astep(self, action: str):
        return self.step(action)  # blocking, though async: must not stall the server


@asynccontextmanager
async def serving(app: web.Application, **runner_kwargs: Any):
    """Serve `app` on a free 127.0.0.1 port in this loop; yield (base url, runner)."""
    runner = web.AppRunner(app, **runner_kwargs)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}", runner
    finally:
        await runner.cleanup()


async def post(session: aiohttp.ClientSession, url: str, body: Any, **kw: Any) -> tuple[int, Any]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    kw["headers"] = {"Content-Type": "application/json", **kw.get("headers", {})}
    async with session.post(url, data=data, **kw) as r:
        text = await r.text()
        try:
            return r.status, json.loads(text)
        except json.JSONDecodeError:
            return r.status, text


async def health(session: aiohttp.ClientSession, url: str, **kw: Any) -> tuple[int, Any]:
    async with session.get(url + "/health", **kw) as r:
        return r.status, await r.json(content_type=None)


async def send_raw(url: str, path: str, body: bytes) -> asyncio.StreamWriter:
    """Send a request on a bare socket; the caller then closes it without reading the answer."""
    host, port = url.removeprefix("http://").split(":")
    _, writer = await asyncio.open_connection(host, int(port))
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    writer.write(head.encode() + body)
    await writer.drain()
    return writer


def left(runner: web.AppRunner) -> bool:
    """True once the server has seen a client connection close (its handler may still run)."""
    return any(c.transport is None for c in runner.server.connections)


async def wait_for(predicate, what: str, tries: int = 2000) -> None:
    """Poll `predicate` (a generous bound: a loaded machine only makes it slower to turn true)."""
    for _ in range(tries):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never happened: {what}")


# --- env server: every failure frees what it took -------------------------------------------


async def test_failed_resets_free_their_sessions_so_nobody_is_locked_out():
    envs: list[Probe] = []
    server = EnvServer(
        "probe", max_sessions=2, env_factory=lambda: envs.append(Probe()) or envs[-1]
    )
    async with serving(server.app()) as (url, _), aiohttp.ClientSession() as s:
        for _ in range(5):  # more failures than the server has slots
            status, _body = await post(s, url + "/reset", {"options": {"fail": True}})
            assert status == 500
        assert len(envs) == 5 and all(env.closed for env in envs)
        for _ in range(5):
            status, _body = await post(s, url + "/reset", {"seed": -1})
            assert status == 400
        assert (await health(s, url))[1]["sessions"] == 0
        status, body = await post(s, url + "/reset", {"seed": 1})
        assert status == 200 and "session_id" in body


async def test_options_the_env_rejects_are_a_400_with_its_message_and_free_the_slot():
    server = EnvServer("probe", max_sessions=1, env_factory=Probe)
    async with serving(server.app()) as (url, _), aiohttp.ClientSession() as s:
        for _ in range(3):
            status, payload = await post(s, url + "/reset", {"options": {"index": 7}})
            assert status == 400 and "index must be in [0, 3), got 7" in payload["error"]
        assert (await post(s, url + "/reset", {"options": {"index": 1}}))[0] == 200


@pytest.mark.parametrize("cancel", [False, True], ids=["handler-runs-on", "handler-cancelled"])
async def test_a_client_that_leaves_before_its_new_session_id_arrives_frees_it(cancel):
    gate, envs = Gate(), []
    server = EnvServer("probe", env_factory=lambda: envs.append(Probe(gate)) or envs[-1])
    async with (
        serving(server.app(), handler_cancellation=cancel) as (url, runner),
        aiohttp.ClientSession() as s,
    ):
        writer = await send_raw(url, "/reset", b'{"options": {"slow": true}}')
        await gate.wait_entered()
        writer.close()  # gone before the id of its session could reach it
        await wait_for(lambda: left(runner), "the server saw the client leave")
        gate.release.set()
        await wait_for(lambda: not server.sessions, "the orphaned session is closed")
        await wait_for(lambda: envs[0].closed, "its env is closed")
        assert (await health(s, url))[1]["sessions"] == 0


# --- env server: malformed input is a 4xx with one line, never a 500 ------------------------

MALFORMED = [
    ("/reset", b"{nope", 400, "not valid JSON"),
    ("/reset", b"[1, 2]", 400, "JSON object"),
    ("/reset", b'"text"', 400, "JSON object"),
    ("/reset", b'{"seed": "\xff"}', 400, "UTF-8"),
    ("/reset", b"[" * 100_000 + b"]" * 100_000, 400, "nests too deeply"),
    ("/reset", b'{"seed": NaN}', 400, "not a JSON number"),
    ("/reset", b'{"seed": Infinity}', 400, "not a JSON number"),
    ("/reset", b'{"seed": ' + b"9" * 5000 + b"}", 400, "number too long"),
    ("/reset", b'{"seed": "one"}', 400, "seed must be an integer"),
    ("/reset", b'{"seed": 1.5}', 400, "seed must be an integer"),
    ("/reset", b'{"seed": -1}', 400, "seed must be an integer from 0"),
    ("/reset", b'{"seed": 18446744073709551616}', 400, "2**64-1"),
    ("/reset", b'{"seed": true}', 400, "seed must be an integer"),
    ("/reset", b'{"options": [1]}', 400, "options must be a JSON object"),
    ("/reset", b'{"options": "x"}', 400, "options must be a JSON object"),
    ("/reset", b'{"sesion_id": "x"}', 400, "unknown field 'sesion_id'"),
    ("/reset", b'{"session_id": 7}', 400, "session_id must be the string"),
    ("/step", b'{"action": "x"}', 400, 'missing "session_id"'),
    ("/step", b'{"session_id": "nope", "action": "x"}', 404, "no session 'nope'"),
    ("/step", b'{"session_id": ["a"], "action": "x"}', 400, "session_id must be the string"),
    ("/step", b'{"session_id": {"$ne": null}, "action": "x"}', 400, "session_id must be"),
    ("/clone", b'{"session_id": "nope"}', 404, "no session"),
    ("/close", b'{"session_id": 3.5}', 400, "session_id must be the string"),
    ("/step", b'{"session_id": "' + b"x" * 100_000 + b'", "action": "x"}', 400, "characters"),
]


@pytest.mark.parametrize(("path", "body", "status", "message"), MALFORMED)
async def test_malformed_bodies_get_a_4xx_with_a_one_line_json_message(path, body, status, message):
    server = EnvServer("toy:Copy-v0")
    async with serving(server.app()) as (url, _), aiohttp.ClientSession() as s:
        got, payload = await post(s, url + path, body)
        assert got == status, payload
        assert isinstance(payload, dict) and message in payload["error"]
        assert "\n" not in payload["error"] and len(payload["error"]) < 300  # never echoes input
        assert (await health(s, url))[1]["sessions"] == 0


async def test_wrong_action_types_and_unknown_routes_answer_json():
    server = EnvServer("toy:Copy-v0")
    async with serving(server.app()) as (url, _), aiohttp.ClientSession() as s:
        _, opened = await post(s, url + "/reset", {})
        sid = opened["session_id"]
        for action in (5, None, ["x"], {"text": "x"}, True):
            status, payload = await post(s, url + "/step", {"session_id": sid, "action": action})
            assert status == 400 and "action must be a string" in payload["error"]
        async with s.get(url + "/steps") as r:
            assert r.status == 404 and "POST /step" in (await r.json())["error"]
        async with s.get(url + "/step") as r:
            assert r.status == 405 and "error" in await r.json()


async def test_a_body_over_the_limit_is_413_naming_the_flag():
    server = EnvServer("toy:Copy-v0", max_body=64 * 1024)
    async with serving(server.app()) as (url, _), aiohttp.ClientSession() as s:
        body = json.dumps({"seed": 1, "options": {"pad": "x" * 200_000}}).encode()
        status, payload = await post(s, url + "/reset", body)
        assert status == 413 and "--max-body-kb" in payload["error"]
        assert (await health(s, url))[1]["sessions"] == 0


async def test_env_faults_are_a_logged_500_that_reveals_nothing_of_the_env(caplog):
    server = EnvServer("probe", env_factory=Probe)
    async with serving(server.app()) as (url, _), aiohttp.ClientSession() as s:
        _, opened = await post(s, url + "/reset", {})
        with caplog.at_level(logging.ERROR):
            status, payload = await post(
                s, url + "/step", {"session_id": opened["session_id"], "action": "boom"}
            )
        assert status == 500 and "42" not in payload["error"] and "internals" not in str(payload)
        assert "expected answer is 42" in caplog.text  # the operator still sees it
        status, _ = await post(
            s, url + "/step", {"session_id": opened["session_id"], "action": "x"}
        )
        assert status == 200  # the session and the server live on


# --- env server: one slow client does not stall the others ----------------------------------


@pytest.mark.parametrize("env_class", [Probe, AsyncProbe], ids=["sync-step", "blocking-astep"])
async def test_a_slow_step_does_not_delay_other_clients(env_class):
    gate, events = Gate(), []
    server = EnvServer("probe", env_factory=lambda: env_class(gate, events))
    async with serving(server.app()) as (url, _), aiohttp.ClientSession() as s:
        _, slow = await post(s, url + "/reset", {})
        _, fast = await post(s, url + "/reset", {})
        slow_step = asyncio.create_task(
            post(s, url + "/step", {"session_id": slow["session_id"], "action": "slow"})
        )
        await gate.wait_entered()
        assert (await health(s, url))[0] == 200
        events.append("health answered")
        status, body = await post(
            s, url + "/step", {"session_id": fast["session_id"], "action": "x"}
        )
        assert status == 200 and body["observation"] == "echo x"
        events.append("other step answered")
        assert not slow_step.done()
        gate.release.set()
        assert (await slow_step)[0] == 200
    assert events == ["health answered", "other step answered", "slow step done"]


async def test_one_session_never_runs_two_calls_at_once_even_when_clients_give_up():
    gate = Gate()
    env = Probe(gate)
    server = EnvServer("probe", env_factory=lambda: env)
    # handler_cancellation: aiohttp cancels a handler whose client left, the harshest case
    async with serving(server.app(), handler_cancellation=True) as (url, runner):
        async with aiohttp.ClientSession() as s:
            _, opened = await post(s, url + "/reset", {})
        body = json.dumps({"session_id": opened["session_id"], "action": "count"}).encode()
        writer = await send_raw(url, "/step", body)
        await gate.wait_entered()
        writer.close()  # its handler is cancelled while the env call runs
        await wait_for(lambda: left(runner), "the server saw the client leave")
        async with aiohttp.ClientSession() as s:
            more = [asyncio.create_task(post(s, url + "/step", json.loads(body))) for _ in range(6)]
            await asyncio.sleep(0.2)
            gate.release.set()
            assert all(status == 200 for status, _ in await asyncio.gather(*more))
    assert env.most_at_once == 1


# --- env server: sessions expire, ids cannot be guessed, a token guards it ------------------


async def test_idle_sessions_expire_and_then_answer_404():
    server = EnvServer("toy:Copy-v0", session_ttl=0.2, max_sessions=2)
    async with serving(server.app()) as (url, _), aiohttp.ClientSession() as s:
        ids = [(await post(s, url + "/reset", {}))[1]["session_id"] for _ in range(2)]
        await wait_for(lambda: not server.sessions, "idle sessions expire")
        status, payload = await post(s, url + "/step", {"session_id": ids[0], "action": "x"})
        assert status == 404 and "expired" in payload["error"]
        assert (await post(s, url + "/reset", {}))[0] == 200  # the slots are free again


async def test_a_session_busy_in_a_long_call_does_not_expire():
    gate = Gate()
    server = EnvServer("probe", session_ttl=0.05, env_factory=lambda: Probe(gate))
    async with serving(server.app()) as (url, _), aiohttp.ClientSession() as s:
        _, opened = await post(s, url + "/reset", {})
        step = asyncio.create_task(
            post(s, url + "/step", {"session_id": opened["session_id"], "action": "slow"})
        )
        await gate.wait_entered()
        await asyncio.sleep(0.5)  # ten TTLs
        assert await server.expire_idle() == 0 and len(server.sessions) == 1
        gate.release.set()
        assert (await step)[0] == 200


async def test_session_ids_are_long_random_and_a_forged_one_is_refused():
    server = EnvServer("toy:Copy-v0")
    async with serving(server.app()) as (url, _), aiohttp.ClientSession() as s:
        ids = [(await post(s, url + "/reset", {}))[1]["session_id"] for _ in range(30)]
        assert len(set(ids)) == 30 and all(len(i) >= 24 for i in ids)
        forged = ids[0][:-1] + ("A" if ids[0][-1] != "A" else "B")
        assert (await post(s, url + "/step", {"session_id": forged, "action": "x"}))[0] == 404


async def test_with_a_token_every_request_needs_it():
    server = EnvServer("toy:Copy-v0", token="s3cret-token")
    async with serving(server.app()) as (url, _), aiohttp.ClientSession() as s:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret-token"}):
            status, payload = await post(s, url + "/reset", {}, headers=headers)
            assert status == 401 and "Authorization: Bearer" in payload["error"]
            assert (await health(s, url, headers=headers))[0] == 401
        assert not server.sessions
        anonymous = RemoteEnv(url)
        with pytest.raises(RemoteEnvError, match="401"):
            await anonymous.areset()
        await anonymous.aclose()
        env = RemoteEnv(url, token="s3cret-token")
        assert (await env.areset(seed=1))[0].startswith("Copy each word")
        twin = await asyncio.to_thread(env.clone)  # the sync client, off this test's loop
        assert twin.token == "s3cret-token" and len(server.sessions) == 2
        await asyncio.to_thread(twin.close)
        await env.aclose()
        assert not server.sessions


def test_the_token_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("GEMKIT_SERVE_TOKEN", "from-env")
    assert EnvServer("toy:Copy-v0").token == "from-env"
    assert RemoteEnv("http://127.0.0.1:1").token == "from-env"
    assert EnvServer("toy:Copy-v0", token="").token is None  # explicit: no token


# --- both CLIs: ports and exposure ----------------------------------------------------------


@pytest.mark.parametrize("port", ["99999", "0", "-1"])
@pytest.mark.parametrize("target", ["env", "search"])
def test_serve_rejects_a_bad_port_in_one_line(capsys, tmp_path, port, target):
    from gemkit.cli import main

    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"id": "a", "title": "A", "text": "alpha"}\n')
    where = ["toy:Copy-v0"] if target == "env" else ["--corpus", str(corpus)]
    code = main(["serve", target, *where, "--port", port])
    out = " ".join(capsys.readouterr().out.split())
    assert code == 2 and "--port must be an integer from 1 to 65535" in out
    assert "serving" not in out and "Traceback" not in out


def test_binding_beyond_loopback_without_a_token_warns(capsys):
    from gemkit.cli import main

    with socket.socket() as taken:  # a busy port: the command warns, then fails to bind
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        code = main(["serve", "env", "toy:Copy-v0", "--host", "0.0.0.0", "--port", port])
    out = " ".join(capsys.readouterr().out.split())
    assert code == 2 and "without a token" in out and "--token" in out
    assert "cannot listen" in out and "serving" not in out


# --- search server: bounded work, stopped when the client leaves -----------------------------


class GatedIndex(SearchIndex):
    """A real index whose first search (or access) holds on a gate; it counts every call."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.gate = Gate()
        self.calls = 0

    def _count(self) -> None:
        self.calls += 1
        if self.calls == 1:
            self.gate.hold()

    def search(self, query: str, topk: int = 5):
        self._count()
        return super().search(query, topk)

    def access(self, url_or_id: str):
        self._count()
        return super().access(url_or_id)


@pytest.fixture
def index_path(tmp_path: Path) -> Path:
    corpus = tmp_path / "docs.jsonl"
    docs = [
        {"id": f"d{i}", "title": f"Doc {i}", "text": f"paris france city {i}"} for i in range(40)
    ]
    corpus.write_text("".join(json.dumps(d) + "\n" for d in docs))
    return SearchIndex.open(corpus, cache_dir=tmp_path / "cache").db_path


def _finished(app: web.Application) -> asyncio.Event:
    """An event set when a request handler of `app` returns (answered or not)."""
    done = asyncio.Event()

    @web.middleware
    async def mark(request: web.Request, handler: Any) -> web.StreamResponse:
        try:
            return await handler(request)
        finally:
            done.set()

    app.middlewares.append(mark)
    return done


@pytest.mark.parametrize(
    ("path", "body"),
    [("/retrieve", {"queries": ["paris"] * 400, "topk": 3}), ("/access", {"urls": ["d1"] * 400})],
)
async def test_search_work_stops_soon_after_the_client_leaves(index_path, path, body):
    from gemkit.search.server import make_app

    index = GatedIndex(index_path)
    app = make_app(index)
    finished = _finished(app)
    async with serving(app) as (url, runner), aiohttp.ClientSession() as s:
        writer = await send_raw(url, path, json.dumps(body).encode())
        await index.gate.wait_entered()
        assert (await health(s, url))[0] == 200  # the loop answers while a search runs
        writer.close()
        await wait_for(lambda: left(runner), "the server saw the client leave")
        index.gate.release.set()
        await asyncio.wait_for(finished.wait(), HOLD)
    assert index.calls == 16  # the chunk that was running, not the 400 asked for


BOUNDS = [
    ({"queries": ["paris"] * 5000, "topk": 1}, "--max-queries"),
    ({"queries": ["paris"] * 4096, "topk": 100}, "--max-results"),
    ({"queries": ["paris"], "topk": 1000}, "--max-topk"),
    ({"queries": ["paris " * 2000]}, "--max-query-chars"),
]


@pytest.mark.parametrize(("body", "flag"), BOUNDS)
async def test_search_requests_past_a_limit_get_a_400_naming_its_flag(index_path, body, flag):
    from gemkit.search.server import start_server

    runner, port = await start_server(SearchIndex(index_path), "127.0.0.1", 0)
    try:
        async with aiohttp.ClientSession() as s:
            status, payload = await post(s, f"http://127.0.0.1:{port}/retrieve", body)
        assert status == 400 and flag in payload["error"] and len(payload["error"]) < 300
    finally:
        await runner.cleanup()


async def test_search_bodies_that_are_bombs_get_4xx_json(index_path):
    from gemkit.search.server import SearchLimits, start_server

    limits = SearchLimits(max_body=64 * 1024)
    runner, port = await start_server(SearchIndex(index_path), "127.0.0.1", 0, limits=limits)
    url = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as s:
            cases = [
                (b"[" * 50_000, 400, "nests too deeply"),
                (b'{"queries": ["x"], "topk": NaN}', 400, "not a JSON number"),
                (json.dumps({"queries": ["x" * 100_000]}).encode(), 413, "--max-body-kb"),
                (json.dumps({"urls": [["x"] * 1000]}).encode(), 400, "list of strings"),
            ]
            for body, status, message in cases:
                got, payload = await post(
                    s, url + ("/access" if b"urls" in body else "/retrieve"), body
                )
                assert got == status and message in payload["error"], payload
                assert len(payload["error"]) < 300
    finally:
        await runner.cleanup()


async def test_search_server_token(index_path):
    from gemkit.search.client import SearchClient, SearchServiceError
    from gemkit.search.server import start_server

    runner, port = await start_server(SearchIndex(index_path), "127.0.0.1", 0, token="tok")
    url = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as s:
            assert (await post(s, url + "/retrieve", {"queries": ["paris"]}))[0] == 401
            assert (await health(s, url))[0] == 401
        with pytest.raises(SearchServiceError, match="token"):
            await SearchClient(url, token="", retries=0).search("paris", 1)
        client = SearchClient(url, token="tok")
        assert (await client.search("paris", 2))[0]["title"].startswith("Doc")
        await client.close()
    finally:
        await runner.cleanup()
