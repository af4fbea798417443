"""`gemkit serve model` against the clients real trainers use, and against hostile ones.

- The official `openai` SDK streams (`stream=True`): it used to get 0 chunks and no error,
  because the server ignored `stream` and answered plain JSON.
- `top_logprobs` and a per-request `seed` are honoured; an unknown model name is a 404 and
  every field the server does not honour is a 400 naming it (they used to be ignored).
- The chunks have vLLM's shapes (recorded from vLLM 0.32 in `tests/data/vllm/streams.json`).
- `LLMClient.chat_stream` does not retry a server that does not stream.
- One request cannot leave the server refusing its trainer (a version jump used to make
  every later update a 409); weight uploads are bounded in time and in number.
"""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path
from typing import Any

import pytest

openai = pytest.importorskip("openai", reason="the official SDK is in the dev extra")
torch = pytest.importorskip("torch", reason="needs the `train` extra (torch, transformers)")

from aiohttp import web  # noqa: E402

from gemkit.llm import LLMClient, LLMError  # noqa: E402
from gemkit.train.engine import load_engine  # noqa: E402
from gemkit.train.model_server import ModelServer, ServerLimits  # noqa: E402
from gemkit.train.weight_updates import state_bytes  # noqa: E402

from .conftest import Background  # noqa: E402

ENV = "toy:Copy-v0"
RECORDED = json.loads(
    (Path(__file__).resolve().parents[1] / "data" / "vllm" / "streams.json").read_text()
)["recordings"]
MESSAGES = [{"role": "user", "content": "Copy each word I show. Word: apple"}]


def served(**limits: Any) -> tuple[ModelServer, Background]:
    engine = load_engine(tiny=ENV, names=["policy", "qwen"])
    server = ModelServer(engine, limits=ServerLimits(**limits))
    return server, Background(server.app())


class Model:
    """A served model, the background server, and an official SDK client of it."""

    def __init__(self, server: ModelServer, srv: Background):
        self.server, self.srv = server, srv
        self.url = srv.url + "/v1"
        self.sdk = openai.OpenAI(base_url=self.url, api_key="none", max_retries=0)


@pytest.fixture(scope="module")
def model():
    """One server for the protocol tests that change nothing on it."""
    server, srv = served()
    with srv:
        yield Model(server, srv)


# -- streaming with the official SDK -------------------------------------------------------------


def test_the_official_sdk_streams_chat_chunks_that_join_into_the_answer(model):
    client = model.sdk
    kwargs = dict(model="policy", messages=MESSAGES, max_tokens=8, seed=11, n=2, temperature=1.5)
    whole = client.chat.completions.create(**kwargs)
    chunks = list(
        client.chat.completions.create(
            **kwargs, stream=True, stream_options={"include_usage": True}
        )
    )
    assert len(chunks) > 4  # a role chunk and one per token for each choice, then usage
    texts = {0: "", 1: ""}
    finishes = {}
    for chunk in chunks[:-1]:
        (choice,) = chunk.choices
        texts[choice.index] += choice.delta.content or ""
        if choice.finish_reason:
            finishes[choice.index] = choice.finish_reason
    assert [texts[i] for i in (0, 1)] == [c.message.content for c in whole.choices]
    assert finishes == {c.index: c.finish_reason for c in whole.choices}
    last = chunks[-1]
    assert last.choices == [] and last.usage.completion_tokens == whole.usage.completion_tokens
    assert last.usage.prompt_tokens == whole.usage.prompt_tokens
    plain = list(client.chat.completions.create(**kwargs, stream=True))
    assert all(c.usage is None for c in plain)  # usage only when asked, as vLLM


def test_the_official_sdk_streams_completions_with_log_probs(model):
    client = model.sdk
    kwargs = dict(model="qwen", prompt=[3, 4, 5], max_tokens=6, seed=5, logprobs=2)
    whole = client.completions.create(**kwargs)
    chunks = list(
        client.completions.create(**kwargs, stream=True, stream_options={"include_usage": True})
    )
    body = [c for c in chunks if c.choices]
    assert "".join(c.choices[0].text for c in body) == whole.choices[0].text
    streamed = [lp for c in body for lp in c.choices[0].logprobs.token_logprobs]
    assert streamed == pytest.approx(whole.choices[0].logprobs.token_logprobs)
    assert chunks[-1].usage.completion_tokens == len(streamed)


async def test_llm_client_chat_stream_streams_from_the_model_server(model):
    seen: list[str] = []
    async with LLMClient(base_url=model.url, model="policy", max_retries=0) as client:
        response = await client.chat_stream(
            MESSAGES, on_delta=lambda d: seen.append(d.content or ""), max_tokens=6, seed=3
        )
        again = await client.chat(MESSAGES, max_tokens=6, seed=3)
    assert "".join(seen) == (response.content or "") == again.content
    assert response.usage.completion_tokens == again.usage.completion_tokens > 0


