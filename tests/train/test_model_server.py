"""`gemkit serve model`: a real aiohttp server over the tiny model, with token ids, log-probs
and versioned weight updates."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import aiohttp
import pytest

import gemkit
from gemkit.llm import LLMClient, TokenPolicy
from gemkit.rollout import run_episode
from gemkit.trajectory import episode_sequence

torch = pytest.importorskip("torch", reason="needs the `train` extra (torch, transformers)")
pytest.importorskip("transformers", reason="needs the `train` extra (torch, transformers)")

from aiohttp import web  # noqa: E402

from gemkit.llm.sampling import trainable  # noqa: E402
from gemkit.train.engine import load_engine  # noqa: E402
from gemkit.train.model_server import ModelServer, ServerLimits  # noqa: E402
from gemkit.train.sequences import pack, token_logprobs  # noqa: E402
from gemkit.train.server_process import ServerProcess  # noqa: E402
from gemkit.train.weight_updates import state_bytes  # noqa: E402

ENV = "toy:Copy-v0"


class Served:
    """A `ModelServer` on a free 127.0.0.1 port of the test's event loop."""

    def __init__(self, **kwargs):
        self.engine = load_engine(tiny=ENV, names=["m"])  # the name the clients below ask for
        self.server = ModelServer(self.engine, **kwargs)

    async def __aenter__(self):
        self.runner = web.AppRunner(self.server.app())
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        self.root = f"http://127.0.0.1:{port}"
        self.http = aiohttp.ClientSession()
        return self

    async def __aexit__(self, *exc):
        await self.http.close()
        await self.runner.cleanup()

    async def post(self, path, headers=None, **kwargs):
        async with self.http.post(self.root + path, headers=headers, **kwargs) as resp:
            return resp.status, json.loads(await resp.text())

    def client(self, **kwargs) -> LLMClient:
        return LLMClient(base_url=self.root + "/v1", model="m", backoff_base=0.01, **kwargs)


def assert_trainers_logprobs(model, episodes) -> None:
    """Every sampled token's served log-prob is what `model` gives it in a training pass
    under the sampling parameters the turn recorded."""
    seqs = [episode_sequence(ep) for ep in episodes]
    (sampling,) = {json.dumps(q.sampling, sort_keys=True) for q in seqs}
    params = trainable(json.loads(sampling))
    ids, attn, _ = pack([q.prompt_ids for q in seqs], [q.response_ids for q in seqs], 0)
    logp = token_logprobs(model, ids, attn, sampling=params)
    for row, q in enumerate(seqs):
        p = len(q.prompt_ids)
        for j, (lp, m) in enumerate(zip(q.logprobs, q.mask, strict=True)):
            if m:
                assert float(logp[row, p + j].detach()) == pytest.approx(lp, abs=1e-4)


async def test_served_logprobs_are_the_trainers_logprobs_for_the_same_weights():
    async with Served() as s, s.client() as client:
        episodes = await asyncio.gather(
            *(run_episode(gemkit.make(ENV), TokenPolicy(client, s.engine.tokenizer, max_tokens=4), seed=k) for k in range(8))
        )  # fmt: skip
    assert all(ep.error is None for ep in episodes)
    assert_trainers_logprobs(s.engine.model, episodes)
    # concurrent episodes were sampled together: fewer forward passes than requests (one more
    # row: the policies' shared question of what the log-probs are)
    assert s.server.rows == sum(ep.num_turns for ep in episodes) + 1
    assert s.server.batches < s.server.rows
    assert {t.tokens.sampling["logprobs"] for ep in episodes for t in ep.turns} == {"processed"}


@pytest.mark.parametrize(
    "params", [dict(temperature=0.7, top_p=0.9, top_k=5), dict(temperature=1.3, min_p=0.05)]
)
async def test_served_logprobs_under_top_k_top_p_and_min_p_are_the_trainers(params):
    async with Served() as s, s.client() as client:
        episodes = await asyncio.gather(
            *(run_episode(gemkit.make(ENV), TokenPolicy(client, s.engine.tokenizer, max_tokens=4, **params), seed=k) for k in range(4))
        )  # fmt: skip
    assert all(ep.error is None for ep in episodes)
    assert all(
        t.tokens.sampling[k] == v for ep in episodes for t in ep.turns for k, v in params.items()
    )
    assert_trainers_logprobs(s.engine.model, episodes)


