"""Token-faithful rollouts: the ids an episode records are exactly the ids the server sampled.

A multi-turn, tool-using episode runs through `TokenPolicy` against a scripted server that
answers in vLLM's (and SGLang's) shapes, with a byte-level BPE tokenizer built here, so that
re-tokenizing the text of the chat would give other ids: a sampler may pick a non-canonical
split (`ap` + `ple` for `apple`), and text merges differently across a turn boundary.
"""

from __future__ import annotations

import json

import pytest

import gemkit
from gemkit.llm import LLMClient, TokenPolicy
from gemkit.rollout import Episode, run_episode
from gemkit.testing import Reply
from gemkit.tools import ToolEnvWrapper, tool
from gemkit.trajectory import TrajectoryError, episode_sequence, episode_sequences

pytest.importorskip("tokenizers", reason="needs the `train` extra (tokenizers, transformers)")
pytest.importorskip("transformers", reason="needs the `train` extra (transformers)")
torch = pytest.importorskip("torch", reason="needs the `train` extra (torch)")

from gemkit.testing.token_server import TokenScriptedServer  # noqa: E402

#: a scripted server's log-probs stand for those of the distribution it "sampled" from
SCRIPTED = "processed"
from gemkit.testing.tokenizer import chatml_bpe_tokenizer  # noqa: E402
from gemkit.train.offpolicy import Row, pack_rows  # noqa: E402

ENV = "toy:Copy-v0"
CALL = '<tool_call>\n{"name": "spell", "arguments": {"word": "apple"}}\n</tool_call>'


@tool
def spell(word: str) -> str:
    """Spell a word letter by letter.

    Args:
        word: The word to spell.
    """
    return " ".join(word)


@pytest.fixture(scope="module")
def tok():
    env = gemkit.make(ENV)
    texts = []
    for seed in range(20):
        obs, _ = env.reset(seed=seed)
        texts += [obs, "Correct. Word: river", "Wrong, the word was stone.", CALL, "a p p l e"]
    return chatml_bpe_tokenizer(texts * 5)


def client_for(srv) -> LLMClient:
    return LLMClient(base_url=srv.base_url, model="m", backoff_base=0.01)


def _ids(tok, text: str) -> list[int]:
    return tok(text, add_special_tokens=False)["input_ids"]


def _word(tok, seed: int, turn: int) -> str:
    env = gemkit.make(ENV)
    env.reset(seed=seed)
    for _ in range(turn):
        env.step("x")
    return env.unwrapped.word


async def _tool_episode(tok, srv_kwargs=None) -> tuple[Episode, TokenScriptedServer, list]:
    """Turn 1 calls the tool; turns 2-4 answer, one with a non-canonical split of its word."""
    words = [_word(tok, 3, k) for k in range(3)]
    # a split the tokenizer never produces from the text: one token per character
    odd = [i for ch in words[0] for i in _ids(tok, ch)]
    assert len(_ids(tok, words[0])) < len(odd)
    replies = [
        Reply(content=CALL),
        Reply(content=words[0], token_ids=[*odd, tok.eos_token_id]),
        Reply(content=f"{words[1]}."),
        Reply(content=words[2]),
    ]
    env = ToolEnvWrapper(gemkit.make(ENV), [spell])
    async with TokenScriptedServer(replies, tokenizer=tok, **(srv_kwargs or {})) as srv:
        async with client_for(srv) as client:
            episode = await run_episode(
                env, TokenPolicy(client, tok, logprobs=SCRIPTED, max_tokens=64), seed=3
            )
    return episode, srv, odd


async def test_recorded_ids_of_a_tool_using_episode_are_exactly_what_the_server_sampled(tok):
    episode, srv, odd = await _tool_episode(tok)
    assert episode.error is None and episode.num_turns == 4 and episode.tool_calls == 1
    assert episode.total_reward == 3.0
    seq = episode_sequence(episode)
    sampled = [s for s in srv.sampled]
    assert len(sampled) == 4
    # every turn's completion, recorded as sampled, turn boundaries included
    model_runs, env_runs, run, kind = [], [], [], None
    for t, m in zip(seq.response_ids, seq.mask, strict=True):
        if m != kind and run:
            (model_runs if kind else env_runs).append(run)
            run = []
        kind = m
        run.append(t)
    (model_runs if kind else env_runs).append(run)
    assert model_runs == [s.completion_ids for s in sampled]
    # the context each request carried is the prompt plus everything recorded before it
    for s in sampled:
        assert s.prompt_ids == seq.input_ids[: len(s.prompt_ids)]
        assert seq.input_ids[len(s.prompt_ids) : len(s.prompt_ids) + len(s.completion_ids)] == (
            s.completion_ids
        )
    # log-probs line up with the sampled tokens; env tokens carry 0.0 and mask 0
    model_logprobs = [lp for lp, m in zip(seq.logprobs, seq.mask, strict=True) if m]
    assert model_logprobs == [lp for s in sampled for lp in s.logprobs]
    assert all(lp == 0.0 for lp, m in zip(seq.logprobs, seq.mask, strict=True) if not m)
    # the env's tool result reached the model as tokens, once, between turn 1 and turn 2
    assert "a p p l e" in tok.decode(env_runs[0])
    # the test has teeth: re-tokenizing the decoded chat gives other ids than were sampled
    assert _ids(tok, tok.decode(odd)) != odd
    text = tok.decode(seq.input_ids)
    assert _ids(tok, text) != seq.input_ids