# -- fields honoured, or refused by name ----------------------------------------------------------


def test_top_logprobs_are_the_most_likely_tokens_under_the_sampling_distribution(model):
    client = model.sdk
    out = client.chat.completions.create(
        model="policy", messages=MESSAGES, max_tokens=5, logprobs=True, top_logprobs=3,
        temperature=0,
    )  # fmt: skip
    for entry in out.choices[0].logprobs.content:
        tops = [t.logprob for t in entry.top_logprobs]
        assert len(tops) == 3 and tops == sorted(tops, reverse=True)
        # greedy: the sampled token is the most likely one, with the same log-prob
        assert entry.top_logprobs[0].token == entry.token
        assert entry.top_logprobs[0].logprob == pytest.approx(entry.logprob)
    comp = client.completions.create(model="policy", prompt=[3, 4], max_tokens=3, logprobs=4)
    for k, alts in enumerate(comp.choices[0].logprobs.top_logprobs):
        sampled = comp.choices[0].logprobs.tokens[k]
        assert sampled in alts and 4 <= len(alts) <= 5  # the top 4 and the sampled one (vLLM)


def test_a_seed_gives_the_same_tokens_whatever_else_is_sampled_with_them(model):
    client = model.sdk
    ask = dict(model="policy", prompt=[3, 4, 5], max_tokens=12, temperature=2.0, logprobs=0)

    def ids(**extra):
        out = client.completions.create(**ask, **extra, extra_body={"return_token_ids": True})
        return [c.model_extra["token_ids"] for c in out.choices]

    first = ids(seed=1234)
    assert ids(seed=1234) == first
    assert len({tuple(ids(seed=s)[0]) for s in range(6)}) > 1  # other seeds, other samples
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(8) as pool:  # batched with unseeded traffic
        noise = [pool.submit(ids) for _ in range(6)]
        seeded = pool.submit(ids, seed=1234)
        assert seeded.result() == first
        [f.result() for f in noise]


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"stop": ["x"]}, "'stop'"),
        ({"top_p": 1.5}, "top_p must be a number in (0, 1]"),  # honoured, when in range
        ({"extra_body": {"repetition_penalty": 1.1}}, "'repetition_penalty'"),
        ({"presence_penalty": 1.0}, "'presence_penalty'"),
        ({"frequency_penalty": 0.5}, "'frequency_penalty'"),
        ({"logit_bias": {"3": 5}}, "'logit_bias'"),
        ({"response_format": {"type": "json_object"}}, "'response_format'"),
        (
            {"tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]},
            "'tools'",
        ),  # fmt: skip
        ({"extra_body": {"top_k": -5}}, "top_k must be an integer >= 1"),
        ({"extra_body": {"min_tokens": 3}}, "'min_tokens'"),
        ({"extra_body": {"bogus_field": 1}}, "'bogus_field'"),
        ({"stream_options": {"include_usage": True}}, "stream_options"),
        ({"top_logprobs": 2}, "'top_logprobs' needs"),
        ({"logprobs": True, "top_logprobs": 21}, "'top_logprobs' must be from 0 to 20"),
        ({"seed": "x"}, "'seed' must be an integer"),
        ({"n": 0}, "'n' must be from 1"),
    ],
)
def test_every_field_the_server_does_not_honour_is_a_400_naming_it(model, kwargs, named):
    before = model.server.rows
    with pytest.raises(openai.BadRequestError) as e:
        model.sdk.chat.completions.create(model="policy", messages=MESSAGES, max_tokens=2, **kwargs)
    assert named in str(e.value) and model.server.rows == before


def test_neutral_values_of_unsupported_fields_are_accepted(model):
    out = model.sdk.chat.completions.create(
        model="policy", messages=MESSAGES, max_tokens=2, top_p=1, presence_penalty=0,
        frequency_penalty=0, stop=None, user="u1", extra_body={"top_k": -1},
    )  # fmt: skip
    assert out.choices[0].message.content is not None


def test_an_unknown_model_name_is_a_404_naming_the_served_ones(model):
    client = model.sdk
    for call in (
        lambda: client.chat.completions.create(model="gpt-4o", messages=MESSAGES, max_tokens=1),
        lambda: client.completions.create(model="gpt-4o", prompt=[1], max_tokens=1),
    ):
        with pytest.raises(openai.NotFoundError) as e:
            call()
        assert "gpt-4o" in str(e.value) and "policy, qwen" in str(e.value)
    assert [m.id for m in client.models.list().data] == ["policy", "qwen"]


# -- the chunks are vLLM's ------------------------------------------------------------------------


