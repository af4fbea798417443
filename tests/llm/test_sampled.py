"""Reading sampled token ids and log-probs from vLLM's and SGLang's answers."""

from __future__ import annotations

import pytest

from gemkit.llm import LLMClient, LLMPolicy
from gemkit.llm.client import ChatResponse
from gemkit.llm.sampled import (
    SampledTokensError,
    from_chat_choice,
    from_completion_choice,
    from_sglang,
    token_id,
)

CHAT_BODY = {"prompt_token_ids": [1, 2, 3], "weight_version": "4"}


def test_vllm_chat_token_ids_and_logprobs_pair_up():
    choice = {
        "index": 0,
        "token_ids": [7, 8],
        "logprobs": {"content": [{"token": "token_id:7", "logprob": -0.5}, {"token": "token_id:8", "logprob": -1.0}]},
    }  # fmt: skip
    s = from_chat_choice(choice, CHAT_BODY)
    assert (s.completion_ids, s.logprobs, s.prompt_ids, s.version) == (
        [7, 8],
        [-0.5, -1.0],
        [1, 2, 3],
        4,
    )


def test_older_vllm_gives_ids_only_as_token_id_strings():
    choice = {"logprobs": {"content": [{"token": "token_id:5", "logprob": -0.1}]}}
    assert from_chat_choice(choice, {}).completion_ids == [5]


def test_a_chat_answer_without_token_fields_has_no_tokens():
    assert from_chat_choice({"message": {"content": "hi"}}, {}) is None
    # text tokens (no return_tokens_as_token_ids, no token_ids) cannot be trusted as ids
    text_only = {"logprobs": {"content": [{"token": "hi", "logprob": -0.1}]}}
    assert from_chat_choice(text_only, {}) is None


def test_a_plain_chat_answer_with_a_null_text_logprob_has_no_tokens_and_no_error():
    # logprobs=true without token ids: the log-probs of text tokens are not checked (one may
    # be null, as some servers send for an unrepresentable token); the caller asked for none
    content = [{"token": "hi", "logprob": -0.1}, {"token": "!", "logprob": None}]
    choice = {"index": 0, "message": {"content": "hi!"}, "logprobs": {"content": content}}
    assert from_chat_choice(choice, {}) is None
    body = {"choices": [choice], "model": "m"}
    response = ChatResponse.from_dict(body)
    assert response.content == "hi!" and response.tokens is None
    # with token ids the same null is still refused
    ids = {**choice, "token_ids": [1, 2]}
    with pytest.raises(SampledTokensError, match="log-probability"):
        from_chat_choice(ids, {})


@pytest.mark.parametrize(
    ("choice", "message"),
    [
        ({"token_ids": [1, 2], "logprobs": {"content": [{"token": "token_id:1", "logprob": -1}]}}, "2 token ids but 1"),
        ({"token_ids": [1], "logprobs": {"content": [{"token": "token_id:2", "logprob": -1}]}}, "disagree"),
        ({"token_ids": ["x"]}, "expected a token id"),
        ({"token_ids": [1], "logprobs": {"content": [{"token": "token_id:1", "logprob": 0.5}]}}, "<= 0"),
        ({"token_ids": [True]}, "expected a token id"),
    ],
)  # fmt: skip
def test_an_answer_that_contradicts_itself_is_refused(choice, message):
    with pytest.raises(SampledTokensError, match=message):
        from_chat_choice(choice, {})


def test_vllm_completion_choice_reads_the_legacy_logprob_shape():
    choice = {
        "token_ids": [4, 2],
        "prompt_token_ids": [9],
        "logprobs": {"tokens": ["token_id:4", "token_id:2"], "token_logprobs": [-0.2, -0.3]},
    }
    s = from_completion_choice(choice, {})
    assert (s.completion_ids, s.logprobs, s.prompt_ids) == ([4, 2], [-0.2, -0.3], [9])


def test_a_completion_without_ids_says_which_fields_to_ask_for():
    with pytest.raises(SampledTokensError, match="return_token_ids"):
        from_completion_choice({"text": "hi"}, {})


def test_sglang_triples_give_ids_logprobs_and_weight_version():
    body = {"output_ids": [3, 4], "meta_info": {"output_token_logprobs": [[-0.1, 3, None], [-0.2, 4, "x"]], "weight_version": "9"}}  # fmt: skip
    s = from_sglang(body, [1])
    assert (s.completion_ids, s.logprobs, s.prompt_ids, s.version) == ([3, 4], [-0.1, -0.2], [1], 9)
    with pytest.raises(SampledTokensError, match="logprob, token_id"):
        from_sglang({"meta_info": {"output_token_logprobs": [[-0.1]]}})


def test_token_id_reads_ints_and_vllm_strings_only():
    assert token_id(3, "x") == 3 and token_id("token_id:12", "x") == 12
    for bad in ("12", "token_id:", 1.5, None):
        with pytest.raises(SampledTokensError):
            token_id(bad, "x")


