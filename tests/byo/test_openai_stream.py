"""The scripted OpenAI server streams (server-sent events) and `LLMClient` can read a stream."""

from __future__ import annotations

import json

import pytest

from gemkit.llm import LLMClient, LLMError
from gemkit.llm.client import ChatDelta, assemble_chunks
from gemkit.testing import ScriptedOpenAIServer
from gemkit.testing.openai_server import Reply, text_pieces

TOOL_REPLY = Reply(
    content="Let me look.",
    reasoning_content="The user wants the weather.",
    tool_calls=[{"name": "weather", "arguments": {"city": "Paris", "days": 2}}],
)


def test_text_pieces_join_back_to_the_text():
    for text in ["", "one", "  two  words ", "line\nbreak\n\n end", "tabs\tand  spaces"]:
        assert "".join(text_pieces(text)) == text


def test_the_official_openai_sdk_streams_from_the_scripted_server():
    openai = pytest.importorskip("openai", reason="needs the openai SDK (in the dev extra)")
    with ScriptedOpenAIServer(["Hello there, streaming world!", TOOL_REPLY]) as srv:
        client = openai.OpenAI(base_url=srv.base_url, api_key="k", max_retries=0)
        stream = client.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = list(stream)
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text == "Hello there, streaming world!"
        assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) == 4
        assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
        assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 4
        # the SDK's own accumulator rebuilds the tool call from its streamed pieces
        with client.chat.completions.stream(
            model="m", messages=[{"role": "user", "content": "weather?"}]
        ) as events:
            final = events.get_final_completion()
        call = final.choices[0].message.tool_calls[0]
        assert call.function.name == "weather"
        assert json.loads(call.function.arguments) == {"city": "Paris", "days": 2}
        assert final.choices[0].finish_reason == "tool_calls"
        assert srv.chat_requests[0].body["stream"] is True


async def test_llm_client_streams_pieces_in_order_and_returns_the_whole_answer():
    async with ScriptedOpenAIServer([TOOL_REPLY, TOOL_REPLY]) as srv:
        client = LLMClient(base_url=srv.base_url, model="m")
        pieces: list[ChatDelta] = []
        streamed = await client.chat_stream(
            [{"role": "user", "content": "weather?"}], on_delta=pieces.append
        )
        plain = await client.chat([{"role": "user", "content": "weather?"}])
        await client.close()
    assert streamed.content == plain.content == "Let me look."
    assert streamed.reasoning_content == plain.reasoning_content
    assert [c.to_dict()["function"] for c in streamed.tool_calls] == [
        c.to_dict()["function"] for c in plain.tool_calls
    ]
    assert streamed.tool_calls[0].id == "call_1_0_0"  # the id the server gave, kept
    assert streamed.finish_reason == "tool_calls" and streamed.usage == plain.usage
    assert "".join(p.content or "" for p in pieces) == "Let me look."
    assert sum(1 for p in pieces if p.content) == 3  # word by word, as it arrived
    assert client.usage.completion_tokens == 2 * plain.usage.completion_tokens


async def test_a_rate_limit_before_the_stream_is_retried_and_an_async_callback_awaited():
    seen = []

    async def on_delta(delta):
        seen.append(delta.content)

    async with ScriptedOpenAIServer(["ok then"], faults={1: "429"}) as srv:
        client = LLMClient(base_url=srv.base_url, model="m", backoff_base=0.01)
        response = await client.chat_stream([{"role": "user", "content": "x"}], on_delta=on_delta)
        await client.close()
    assert response.content == "ok then" and response.attempts == 2
    assert [r.outcome for r in srv.chat_requests] == ["rate_limited", "answered"]
    assert "".join(s or "" for s in seen) == "ok then"


async def test_several_choices_stream_apart():
    async with ScriptedOpenAIServer(["first answer", "second one here"]) as srv:
        client = LLMClient(base_url=srv.base_url, model="m")
        response = await client.chat_stream([{"role": "user", "content": "x"}], n=2)
        await client.close()
    assert [c.message.content for c in response.choices] == ["first answer", "second one here"]


def test_assembling_a_stream_merges_tool_call_pieces_by_index():
    chunks = [
        {"id": "c", "model": "m", "choices": [{"index": 0, "delta": {"role": "assistant"}}]},
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [
                            {"index": 0, "id": "a", "function": {"name": "f", "arguments": ""}},
                            {"index": 1, "id": "b", "function": {"name": "g"}},
                        ]
                    },
                }
            ]
        },
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 1, "function": {"arguments": '{"x"'}}]}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 1, "function": {"arguments": ": 1}"}}]}}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
    ]  # fmt: skip
    body = assemble_chunks(chunks)
    calls = body["choices"][0]["message"]["tool_calls"]
    assert [(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in calls] == [
        ("a", "f", ""),
        ("b", "g", '{"x": 1}'),
    ]
    assert body["choices"][0]["finish_reason"] == "tool_calls" and body["id"] == "c"


async def test_a_stream_that_breaks_after_its_first_pieces_is_not_sent_again():
    # a retry would hand the same pieces to on_delta twice: the broken stream is final
    from aiohttp import web

    requests = []

    async def half_a_stream(request):
        requests.append(await request.json())
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for word in ("one ", "two "):
            chunk = {
                "id": "c",
                "object": "chat.completion.chunk",
                "created": 0,
                "model": "m",
                "choices": [{"index": 0, "delta": {"content": word}, "finish_reason": None}],
            }
            await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
        request.transport.close()  # the connection drops mid-answer
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", half_a_stream)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    seen = []
    client = LLMClient(base_url=f"http://127.0.0.1:{port}/v1", model="m", backoff_base=0.01)
    try:
        with pytest.raises(LLMError, match="after 1 attempts and 2 chunks"):
            await client.chat_stream([{"role": "user", "content": "x"}], on_delta=seen.append)
    finally:
        await client.close()
        await runner.cleanup()
    assert len(requests) == 1 and [d.content for d in seen] == ["one ", "two "]