def _keys(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _keys(v) for k, v in obj.items()}
    if isinstance(obj, list) and obj and isinstance(obj[0], dict):
        return [_keys(obj[0])]
    return None


def _kinds(events: list[Any]) -> dict[str, Any]:
    """The first chunk of each kind: role, token, last token of a choice, usage."""
    out: dict[str, Any] = {}
    for e in events:
        if e == "[DONE]":
            continue
        if not e["choices"]:
            out.setdefault("usage", e)
        elif "role" in (e["choices"][0].get("delta") or {}):
            out.setdefault("role", e)
        elif e["choices"][0]["finish_reason"]:
            out.setdefault("last", e)
        else:
            out.setdefault("token", e)
    return out


def _same_keys(ours: Any, theirs: Any, where: str) -> None:
    if not isinstance(ours, dict) or not isinstance(theirs, dict):
        return
    extra = set(ours) - set(theirs) - {"weight_version"}  # ours: the version that sampled
    missing = set(theirs) - set(ours) - {"system_fingerprint"}
    assert not extra and not missing, (where, extra, missing)
    for k in set(ours) & set(theirs):
        a, b = ours[k], theirs[k]
        if isinstance(a, list) and isinstance(b, list) and a and b:
            a, b = a[0], b[0]
        if k == "top_logprobs" and isinstance(b, dict) and "token" not in b:
            continue  # completions: keyed by the tokens themselves
        _same_keys(a, b, f"{where}.{k}")


@pytest.mark.parametrize("name", [k for k, v in RECORDED.items() if "events" in v])
def test_stream_chunks_have_the_shape_vllm_sends(model, name):
    recorded = RECORDED[name]
    text = _post_raw(model.srv.port, recorded["path"], {**recorded["request"], "max_tokens": 3})
    ours = [json.loads(e) if e != "[DONE]" else e for e in _events(text)]
    theirs = [json.loads(e) if e != "[DONE]" else e for e in recorded["events"]]
    assert ours[-1] == "[DONE]" == theirs[-1]
    mine, vllm = _kinds(ours), _kinds(theirs)
    assert set(mine) >= set(vllm), (set(mine), set(vllm))
    for kind in vllm:
        _same_keys(mine[kind], vllm[kind], f"{name}:{kind}")


def _post_raw(port: int, path: str, body: dict) -> str:
    import urllib.request

    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=120) as r:
        assert r.headers["Content-Type"].startswith("text/event-stream")
        return r.read().decode()


def _events(text: str) -> list[str]:
    return [line[len("data: ") :] for line in text.split("\n") if line.startswith("data: ")]


# -- a client that streams does not retry a server that cannot ------------------------------------


async def test_chat_stream_does_not_retry_a_server_that_answers_plain_json():
    hits: list[bool] = []

    async def chat(request: web.Request) -> web.Response:  # a server that ignores "stream"
        hits.append((await request.json()).get("stream"))
        return web.json_response({"choices": [{"index": 0, "message": {"content": "hi"}}]})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    with Background(app) as srv:
        async with LLMClient(base_url=srv.url + "/v1", model="m", backoff_base=5.0) as client:
            with pytest.raises(LLMError) as e:
                await client.chat_stream(MESSAGES)
    assert hits == [True]  # one request: a retry cannot make the server stream
    message = str(e.value)
    assert "does not stream" in message and "application/json" in message
    assert "\n" not in message and client.num_retries == 0


async def test_chat_stream_does_not_retry_a_server_that_answers_other_text():
    hits: list[int] = []

    async def chat(request: web.Request) -> web.Response:
        hits.append(1)
        return web.Response(text="Service ready\n", content_type="text/plain")

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    with Background(app) as srv:
        async with LLMClient(base_url=srv.url + "/v1", model="m", backoff_base=5.0) as client:
            with pytest.raises(LLMError, match="does not stream.*Service ready"):
                await client.chat_stream(MESSAGES)
    assert hits == [1]


async def test_chat_stream_does_not_retry_a_refused_request(model):
    async with LLMClient(base_url=model.url, model="nope", backoff_base=5.0) as client:
        with pytest.raises(LLMError, match="404.*does not exist") as e:
            await client.chat_stream(MESSAGES, max_tokens=2)
    assert e.value.attempts == 1 and client.num_retries == 0


# -- weight versions: no single request locks the trainer out --------------------------------------


async def _post(srv: Background, path: str, data: bytes, kind: str) -> tuple[int, dict]:
    import aiohttp

    async with (
        aiohttp.ClientSession() as s,
        s.post(srv.url + path, data=data, headers={"Content-Type": kind}) as r,
    ):
        return r.status, json.loads(await r.text())


OCTET = "application/octet-stream"


