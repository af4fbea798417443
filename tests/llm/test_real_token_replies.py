"""Token answers recorded from a real vLLM and a real llama.cpp, read as gemkit reads them live.

`tests/data/real-model/tokens-exchanges.jsonl` holds one HTTP exchange a line (`server`,
`note`, `path`, `request`, `response`), recorded by `tests/data/real-model/record_tokens.py`
from vLLM 0.32 (CPU, `--logprobs-mode processed_logprobs`, and a second one in its default
raw mode) and llama.cpp, both serving Qwen2.5-Coder-0.5B-Instruct. A replay server on
127.0.0.1 answers each request with the recorded answer to the same request, so the policy,
the probe and the readers meet the real shapes offline.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from aiohttp import web

from gemkit.llm import LLMClient, LLMError, LLMPolicy
from gemkit.llm.sampled import from_chat_choice, from_completion_choice
from gemkit.llm.sampling import PROCESSED, RAW
from gemkit.llm.token_policy import logprobs_kind

RECORDED = Path(__file__).parents[1] / "data" / "real-model" / "tokens-exchanges.jsonl"
EXCHANGES = [json.loads(line) for line in RECORDED.read_text().splitlines()]


def exchange(server: str, note: str) -> dict:
    (found,) = [e for e in EXCHANGES if e["server"] == server and e["note"].startswith(note)]
    return found


class Replay:
    """Serves the recorded answer of `server` to each request it recorded: the one to the
    same body, else the only one recorded for that path."""

    def __init__(self, server: str):
        self.recorded = [e for e in EXCHANGES if e["server"] == server]

    async def handle(self, request: web.Request) -> web.Response:
        body = json.dumps(await request.json(), sort_keys=True)
        same = [e for e in self.recorded if e["path"] == request.path]
        exact = [e for e in same if json.dumps(e["request"], sort_keys=True) == body]
        if not exact and len(same) != 1:
            return web.json_response({"error": f"not recorded: {body[:200]}"}, status=404)
        e = (exact or same)[0]
        return web.json_response(e["response"], status=e["status"])

    async def __aenter__(self) -> str:
        app = web.Application()
        app.router.add_post("/{tail:.*}", self.handle)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        return f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}/v1"

    async def __aexit__(self, *exc) -> None:
        await self.runner.cleanup()


def test_a_recorded_vllm_sample_reads_as_ids_with_their_processed_log_probs():
    e = exchange("vllm-processed", "sample")
    choice = e["response"]["choices"][0]
    sampled = from_completion_choice(choice, e["response"])
    assert sampled.completion_ids == choice["token_ids"] and len(sampled.completion_ids) >= 2
    assert sampled.logprobs == choice["logprobs"]["token_logprobs"]
    assert sampled.prompt_ids == e["request"]["prompt"]  # vLLM conditioned on exactly these
    assert sampled.finish_reason in ("stop", "length")
    # every parameter was named in the request, so no generation_config default applied
    assert {"temperature", "top_p", "top_k", "min_p", "repetition_penalty"} <= set(e["request"])


def test_a_recorded_llama_cpp_sample_reads_ids_and_the_log_of_its_post_chain_probs():
    e = exchange("llama.cpp", "sample")
    content = e["response"]["choices"][0]["logprobs"]["content"]
    sampled = from_completion_choice(e["response"]["choices"][0], e["response"])
    assert sampled.completion_ids == [c["id"] for c in content]
    assert sampled.logprobs == pytest.approx([math.log(c["prob"]) for c in content])
    assert sampled.prompt_ids is None  # llama.cpp does not echo the prompt's ids


@pytest.mark.parametrize(
    ("server", "protocol", "note", "kind"),
    [
        ("vllm-processed", "completions", "probe", PROCESSED),
        ("vllm-raw", "completions", "probe", RAW),
        ("llama.cpp", "llama.cpp", "probe: top_k=1, post", PROCESSED),
        ("llama.cpp", "completions", "probe: top_k=1, raw", RAW),
    ],
)
async def test_the_probe_tells_processed_from_raw_log_probs_on_real_answers(
    server, protocol, note, kind
):
    prompt = exchange(server, note)["request"]["prompt"]
    async with Replay(server) as base, LLMClient(base_url=base, model="qwen") as client:
        assert await logprobs_kind(client, protocol=protocol, prompt=prompt) == kind


def test_a_real_vllm_chat_answer_carries_the_ids_a_token_turn_needs():
    e = exchange("vllm-processed", "chat")
    sampled = from_chat_choice(e["response"]["choices"][0], e["response"])
    assert sampled is not None and sampled.prompt_ids and sampled.completion_ids
    assert len(sampled.logprobs) == len(sampled.completion_ids)


async def test_a_real_llama_cpp_chat_answer_has_no_ids_and_the_policy_says_so():
    e = exchange("llama.cpp", "chat")
    assert from_chat_choice(e["response"]["choices"][0], e["response"]) is None
    async with Replay("llama.cpp") as base, LLMClient(base_url=base, model="qwen", max_retries=0) as client:  # fmt: skip
        policy = LLMPolicy(client, return_tokens=True, logprobs=PROCESSED, **_chat_sampling(e))
        with pytest.raises(LLMError, match="without token ids"):
            await policy.act(e["request"]["messages"][0]["content"])


def _chat_sampling(e: dict) -> dict:
    """The recorded chat request's sampling fields and max_tokens, as `LLMPolicy` kwargs."""
    keys = ("temperature", "top_p", "top_k", "min_p", "max_tokens")
    return {k: e["request"][k] for k in keys if k in e["request"]}
