"""Token counters: the heuristic default, any Hugging Face tokenizer passed in, and the model
server's own tokenizer (against recorded answers of real vLLM and llama.cpp)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from aiohttp import web

from gemkit.llm.token_counters import (
    MESSAGE_OVERHEAD,
    FunctionTokenCounter,
    HeuristicTokenCounter,
    HFTokenCounter,
    ServerTokenCounter,
    as_counter,
    message_text,
)
from gemkit.testing import ScriptedOpenAIServer


class CharTokenizer:
    """Duck-typed HF tokenizer: one token per character, a template that adds 3 per message."""

    chat_template = "{{ fake }}"

    def __init__(self):
        self.encoded: list[tuple[str, bool]] = []

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        self.encoded.append((text, add_special_tokens))
        return [ord(c) for c in text] + ([0] if add_special_tokens else [])

    def apply_chat_template(self, messages: list[dict], tokenize: bool = False) -> list[int]:
        assert tokenize
        return [1] * sum(3 + len(m.get("content") or "") for m in messages)


def test_heuristic_counts_a_token_per_four_characters_of_each_word_and_per_punctuation_mark():
    counter = HeuristicTokenCounter()
    assert counter.count("") == 0
    assert counter.count("the cat sat") == 3
    assert counter.count("internationalization") == 5  # 20 chars
    assert counter.count("f(x) = 1;") == 7  # f ( x ) = 1 ;


def test_heuristic_message_count_includes_reasoning_tool_calls_and_overhead():
    message = {
        "role": "assistant",
        "content": "ok",
        "reasoning_content": "think more",
        "tool_calls": [
            {
                "id": "1",
                "type": "function",
                "function": {"name": "search", "arguments": '{"q": "x"}'},
            }
        ],
    }
    assert message_text(message) == 'think more\nok\nsearch\n{"q": "x"}'
    # words: think (5 chars: 2) more (1) ok (1) search (2); punctuation: { " q " : " x " } (9)
    assert HeuristicTokenCounter().count_messages([message]) == MESSAGE_OVERHEAD + 6 + 9


def test_hf_counter_uses_the_tokenizer_without_special_tokens():
    tok = CharTokenizer()
    counter = HFTokenCounter(tok, chat_template=False)
    assert counter.count("hello") == 5
    assert tok.encoded == [("hello", False)]
    assert counter.count_messages([{"role": "user", "content": "hey"}]) == MESSAGE_OVERHEAD + 3


def test_hf_counter_renders_chats_with_the_chat_template_when_there_is_one():
    counter = HFTokenCounter(CharTokenizer())
    assert counter.chat_template
    assert (
        counter.count_messages(
            [{"role": "user", "content": "hey"}, {"role": "assistant", "content": "yo"}]
        )
        == 11
    )


def test_hf_counter_without_a_template_counts_per_message():
    class Plain:
        def encode(self, text, add_special_tokens=True):
            return text.split()

    counter = HFTokenCounter(Plain())
    assert not counter.chat_template
    assert counter.count_messages([{"role": "user", "content": "a b c"}]) == MESSAGE_OVERHEAD + 3


def test_as_counter_accepts_none_a_counter_or_a_function():
    assert isinstance(as_counter(None), HeuristicTokenCounter)
    hf = HFTokenCounter(CharTokenizer())
    assert as_counter(hf) is hf
    words = as_counter(lambda text: len(text.split()))
    assert isinstance(words, FunctionTokenCounter)
    assert words.count("a b c") == 3
    with pytest.raises(
        TypeError, match="counter must be a TokenCounter, a function text -> int, or None"
    ):
        as_counter(42)  # type: ignore[arg-type]


# -- the server's own tokenizer (recorded answers of real vLLM and llama.cpp) --------------------

REAL = Path(__file__).parents[1] / "data" / "real-model"


def probes(kind: str) -> list[dict]:
    return [json.loads(x) for x in (REAL / f"{kind}-probes.jsonl").read_text().splitlines()]


def probe(kind: str, name: str) -> dict:
    return next(r for r in probes(kind) if r["probe"] == name)


class RecordedServer(ScriptedOpenAIServer):
    """Answers each request a real server was recorded answering with the recorded answer."""

    def __init__(self, kind: str):
        super().__init__()
        self.recorded = probes(kind)
        self.asked: list[str] = []

    def _add_routes(self, app: web.Application) -> None:
        app.router.add_route("*", "/{path:(tokenize|apply-template|props|detokenize)}", self._probe)

    async def _probe(self, request: web.Request) -> web.Response:
        body = await request.json() if request.can_read_body else None
        self.asked.append(request.path)
        for r in self.recorded:
            if r["path"] == request.path and r["request"] == body:
                return web.json_response(r["response"], status=r["status"])
        return web.json_response({"error": f"no recorded answer to {body}"}, status=500)


@pytest.mark.parametrize("kind", ["vllm", "llama-cpp"])
def test_the_server_counter_counts_with_the_servers_tokenizer_and_template(kind):
    asked_text = probe(kind, "tokenize_text")["request"]
    text = asked_text.get("prompt") or asked_text["content"]
    messages = probe("vllm", "tokenize_chat")["request"]["messages"]
    with RecordedServer(kind) as srv:
        counter = ServerTokenCounter(srv.base_url, "qwen")
        assert counter.count(text) == 18
        assert counter.count_messages(messages) == 37
        assert counter.count_messages(messages) == 37  # cached: no request
        asked = list(srv.asked)
    assert counter.exact and counter.kind == ("vllm" if kind == "vllm" else "llama.cpp")
    assert counter.window == 4096  # vLLM's max_model_len, a llama.cpp slot's n_ctx
    assert counter.source.endswith(f"/tokenize at {srv.base_url[:-3]}")
    per_chat = 1 if kind == "vllm" else 2  # llama.cpp: /apply-template, then /tokenize
    assert len(asked) == 1 + (kind != "vllm") + 1 + per_chat, asked


def test_the_heuristic_misjudges_a_real_tool_chat_the_server_counts_exactly():
    # a toolworld chat a real model saw: JSON tool schemas, which the heuristic counts a token
    # per mark; with --max-context 3000 it would report the chat past the 0.8 trigger (2400)
    messages = probe("vllm", "tokenize_tool_chat")["request"]["messages"]
    with RecordedServer("vllm") as srv:
        exact = ServerTokenCounter(srv.base_url, "qwen").count_messages(messages)
    estimate = HeuristicTokenCounter().count_messages(messages)
    assert exact == 1758 == len(probe("llama-cpp", "tokenize_tool_chat")["response"]["tokens"])
    assert estimate == 2761 and estimate > 0.8 * 3000 > exact


def test_a_server_without_tokenize_gets_the_heuristic_and_says_so(caplog):
    chat = [{"role": "user", "content": "What is 17 * 23?"}]
    with ScriptedOpenAIServer() as srv:  # answers chat completions only: /tokenize is a 404
        counter = ServerTokenCounter(srv.base_url, "m")
        with caplog.at_level("WARNING", logger="gemkit.llm.token_counters"):
            assert counter.count_messages(chat) == HeuristicTokenCounter().count_messages(chat)
            assert counter.count("a b") == HeuristicTokenCounter().count("a b")
    assert not counter.exact and counter.window is None
    assert counter.source.startswith("the heuristic estimate (") and "has no /tokenize" in (
        counter.source
    )
    warnings = [r for r in caplog.records if "heuristic estimate instead" in r.getMessage()]
    assert len(warnings) == 1, "said once, not at every count"


def test_the_counter_never_names_the_credentials_of_its_url():
    counter = ServerTokenCounter("http://user:secret@127.0.0.1:9/v1", "m", timeout=5)
    assert not counter.exact  # nothing listens on port 9
    assert "secret" not in counter.source and "127.0.0.1:9 has no /tokenize" in counter.source
