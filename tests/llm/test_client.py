"""The LLM client against a real scripted OpenAI-protocol server on localhost."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from gemkit.errors import GemkitError
from gemkit.llm import LLMClient, LLMConfigError, LLMError, Message, ToolCall
from gemkit.llm.client import (
    DEFAULT_MAX_TOKENS,
    DEFAULT_TIMEOUT,
    ContextWindowError,
    LLMTimeoutError,
)
from gemkit.testing import Fault, Reply, ScriptedOpenAIServer

FAST = {"backoff_base": 0.01, "backoff_max": 0.05}


def client_for(srv: ScriptedOpenAIServer, **kwargs) -> LLMClient:
    return LLMClient(base_url=srv.base_url, model="test-model", **{**FAST, **kwargs})


REAL = Path(__file__).parents[1] / "data" / "real-model"


def recorded_probes(probe: str) -> list[dict]:
    """The answers real servers gave to one probe of `record_probes.py` (vLLM, llama.cpp)."""
    rows = []
    for path in sorted(REAL.glob("*-probes.jsonl")):
        for line in path.read_text().splitlines():
            row = json.loads(line)
            if row["probe"] == probe:
                rows.append(row)
    return rows


WINDOW_REFUSALS = [r["response"] for r in recorded_probes("over_window")]


@contextlib.asynccontextmanager
async def one_route_server(path: str, handler) -> AsyncIterator[str]:
    """A real aiohttp server on 127.0.0.1 answering `path` with `handler`; its /v1 base URL."""
    app = web.Application()
    app.router.add_post(path, handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    await web.SockSite(runner, sock).start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    finally:
        await runner.cleanup()


def echo(body: dict) -> str:
    return "echo: " + body["messages"][-1]["content"]


async def test_plain_reply_comes_back_as_content():
    async with ScriptedOpenAIServer(["Hello there."]) as srv, client_for(srv) as client:
        response = await client.chat([{"role": "user", "content": "hi"}])
    assert response.content == "Hello there."
    assert response.message.role == "assistant"
    assert response.tool_calls == []
    assert response.finish_reason == "stop"
    assert srv.chat_requests[0].body["model"] == "test-model"
    assert srv.chat_requests[0].body["messages"] == [{"role": "user", "content": "hi"}]


async def test_reasoning_content_is_kept_apart_from_content():
    reply = Reply(content="The answer is 4.", reasoning_content="2 plus 2 makes 4")
    async with ScriptedOpenAIServer([reply]) as srv, client_for(srv) as client:
        response = await client.chat([{"role": "user", "content": "2+2?"}])
    assert response.content == "The answer is 4."
    assert response.reasoning_content == "2 plus 2 makes 4"
    assert "2 plus 2" not in response.content


async def test_tool_calls_are_parsed_with_raw_and_decoded_arguments():
    reply = Reply(tool_calls=[{"name": "search", "arguments": {"query": "paris"}}])
    tools = [{"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}]
    async with ScriptedOpenAIServer([reply]) as srv, client_for(srv) as client:
        response = await client.chat([{"role": "user", "content": "find"}], tools=tools)
    (call,) = response.tool_calls
    assert call.name == "search"
    assert json.loads(call.arguments) == {"query": "paris"}
    assert call.parsed_arguments() == {"query": "paris"}
    assert call.id == "call_1_0_0"
    assert response.finish_reason == "tool_calls"
    assert srv.chat_requests[0].body["tools"] == tools


async def test_tool_history_messages_are_sent_in_openai_form():
    history = [
        {"role": "user", "content": "find paris"},
        Message(role="assistant", tool_calls=[ToolCall("c1", "search", '{"query": "paris"}')]),
        Message(role="tool", content="Paris is in France", tool_call_id="c1", name="search"),
    ]
    async with ScriptedOpenAIServer(["France."]) as srv, client_for(srv) as client:
        await client.chat(history)
    sent = srv.chat_requests[0].body["messages"]
    assert sent[1] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "search", "arguments": '{"query": "paris"}'},
            }
        ],
    }
    assert sent[2] == {
        "role": "tool",
        "content": "Paris is in France",
        "tool_call_id": "c1",
        "name": "search",
    }


async def test_sampling_params_defaults_and_extra_body_reach_the_server():
    async with ScriptedOpenAIServer(["a", "b"]) as srv, client_for(srv, temperature=0.3) as client:
        await client.chat(
            [{"role": "user", "content": "x"}],
            top_p=0.9,
            max_tokens=7,
            stop=["\n"],
            seed=3,
            extra_body={"top_k": 20},
        )
        await client.chat([{"role": "user", "content": "y"}], temperature=1.0)
    first, second = (r.body for r in srv.chat_requests)
    assert {
        k: first[k] for k in ("temperature", "top_p", "max_tokens", "stop", "seed", "top_k")
    } == {
        "temperature": 0.3,
        "top_p": 0.9,
        "max_tokens": 7,
        "stop": ["\n"],
        "seed": 3,
        "top_k": 20,
    }
    assert second["temperature"] == 1.0
    assert "top_p" not in second
    assert second["max_tokens"] == DEFAULT_MAX_TOKENS  # the client's bound, unless a call says


async def test_n_samples_come_back_as_choices():
    async with ScriptedOpenAIServer(["one", "two"]) as srv, client_for(srv) as client:
        response = await client.chat([{"role": "user", "content": "x"}], n=2)
    assert [c.message.content for c in response.choices] == ["one", "two"]


async def test_usage_totals_add_up_over_requests():
    async with ScriptedOpenAIServer(["one two three", "four"]) as srv, client_for(srv) as client:
        r1 = await client.chat([{"role": "user", "content": "a b"}])
        r2 = await client.chat([{"role": "user", "content": "c d e"}])
    assert (r1.usage.prompt_tokens, r1.usage.completion_tokens) == (2, 3)
    assert (r2.usage.prompt_tokens, r2.usage.completion_tokens) == (3, 1)
    assert (
        client.usage.prompt_tokens,
        client.usage.completion_tokens,
        client.usage.total_tokens,
    ) == (5, 4, 9)
    assert client.num_requests == 2


@pytest.mark.parametrize("kind", ["rate_limit", "server_error", "drop"])
async def test_transient_failure_is_retried_and_answered_once(kind):
    async with (
        ScriptedOpenAIServer(["ok"], faults={1: kind, 2: kind}) as srv,
        client_for(srv) as client,
    ):
        response = await client.chat([{"role": "user", "content": "x"}])
    assert response.content == "ok"
    assert response.attempts == 3
    assert [r.fault for r in srv.chat_requests] == [kind, kind, None]
    assert len(srv.answered) == 1
    assert client.num_retries == 2


async def test_an_accepted_request_left_unanswered_is_not_sent_again():
    # a slow server that took the request is still working on it: a retry would queue the
    # same work from scratch behind it; the error says which setting gives it more time
    slow = Fault("slow", delay=2.0)
    async with (
        ScriptedOpenAIServer(["ok"], faults={1: slow}) as srv,
        client_for(srv, timeout=0.2) as client,
    ):
        with pytest.raises(LLMTimeoutError) as err:
            await client.chat([{"role": "user", "content": "x"}])
    message = str(err.value)
    assert "accepted it and sent no answer within 0.2 s" in message
    assert "--timeout" in message and "GEMKIT_TIMEOUT" in message
    assert "\n" not in message
    assert err.value.attempts == 1
    assert len(srv.chat_requests) == 1
    assert client.num_retries == 0


async def test_a_timeout_after_a_retried_failure_counts_every_attempt():
    faults = {1: "server_error", 2: Fault("slow", delay=2.0)}
    async with (
        ScriptedOpenAIServer(["ok"], faults=faults) as srv,
        client_for(srv, timeout=0.2) as client,
    ):
        with pytest.raises(LLMTimeoutError) as err:
            await client.chat([{"role": "user", "content": "x"}])
    assert err.value.attempts == 2
    assert [r.fault for r in srv.chat_requests] == ["server_error", "slow"]


async def test_a_call_timeout_overrides_the_clients_and_a_slow_reply_within_it_arrives():
    slow = Fault("slow", delay=0.3)
    async with (
        ScriptedOpenAIServer(["ok"], faults={1: slow}) as srv,
        client_for(srv, timeout=0.05) as client,
    ):
        response = await client.chat([{"role": "user", "content": "x"}], timeout=30)
    assert (response.content, response.attempts) == ("ok", 1)


def test_the_timeout_comes_from_the_argument_then_the_env_var_then_the_default(monkeypatch):
    monkeypatch.delenv("GEMKIT_TIMEOUT", raising=False)
    base = {"base_url": "http://127.0.0.1:9/v1", "model": "m"}
    assert LLMClient(**base).timeout == DEFAULT_TIMEOUT
    monkeypatch.setenv("GEMKIT_TIMEOUT", "900")
    assert LLMClient(**base).timeout == 900.0
    assert LLMClient(**base, timeout=5).timeout == 5.0


@pytest.mark.parametrize("value", ["soon", "0", "-3", "inf", "nan"])
def test_a_bad_timeout_env_var_is_a_one_line_config_error(monkeypatch, value):
    monkeypatch.setenv("GEMKIT_TIMEOUT", value)
    with pytest.raises(LLMConfigError, match="GEMKIT_TIMEOUT") as err:
        LLMClient(base_url="http://127.0.0.1:9/v1", model="m")
    assert "\n" not in str(err.value)


def test_a_bad_timeout_or_max_tokens_argument_is_a_config_error(monkeypatch):
    monkeypatch.delenv("GEMKIT_TIMEOUT", raising=False)
    base = {"base_url": "http://127.0.0.1:9/v1", "model": "m"}
    with pytest.raises(LLMConfigError, match="timeout= must be a number of seconds > 0"):
        LLMClient(**base, timeout=0)
    with pytest.raises(LLMConfigError, match="max_tokens must be a whole number >= 1"):
        LLMClient(**base, max_tokens=0)


async def test_a_connect_that_fails_is_retried_and_says_so():
    # nothing listens on port 9: the connection is refused before any request is sent
    client = LLMClient(base_url="http://127.0.0.1:9/v1", model="m", max_retries=2, **FAST)
    with pytest.raises(LLMError, match="failed after 3 attempts: connection error") as err:
        await client.chat([{"role": "user", "content": "x"}])
    await client.close()
    assert not isinstance(err.value, LLMTimeoutError)
    assert client.num_retries == 2


async def test_a_request_over_the_context_window_is_a_context_window_error_not_retried():
    # the error bodies of real servers (tests/data/real-model/vllm-probes.jsonl and
    # llama-cpp-probes.jsonl): a request that does not fit, refused with HTTP 400
    assert WINDOW_REFUSALS, "no recorded over-window refusal under tests/data/real-model"
    for body in WINDOW_REFUSALS:

        async def refuse(request: web.Request, body: dict = body) -> web.Response:
            return web.json_response(body, status=400)

        async with one_route_server("/v1/chat/completions", refuse) as url:
            client = LLMClient(base_url=url, model="m", **FAST)
            with pytest.raises(ContextWindowError, match="does not fit the model's context") as e:
                await client.chat([{"role": "user", "content": "x"}])
            await client.close()
        assert e.value.status == 400 and e.value.attempts == 1
        assert client.num_attempts == 1


async def test_retry_after_header_sets_the_wait():
    fault = Fault("rate_limit", retry_after=0.3)
    async with ScriptedOpenAIServer(["ok"], faults={1: fault}) as srv, client_for(srv) as client:
        await client.chat([{"role": "user", "content": "x"}])
    first, second = srv.chat_requests
    assert second.received_at - first.received_at >= 0.29


async def test_retries_exhausted_raise_a_clear_error():
    async with ScriptedOpenAIServer(
        ["never"], faults={i: "server_error" for i in range(1, 10)}
    ) as srv:
        async with client_for(srv, max_retries=2) as client:
            with pytest.raises(LLMError, match="failed after 3 attempts: HTTP 500") as err:
                await client.chat([{"role": "user", "content": "x"}])
    assert err.value.status == 500
    assert len(srv.chat_requests) == 3


async def test_client_error_is_not_retried():
    async with ScriptedOpenAIServer([], api_key="right") as srv:
        async with client_for(srv, api_key="wrong") as client:
            with pytest.raises(
                LLMError, match="rejected the request \\(HTTP 401\\): invalid API key"
            ):
                await client.chat([{"role": "user", "content": "x"}])
    assert len(srv.chat_requests) == 1


async def test_api_key_is_sent_as_bearer_token():
    async with ScriptedOpenAIServer(["ok"], api_key="sk-test") as srv:
        async with client_for(srv, api_key="sk-test") as client:
            assert (await client.chat([{"role": "user", "content": "x"}])).content == "ok"
    assert srv.chat_requests[0].headers["Authorization"] == "Bearer sk-test"


async def test_many_concurrent_requests_under_random_faults_are_each_answered_exactly_once():
    faults = [Fault("rate_limit", retry_after=0.01), "server_error", "drop"]
    async with ScriptedOpenAIServer(echo, fault_rate=0.3, fault_kinds=faults, seed=7) as srv:
        async with client_for(srv, max_concurrency=4, max_retries=20, seed=1) as client:
            prompts = [f"prompt {i}" for i in range(40)]
            responses = await asyncio.gather(
                *(client.chat([{"role": "user", "content": p}]) for p in prompts)
            )
    assert [r.content for r in responses] == [f"echo: {p}" for p in prompts]
    answered = sorted(r.body["messages"][-1]["content"] for r in srv.answered)
    assert answered == sorted(prompts)
    faulted = [r for r in srv.chat_requests if r.fault]
    assert faulted, "the seeded fault rate should have hit some requests"
    assert len(srv.chat_requests) == 40 + len(faulted)
    assert client.num_retries == len(faulted)
    assert srv.max_in_flight <= 4


async def test_concurrency_limit_bounds_requests_in_flight():
    async def slow_echo(body: dict) -> str:
        await asyncio.sleep(0.1)
        return echo(body)

    async with ScriptedOpenAIServer(slow_echo) as srv, client_for(srv, max_concurrency=3) as client:
        await asyncio.gather(
            *(client.chat([{"role": "user", "content": str(i)}]) for i in range(9))
        )
    assert srv.max_in_flight == 3


async def test_models_lists_the_served_model():
    async with ScriptedOpenAIServer([], model="served") as srv, client_for(srv) as client:
        assert await client.models() == ["served"]


async def test_script_exhausted_is_reported_not_retried():
    async with ScriptedOpenAIServer([]) as srv, client_for(srv) as client:
        with pytest.raises(LLMError, match="no scripted reply left for request #1"):
            await client.chat([{"role": "user", "content": "x"}])


async def test_unreachable_endpoint_fails_after_retries_with_the_url():
    client = LLMClient(base_url="http://127.0.0.1:9/v1", model="m", max_retries=1, **FAST)
    with pytest.raises(LLMError, match="127.0.0.1:9/v1 failed after 2 attempts: connection error"):
        await client.chat([{"role": "user", "content": "x"}])
    await client.close()


def test_missing_endpoint_is_a_clear_config_error(monkeypatch):
    monkeypatch.delenv("GEMKIT_BASE_URL", raising=False)
    with pytest.raises(LLMConfigError, match="pass base_url= or set GEMKIT_BASE_URL"):
        LLMClient(model="m")


def test_missing_model_is_a_clear_config_error(monkeypatch):
    monkeypatch.delenv("GEMKIT_MODEL", raising=False)
    with pytest.raises(GemkitError, match="pass model= or set GEMKIT_MODEL"):
        LLMClient(base_url="http://localhost:8000/v1")


def test_config_comes_from_env_vars(monkeypatch):
    monkeypatch.setenv("GEMKIT_BASE_URL", "http://h:1/v1/")
    monkeypatch.setenv("GEMKIT_API_KEY", "k")
    monkeypatch.setenv("GEMKIT_MODEL", "env-model")
    client = LLMClient()
    assert (client.base_url, client.api_key, client.model) == ("http://h:1/v1", "k", "env-model")


def test_sync_server_serves_a_client_run_under_asyncio_run_twice():
    with ScriptedOpenAIServer(["first", "second"]) as srv:
        client = LLMClient(base_url=srv.base_url, model="m")

        async def ask() -> str:
            return (await client.chat([{"role": "user", "content": "x"}])).content

        # The same client survives two event loops (each asyncio.run makes a new one).
        assert asyncio.run(ask()) == "first"
        assert asyncio.run(ask()) == "second"
        asyncio.run(client.close())
    assert len(srv.answered) == 2


def test_scripted_server_rejects_an_unknown_fault_kind():
    with pytest.raises(GemkitError, match="unknown fault kind 'explode'"):
        ScriptedOpenAIServer([], faults={1: "explode"})


async def test_no_sampling_parameter_is_sent_unless_given_only_the_reply_bound():
    # the server's own sampling defaults apply: the client invents no temperature, but it
    # bounds every reply (a weak model can write to the end of its window)
    async with ScriptedOpenAIServer(["a"]) as srv, client_for(srv) as client:
        await client.chat([{"role": "user", "content": "x"}])
    body = srv.chat_requests[0].body
    assert set(body) == {"model", "messages", "max_tokens"}
    assert body["max_tokens"] == DEFAULT_MAX_TOKENS


async def test_max_tokens_none_sends_no_bound_and_a_client_bound_applies_to_every_call():
    async with ScriptedOpenAIServer(["a", "b"]) as srv:
        async with client_for(srv, max_tokens=None) as client:
            await client.chat([{"role": "user", "content": "x"}])
        async with client_for(srv, max_tokens=64) as client:
            await client.chat([{"role": "user", "content": "y"}])
    first, second = (r.body for r in srv.chat_requests)
    assert "max_tokens" not in first
    assert second["max_tokens"] == 64


async def test_cached_prompt_tokens_are_read_and_summed():
    usage = {"prompt_tokens": 300, "completion_tokens": 5, "total_tokens": 305,
             "prompt_tokens_details": {"cached_tokens": 120}}  # fmt: skip
    script = [Reply("a", usage=usage), Reply("b", usage={"prompt_tokens": 10, "cached_tokens": 4})]
    async with ScriptedOpenAIServer(script) as srv, client_for(srv) as client:
        r1 = await client.chat([{"role": "user", "content": "x"}])
        await client.chat([{"role": "user", "content": "y"}])
    assert (r1.usage.prompt_tokens, r1.usage.cached_tokens) == (300, 120)
    assert (client.usage.prompt_tokens, client.usage.cached_tokens) == (310, 124)


def test_malformed_usage_fields_read_as_zero():
    from gemkit.llm.client import Usage

    odd = Usage.from_dict({"prompt_tokens": None, "completion_tokens": "x", "total_tokens": 7.0,
                           "prompt_tokens_details": "n/a"})  # fmt: skip
    assert (odd.prompt_tokens, odd.completion_tokens, odd.total_tokens, odd.cached_tokens) == (
        0, 0, 7, 0,
    )  # fmt: skip
    assert Usage.from_dict([1, 2]) == Usage()


async def test_the_scripted_server_cuts_a_reply_at_max_tokens_words():
    async with ScriptedOpenAIServer(["one two three four"]) as srv, client_for(srv) as client:
        r = await client.chat([{"role": "user", "content": "x"}], max_tokens=2)
    assert (r.content, r.finish_reason, r.usage.completion_tokens) == ("one two", "length", 2)