async def test_completions_answer_in_vllms_shape_with_the_weight_version():
    async with Served() as s:
        prompt = s.engine.tokenizer("Copy each word I show. Word: apple", add_special_tokens=False)[
            "input_ids"
        ]
        body = {"prompt": prompt, "max_tokens": 3, "n": 2, "logprobs": 1, "return_token_ids": True, "return_tokens_as_token_ids": True}  # fmt: skip
        status, out = await s.post("/v1/completions", json=body)
    assert status == 200 and out["weight_version"] == "0" and len(out["choices"]) == 2
    c = out["choices"][0]
    assert c["prompt_token_ids"] == prompt and 1 <= len(c["token_ids"]) <= 3
    assert c["logprobs"]["tokens"] == [f"token_id:{t}" for t in c["token_ids"]]
    assert all(lp <= 0 for lp in c["logprobs"]["token_logprobs"])


async def test_chat_completions_return_the_token_fields_when_asked():
    async with Served() as s:
        body = {"messages": [{"role": "user", "content": "Word: apple"}], "max_tokens": 2, "logprobs": True, "return_token_ids": True}  # fmt: skip
        status, out = await s.post("/v1/chat/completions", json=body)
    assert status == 200
    from gemkit.llm.sampled import from_chat_choice

    tokens = from_chat_choice(out["choices"][0], out)
    assert (
        tokens.version == 0
        and tokens.prompt_ids
        and len(tokens.logprobs) == len(tokens.completion_ids)
    )


async def test_a_weight_update_is_versioned_and_changes_what_is_sampled():
    async with Served() as s:
        prompt = [3, 4, 5]
        _, before = await s.post("/v1/completions", json={"prompt": prompt, "max_tokens": 1, "temperature": 0, "logprobs": 1})  # fmt: skip
        new = load_engine(tiny=ENV, seed=1).model  # other weights, same architecture
        status, out = await s.post("/update_weights?weight_version=1", data=state_bytes(new))
        assert (status, out["weight_version"]) == (200, "1")
        _, after = await s.post("/v1/completions", json={"prompt": prompt, "max_tokens": 1, "temperature": 0, "logprobs": 1})  # fmt: skip
        assert after["weight_version"] == "1"
        assert (
            after["choices"][0]["logprobs"]["token_logprobs"]
            != before["choices"][0]["logprobs"]["token_logprobs"]
        )
        # versions go up one at a time: neither an old one nor a jump is taken
        for version in (1, 3):
            status, out = await s.post(f"/update_weights?weight_version={version}", data=state_bytes(new))  # fmt: skip
            assert status == 409 and "must be the next version, 2" in out["error"]["message"]
        status, out = await s.post("/update_weights", data=state_bytes(new))
        assert (status, out["weight_version"]) == (200, "2")


async def test_weights_from_disk_use_sglangs_request(tmp_path):
    async with Served() as s:
        load_engine(tiny=ENV, seed=1).model.save_pretrained(tmp_path / "w")
        status, out = await s.post("/update_weights_from_disk", json={"model_path": str(tmp_path / "w"), "weight_version": "1"})  # fmt: skip
        assert (status, out["weight_version"]) == (200, "1")
        status, out = await s.post("/update_weights_from_disk", json={"model_path": str(tmp_path / "none")})  # fmt: skip
        assert status == 400 and "no *.safetensors" in out["error"]["message"]


async def test_a_request_sampled_across_an_update_reports_one_version():
    async with Served() as s, s.client() as client:
        new = state_bytes(load_engine(tiny=ENV, seed=1).model)

        async def sample():
            policy = TokenPolicy(client, s.engine.tokenizer, max_tokens=4)
            await policy.act("Copy each word I show. Word: apple")
            return policy.last_tokens.version

        results = await asyncio.gather(
            *(sample() for _ in range(16)), s.post("/update_weights", data=new)
        )
    assert set(results[:-1]) <= {0, 1} and results[-1][0] == 200


async def test_tokens_are_required_on_every_endpoint_when_set():
    async with Served(token="s3cret") as s:
        status, out = await s.post("/update_weights", data=b"x")
        assert status == 401 and "Bearer" in out["error"]["message"]
        status, _ = await s.post("/v1/completions", json={"prompt": [1]})
        assert status == 401
        status, _ = await s.post("/v1/completions", json={"prompt": [1], "max_tokens": 1}, headers={"Authorization": "Bearer s3cret"})  # fmt: skip
        assert status == 200