async def test_the_trainers_loss_mask_covers_exactly_the_models_tokens(tok):
    episode, srv, _ = await _tool_episode(tok)
    seq = episode_sequence(episode)
    row = Row(seq.prompt_ids, seq.response_ids, seq.mask, seq.logprobs, 1.0)
    ids, attn, loss_mask, behaviour = pack_rows([row, row], tok.pad_token_id)
    positions = [j for j in range(ids.shape[1]) if loss_mask[0, j] == 1]
    assert [int(ids[0, j]) for j in positions] == [t for s in srv.sampled for t in s.completion_ids]
    expected = [lp for s in srv.sampled for lp in s.logprobs]
    assert [float(behaviour[0, j]) for j in positions] == pytest.approx(expected)
    assert int(loss_mask.sum()) == 2 * sum(len(s.completion_ids) for s in srv.sampled)
    assert int(attn[0].sum()) == len(seq.input_ids)


async def test_an_episode_exports_to_trl_verl_and_openrlhf_without_retokenizing(tok):
    episode, srv, _ = await _tool_episode(tok)
    seq = episode_sequence(episode)
    trl, verl, orl = seq.to_trl(), seq.to_verl(), seq.to_openrlhf()
    assert trl["prompt_ids"] == verl["prompt_ids"] == srv.sampled[0].prompt_ids
    assert trl["completion_ids"] == verl["response_ids"] == seq.response_ids
    assert trl["env_mask"] == verl["response_mask"] == seq.mask
    assert verl["num_turns"] == 8
    assert orl["sequences"] == srv.sampled[-1].prompt_ids + srv.sampled[-1].completion_ids
    assert orl["action_mask"] == [0] * len(seq.prompt_ids) + seq.mask
    assert len(orl["rollout_log_probs"]) == len(orl["sequences"])


async def test_tokens_survive_the_jsonl_round_trip(tok, tmp_path):
    from gemkit.rollout import load_jsonl, save_jsonl

    episode, _, _ = await _tool_episode(tok)
    back = load_jsonl(save_jsonl([episode], tmp_path / "ep.jsonl"))[0]
    assert episode_sequence(back) == episode_sequence(episode)
    line = json.loads((tmp_path / "ep.jsonl").read_text())
    assert line["turns"][1]["tokens"]["continues"] is True


async def test_each_turn_records_the_version_the_server_reports(tok):
    episode, _, _ = await _tool_episode(tok, {"weight_version": 7})
    assert [t.tokens.version for t in episode.turns] == [7, 7, 7, 7]
    assert set(episode_sequence(episode).model_versions) == {7}


async def test_a_version_callback_stands_in_for_a_server_that_reports_none(tok):
    async with TokenScriptedServer(["apple"], tokenizer=tok) as srv, client_for(srv) as client:
        policy = TokenPolicy(client, tok, logprobs=SCRIPTED, version=lambda: 3)
        await policy.act("Word: apple")
    assert policy.last_tokens.version == 3


async def test_the_sglang_protocol_records_the_same_tokens(tok):
    async with TokenScriptedServer(["apple", "river"], tokenizer=tok, weight_version=2) as srv:
        client = LLMClient(base_url=srv.base_url.removesuffix("/v1"), model="m")
        async with client:
            policy = TokenPolicy(client, tok, logprobs=SCRIPTED, protocol="sglang", max_tokens=8)
            await policy.act("Word: apple")
            first = policy.last_tokens
            await policy.act("Correct. Word: river")
    assert [s.path for s in srv.sampled] == ["/generate", "/generate"]
    assert first.completion_ids == srv.sampled[0].completion_ids and first.version == 2
    assert policy.last_tokens.continues
    assert srv.sampled[1].prompt_ids[: len(srv.sampled[0].prompt_ids)] == srv.sampled[0].prompt_ids


async def test_a_completion_cut_at_max_tokens_is_recorded_cut(tok):
    async with TokenScriptedServer(["apple river stone"], tokenizer=tok) as srv:
        async with client_for(srv) as client:
            policy = TokenPolicy(client, tok, logprobs=SCRIPTED, max_tokens=2)
            await policy.act("Word: apple")
    assert len(policy.last_tokens.completion_ids) == 2
    assert policy.last_tokens.completion_ids == srv.sampled[0].completion_ids


def test_an_episode_without_tokens_is_refused_by_the_export():
    from gemkit.rollout import Turn

    ep = Episode("x", 0, [Turn("o", "a", 1.0, True, False)])
    with pytest.raises(TrajectoryError, match="no token ids"):
        episode_sequences(ep)
    assert episode_sequences(ep, strict=False) == []


@pytest.mark.parametrize("text", ["Correct. Word: apple", f"x {CALL} <|im_end|> y", "", " a\n\nb "])
def test_env_and_markup_text_encode_exactly_as_the_tokenizer_does(tok, text):
    from gemkit.llm.episode_tokens import _markup_ids, text_ids

    for _ in range(2):  # the wrapper leaves its split flag set after a call: no influence
        assert text_ids(tok, text) == tok(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]  # fmt: skip
        assert _markup_ids(tok, text) == (tok(text, add_special_tokens=False)["input_ids"] if text else [])  # fmt: skip


def test_tokens_added_to_the_tokenizer_are_seen_by_the_fast_path():
    from gemkit.llm.episode_tokens import text_ids

    tok = chatml_bpe_tokenizer(["apple river"] * 20)
    before = text_ids(tok, "zebra")
    tok.add_tokens(["zebra"])
    assert text_ids(tok, "zebra") == [tok.convert_tokens_to_ids("zebra")] != before
