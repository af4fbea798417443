"""Token counters: the heuristic default and any Hugging Face tokenizer passed in."""

from __future__ import annotations

import pytest

from gemkit.llm.token_counters import (
    MESSAGE_OVERHEAD,
    FunctionTokenCounter,
    HeuristicTokenCounter,
    HFTokenCounter,
    as_counter,
    message_text,
)


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