def test_serve_model_runs_as_a_command_and_answers():
    with ServerProcess(["--tiny", ENV, "--served-model-name", "m"]) as proc:

        async def ask():
            async with LLMClient(base_url=proc.url, model="m") as client:
                policy = TokenPolicy(client, load_engine(tiny=ENV).tokenizer, max_tokens=2)
                await policy.act("Word: apple")
                return policy.last_tokens

        tokens = asyncio.run(ask())
    assert tokens.version == 0 and 1 <= len(tokens.completion_ids) <= 2


def test_serve_model_explains_a_missing_model(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "gemkit", "serve", "model", str(tmp_path / "nope")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    said = " ".join((done.stdout + done.stderr).split())
    assert done.returncode == 2 and "is not a folder; pass a local Hugging Face" in said
    assert "Traceback" not in done.stdout + done.stderr


def test_server_limits_default_to_bounded_work():
    limits = ServerLimits()
    assert limits.max_tokens <= 1024 and limits.max_n <= 16 and limits.max_batch <= 256


def test_a_server_started_by_a_trainer_dies_with_it(tmp_path):
    # the trainer is killed without any chance to clean up (SIGKILL): its server must not
    # stay behind holding a port and a model
    import os
    import signal
    import time

    pytest.importorskip("ctypes")
    if not sys.platform.startswith("linux"):
        pytest.skip("parent-death signals are a Linux feature")
    script = tmp_path / "trainer.py"
    script.write_text(
        "import time\n"
        "from gemkit.train.server_process import ServerProcess\n"
        f"p = ServerProcess(['--tiny', {ENV!r}]).start()\n"
        "p.wait()\n"
        "print(p.proc.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    trainer = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    child = int(trainer.stdout.readline())
    os.kill(trainer.pid, signal.SIGKILL)
    trainer.wait()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            state = open(f"/proc/{child}/stat").read().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return
        if state == "Z":  # exited; its new parent has not reaped it yet
            return
        time.sleep(0.2)
    os.kill(child, signal.SIGKILL)
    pytest.fail("the server outlived the trainer that started it")


async def test_batched_turns_record_the_same_kind_of_tokens_in_fewer_requests():
    from gemkit.llm import TokenBatcher

    async with Served() as s, s.client() as client:
        batcher = TokenBatcher(client, max_batch=8, wait_s=10.0)  # a batch of 8 sends at once
        policies = [TokenPolicy(batcher, s.engine.tokenizer, max_tokens=4) for _ in range(8)]
        episodes = await asyncio.gather(
            *(run_episode(gemkit.make(ENV), p, seed=k) for k, p in enumerate(policies))
        )
        await batcher.aclose()
    assert all(ep.error is None for ep in episodes), [ep.error for ep in episodes]
    turns = sum(ep.num_turns for ep in episodes)
    # one more row than turns: the policies' shared question of what the log-probs are
    assert s.server.rows == turns + 1 and batcher.requests < turns
    # each episode got its own completion back: the log-probs are the trainer's for its ids
    assert_trainers_logprobs(s.engine.model, episodes)


async def test_a_refused_batch_fails_every_turn_in_it_with_the_servers_message():
    from gemkit.llm import LLMError, TokenBatcher

    async with Served(limits=ServerLimits(max_batch=2)) as s, s.client(max_retries=0) as client:
        batcher = TokenBatcher(client, max_batch=4, wait_s=10.0)  # the 4th turn sends the batch
        turns = [batcher.generate([1, 2, k], max_tokens=2, temperature=1.0) for k in range(4)]
        results = await asyncio.gather(*turns, return_exceptions=True)
        await batcher.aclose()
    assert batcher.requests == 1
    assert all(isinstance(r, LLMError) and "rows per request" in str(r) for r in results), results


async def test_a_json_body_over_max_body_is_refused_before_it_is_read_but_weights_still_load():
    # the app's client_max_size is the weight upload's (twice the model): a JSON route must
    # stop at max_body, by Content-Length or, without one, once max_body + 1 bytes arrived
    async with Served(limits=ServerLimits(max_body=64 * 1024)) as s:
        big = json.dumps({"prompt": [1] * 34_000, "max_tokens": 1}).encode()
        assert len(big) > 100_000
        status, out = await s.post("/v1/completions", data=big, headers={"Content-Type": "application/json"})  # fmt: skip
        assert (
            status == 413
            and "65,536 bytes" in out["error"]["message"]
            and "--max-body-kb" in out["error"]["message"]
        )
        assert "\n" not in out["error"]["message"]
        status, out = await s.post("/v1/chat/completions", data=big, headers={"Content-Type": "application/json"})  # fmt: skip
        assert status == 413 and "--max-body-kb" in out["error"]["message"]

        async def chunks():  # no Content-Length: chunked transfer encoding
            for k in range(0, len(big), 8192):
                yield big[k : k + 8192]

        status, out = await s.post("/v1/completions", data=chunks(), headers={"Content-Type": "application/json"})  # fmt: skip
        assert status == 413 and "--max-body-kb" in out["error"]["message"]
        weights = state_bytes(load_engine(tiny=ENV, seed=1).model)
        assert len(weights) > 64 * 1024
        status, out = await s.post("/update_weights?weight_version=1", data=weights)
        assert (status, out["weight_version"]) == (200, "1")
        status, out = await s.post("/v1/completions", json={"prompt": [1, 2], "max_tokens": 1})
        assert status == 200 and out["weight_version"] == "1"


async def test_a_server_without_a_token_takes_the_environments(monkeypatch):
    monkeypatch.setenv("GEMKIT_SERVE_TOKEN", "from-env")
    async with Served(token=None) as s:
        assert s.server.token == "from-env"
        status, out = await s.post("/v1/completions", json={"prompt": [1], "max_tokens": 1})
        assert status == 401 and "Bearer" in out["error"]["message"]
        status, _ = await s.post("/v1/completions", json={"prompt": [1], "max_tokens": 1}, headers={"Authorization": "Bearer from-env"})  # fmt: skip
        assert status == 200
    monkeypatch.setenv("GEMKIT_SERVE_TOKEN", "")
    assert ModelServer(load_engine(tiny=ENV)).token is None


async def test_rows_per_request_are_capped_for_one_prompt_and_for_chat():
    async with Served(limits=ServerLimits(max_batch=2)) as s:
        status, out = await s.post("/v1/completions", json={"prompt": [1, 2], "max_tokens": 1, "n": 3})  # fmt: skip
        assert status == 400 and "1 prompt x n=3" in out["error"]["message"] and "rows per request" in out["error"]["message"]  # fmt: skip
        status, out = await s.post("/v1/completions", json={"prompt": "Word: apple", "max_tokens": 1, "n": 3})  # fmt: skip
        assert status == 400 and "rows per request" in out["error"]["message"]
        chat = {"messages": [{"role": "user", "content": "Word: apple"}], "max_tokens": 1, "n": 3}
        status, out = await s.post("/v1/chat/completions", json=chat)
        assert status == 400 and "rows per request" in out["error"]["message"]
        status, out = await s.post("/v1/chat/completions", json={**chat, "n": 2})
        assert status == 200 and len(out["choices"]) == 2
        assert s.server.rows == 2  # the refused requests sampled nothing


async def test_the_kv_cache_argument_is_found_once_per_engine(monkeypatch):
    from gemkit.train import engine

    async with Served() as s:
        assert s.engine.cache_arg in ("cache", "past_key_values")

        def per_batch(model):
            raise AssertionError("the cache argument is looked up per batch")

        monkeypatch.setattr(engine, "_cache_argument", per_batch)
        status, out = await s.post("/v1/completions", json={"prompt": [1, 2], "max_tokens": 3, "temperature": 0})  # fmt: skip
        assert status == 200 and out["choices"][0]["finish_reason"] in ("stop", "length")


@pytest.mark.parametrize(
    "argv",
    [
        ["serve", "model", "--tiny", ENV, "--max-tokens", "0"],
        ["serve", "search", "corpus.jsonl", "--max-topk", "x"],
        ["serve", "env", "toy:Copy-v0", "--workers", "0"],
    ],
)
def test_serve_flags_share_one_positive_number_check(capsys, argv):
    from gemkit.cli import main as cli

    with pytest.raises(SystemExit) as e:
        cli(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and "expected a" in err and "_positive_int" not in err