# -- an LLMPolicy asking a vLLM-like server for tokens ---------------------------------------


@pytest.fixture(scope="module")
def tok():
    pytest.importorskip("tokenizers", reason="needs the `train` extra (tokenizers)")
    pytest.importorskip("transformers", reason="needs the `train` extra (transformers)")
    from gemkit.testing.tokenizer import chatml_bpe_tokenizer

    return chatml_bpe_tokenizer(["Guess a number. Higher. Lower. guess 50 guess 75"] * 30)


async def test_llm_policy_records_the_servers_tokens_and_the_rendered_prompt(tok):
    from gemkit.testing.token_server import TokenScriptedServer

    async with TokenScriptedServer(["guess 50", "guess 75"], tokenizer=tok) as srv:
        async with LLMClient(base_url=srv.base_url, model="m") as client:
            policy = LLMPolicy(client, return_tokens=True, logprobs="processed")
            await policy.act("Guess a number.")
            first = policy.last_tokens
            await policy.act("Higher.")
    body = srv.chat_requests[0].body
    assert body["return_token_ids"] is True and body["logprobs"] is True
    assert first.completion_ids == srv.sampled[0].completion_ids
    assert first.prompt_ids == srv.sampled[0].prompt_ids and not first.continues
    assert policy.last_tokens.completion_ids == srv.sampled[1].completion_ids
    # the re-rendered second prompt starts with the first prompt and the sampled ids
    assert policy.last_tokens.continues


async def test_chat_template_drift_starts_a_new_sequence_instead_of_joining_contexts(tok):
    # The server re-renders the whole chat each turn, re-tokenizing the model's earlier
    # answer. Here the sampler picked a non-canonical split of "guess 50" (one token per
    # character), so the re-rendered prompt does not start with prompt + sampled ids: the turn
    # must not claim to continue it (a trainer would learn on a context the model never saw).
    from gemkit.testing import Reply
    from gemkit.testing.token_server import TokenScriptedServer
    from gemkit.trajectory import turn_sequences

    chars = [i for ch in "guess 50" for i in tok(ch, add_special_tokens=False)["input_ids"]]
    first_reply = Reply(content="guess 50", token_ids=[*chars, tok.eos_token_id])
    async with TokenScriptedServer([first_reply, "guess 75"], tokenizer=tok) as srv:
        async with LLMClient(base_url=srv.base_url, model="m") as client:
            policy = LLMPolicy(client, return_tokens=True, logprobs="processed")
            await policy.act("Guess a number.")
            first = policy.last_tokens
            await policy.act("Higher.")
            second = policy.last_tokens
    context = srv.sampled[0].prompt_ids + srv.sampled[0].completion_ids
    assert srv.sampled[1].prompt_ids[: len(context)] != context
    assert not second.continues and second.prompt_ids == srv.sampled[1].prompt_ids
    assert len(turn_sequences([(first, 0.0), (second, 1.0)])) == 2


async def test_llm_policy_names_every_sampling_parameter_and_records_them(tok):
    # vLLM fills what a request leaves open from the checkpoint's generation_config.json
    # (top-k 20, top-p 0.8 in Qwen's folders): the behaviour policy must be what was asked
    from gemkit.testing.token_server import TokenScriptedServer

    async with TokenScriptedServer(["guess 50"], tokenizer=tok) as srv:
        async with LLMClient(base_url=srv.base_url, model="m") as client:
            policy = LLMPolicy(
                client, return_tokens=True, logprobs="processed", temperature=0.7, top_p=0.9
            )
            await policy.act("Guess a number.")
    body = srv.chat_requests[0].body
    assert {k: body[k] for k in ("temperature", "top_p", "top_k", "min_p")} == {
        "temperature": 0.7, "top_p": 0.9, "top_k": -1, "min_p": 0.0,
    }  # fmt: skip
    assert body["repetition_penalty"] == 1.0 and body["presence_penalty"] == 0.0
    assert policy.last_tokens.sampling["top_p"] == 0.9
    assert policy.last_tokens.sampling["logprobs"] == "processed"


async def test_llm_policy_asking_for_tokens_fails_loudly_when_the_server_sends_none():
    # llama.cpp's chat endpoint answers with text and log-probs but no token ids: a turn
    # recorded without tokens would reach a trainer as silent None
    from gemkit.llm import LLMError
    from gemkit.testing import ScriptedOpenAIServer

    async with ScriptedOpenAIServer(["guess 50"]) as srv:
        async with LLMClient(base_url=srv.base_url, model="m", max_retries=0) as client:
            policy = LLMPolicy(client, return_tokens=True, logprobs="processed")
            with pytest.raises(LLMError, match="without token ids.*TokenPolicy"):
                await policy.act("Guess a number.")