async def test_a_version_jump_is_refused_and_the_trainers_next_update_still_lands(tmp_path):
    server, srv = served()
    new = state_bytes(load_engine(tiny=ENV, seed=1).model)
    load_engine(tiny=ENV, seed=2).model.save_pretrained(tmp_path / "w")
    with srv:
        for version in (10**15, 2, 0, -1):
            status, out = await _post(srv, f"/update_weights?weight_version={version}", new, OCTET)
            assert status == 409 and "next version, 1" in out["error"]["message"], out
        jump = json.dumps({"model_path": str(tmp_path / "w"), "weight_version": 10**15}).encode()
        status, _ = await _post(srv, "/update_weights_from_disk", jump, "application/json")
        assert status == 409 and server.engine.version == 0
        # the trainer's own updates, in order, all land
        for version in (1, 2, 3):
            status, out = await _post(srv, f"/update_weights?weight_version={version}", new, OCTET)
            assert (status, out["weight_version"]) == (200, str(version))


async def test_two_updates_naming_the_same_version_land_once():
    server, srv = served()
    new = state_bytes(load_engine(tiny=ENV, seed=1).model)
    with srv:
        results = await asyncio.gather(
            *(_post(srv, "/update_weights?weight_version=1", new, OCTET) for _ in range(2))
        )
    assert sorted(status for status, _ in results) == [200, 409]
    assert server.engine.version == 1


def test_the_operator_sets_the_first_version_at_start():
    from gemkit.serving import RequestError
    from gemkit.train.engine import unique_state

    engine = load_engine(tiny=ENV, version=57)
    with pytest.raises(RequestError, match="next version, 58"):
        engine.load({}, 60)
    assert engine.load(unique_state(engine.model)[0], None) == 58


# -- bounded uploads -----------------------------------------------------------------------------


def _stall(port: int, path: str, kind: str, total: int, sent: int) -> socket.socket:
    """Start an upload of `total` bytes, send `sent` of them, then stop sending."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=120)
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: {kind}\r\n"
        f"Content-Length: {total}\r\n\r\n"
    )
    sock.sendall(head.encode() + b"\0" * sent)
    return sock


def _answer(sock: socket.socket) -> tuple[int, str]:
    data = b""
    while b"\r\n\r\n" not in data or not data.rstrip().endswith(b"}"):
        part = sock.recv(65536)
        if not part:
            break
        data += part
    status = int(data.split(b" ", 2)[1])
    return status, data.split(b"\r\n\r\n", 1)[1].decode("utf-8", "replace")


async def test_stalled_weight_uploads_time_out_and_only_a_few_are_received_at_once():
    server, srv = served(upload_timeout_s=1.0, max_uploads=2)
    total = server.max_upload  # as large as an upload may be; half of it comes, then nothing
    with srv:
        stalled = [_stall(srv.port, "/update_weights", OCTET, total, total // 2) for _ in range(2)]
        for _ in range(6000):  # both are being received (poll generously: no clock involved)
            if server._uploads == 2:
                break
            await asyncio.sleep(0.01)
        assert server._uploads == 2
        third = _stall(srv.port, "/update_weights", OCTET, total, total // 2)
        status, text = await asyncio.to_thread(_answer, third)
        assert status == 429 and "one update at a time" in text
        for sock in stalled:  # each stops at the time limit, and frees its slot
            status, text = await asyncio.to_thread(_answer, sock)
            assert status == 408 and "did not arrive within 1 s" in text
            sock.close()
        third.close()
        assert server._uploads == 0 and server.engine.version == 0
        new = state_bytes(load_engine(tiny=ENV, seed=1).model)
        status, out = await _post(srv, "/update_weights", new, OCTET)
        assert (status, out["weight_version"]) == (200, "1")


async def test_a_stalled_json_body_times_out_too():
    server, srv = served(body_timeout_s=1.0)
    with srv:
        sock = _stall(srv.port, "/v1/completions", "application/json", 10_000, 100)
        status, text = await asyncio.to_thread(_answer, sock)
        sock.close()
    assert status == 408 and "did not arrive within 1 s" in text and server.rows == 0


async def test_weights_named_on_disk_are_bounded_like_an_upload(tmp_path):
    server, srv = served()
    (tmp_path / "big").mkdir()
    with (tmp_path / "big" / "model.safetensors").open("wb") as f:
        f.truncate(server.max_upload + 1)  # sparse: no disk used
    body = json.dumps({"model_path": str(tmp_path / "big")}).encode()
    with srv:
        status, out = await _post(srv, "/update_weights_from_disk", body, "application/json")
        assert status == 413 and "over twice the model's size" in out["error"]["message"]
        odd = json.dumps({"model_path": str(tmp_path), "path": "/etc"}).encode()
        status, out = await _post(srv, "/update_weights_from_disk", odd, "application/json")
        assert status == 400 and "'path'" in out["error"]["message"]
    assert server.engine.version == 0
