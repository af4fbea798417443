"""Against the real servers (vLLM and llama.cpp serving Qwen2.5-Coder-0.5B-Instruct): what a slow
server with a small window does to gemkit's requests, and what gemkit does about it.

The servers come from the live harness (`tests/live/conftest.py`: its `vllm` and `llama`
fixtures, `make live`). Each test asks for a few tokens, `test_synth_tasks_*` aside (a few
programs: two or three minutes on 2 CPU cores).
"""

from __future__ import annotations

import asyncio
import json
import urllib.request

import pytest

from gemkit.llm import LLMClient
from gemkit.llm.client import ContextWindowError, LLMTimeoutError
from gemkit.llm.token_counters import ServerTokenCounter

pytestmark = pytest.mark.live

CHAT = [{"role": "user", "content": "What is 17 * 23? Put your final answer inside \\boxed{}."}]


def served(request: pytest.FixtureRequest, kind: str) -> tuple[str, str]:
    """(base URL, a model name it serves) of the harness's server `kind` (`vllm`, `llama`)."""
    try:
        url = request.getfixturevalue(kind)
    except pytest.FixtureLookupError:
        pytest.skip("the live harness (tests/live/conftest.py) is not in this checkout")
    with urllib.request.urlopen(f"{url}/models", timeout=10) as r:
        return url, json.loads(r.read())["data"][0]["id"]


@pytest.fixture(params=["vllm", "llama"])
def server(request: pytest.FixtureRequest) -> tuple[str, str, str]:
    return (request.param, *served(request, request.param))


def ask(url: str, model: str, messages: list[dict], **kw) -> object:
    async def go() -> object:
        async with LLMClient(base_url=url, model=model, max_retries=0) as client:
            return await client.chat(messages, **kw)

    return asyncio.run(go())


def test_a_chat_over_the_window_is_a_context_window_error(server):
    kind, url, model = server
    long = [{"role": "user", "content": "hello " * 4200}]  # past vLLM's and a slot's 4,096
    with pytest.raises(ContextWindowError, match="does not fit the model's context window"):
        ask(url, model, long, max_tokens=1)


def test_a_reply_cut_at_max_tokens_says_length(server):
    kind, url, model = server
    response = ask(url, model, CHAT, max_tokens=4, temperature=0)
    assert response.finish_reason == "length" and response.usage.completion_tokens == 4


def test_the_server_counter_counts_the_prompt_the_server_reads(server):
    kind, url, model = server
    counter = ServerTokenCounter(url, model)
    response = ask(url, model, CHAT, max_tokens=1, temperature=0)
    assert counter.exact and counter.window == 4096
    assert counter.count_messages(CHAT) == response.usage.prompt_tokens


def test_a_reply_slower_than_the_timeout_fails_once_naming_the_flag(server):
    kind, url, model = server
    count = [{"role": "user", "content": "Count from 1 to 1000, one number per line."}]

    async def go() -> LLMClient:
        client = LLMClient(base_url=url, model=model, timeout=0.5)
        with pytest.raises(LLMTimeoutError, match="--timeout SECONDS or GEMKIT_TIMEOUT"):
            await client.chat(count, max_tokens=1000, temperature=0)
        await client.close()
        return client

    client = asyncio.run(go())
    assert (client.num_attempts, client.num_retries) == (1, 0)


def test_synth_tasks_on_a_small_window_ends_every_conversation(request, tmp_path):
    from gemkit.synth.tasks.run import RunConfig, run_synthesis

    url, model = served(request, "llama")
    config = RunConfig(category="shopping_basket", n=1, out=tmp_path, min_level=1, max_level=1,
                       k=0, llm=url, model=model, export=False, max_attempts=1, max_repairs=1,
                       max_tokens=800, timeout=900)  # fmt: skip
    summary = run_synthesis(config)
    log = (tmp_path / "progress.log").read_text()
    assert "ended after" in log
    if not summary.records:
        (rejected,) = map(json.loads, (tmp_path / "rejected.jsonl").read_text().splitlines())
        assert rejected["reason"].startswith("the model's code never verified")
    assert (tmp_path / "run.json").exists()
