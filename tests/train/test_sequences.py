"""Token plumbing: the loss sees only the model's own tokens; tiny tokenizer and model work offline."""

from __future__ import annotations

import dataclasses

import pytest

from gemkit.train.args import parse_args

torch = pytest.importorskip("torch", reason="needs the `train` extra (torch, transformers)")
pytest.importorskip("transformers", reason="needs the `train` extra (torch, transformers)")

from gemkit.train.sequences import pack, policy_loss, sample, token_logprobs  # noqa: E402
from gemkit.train.tiny import tiny_policy, word_tokenizer  # noqa: E402


def test_pack_masks_prompt_and_padding_out_of_the_loss():
    ids, attn, mask = pack([[5, 6, 7], [8]], [[9, 2], [10, 11, 2]], pad_id=0)
    assert ids.tolist() == [[5, 6, 7, 9, 2], [8, 10, 11, 2, 0]]
    assert attn.tolist() == [[1, 1, 1, 1, 1], [1, 1, 1, 1, 0]]
    assert mask.tolist() == [[0, 0, 0, 1, 1], [0, 1, 1, 1, 0]]


def test_plain_loss_gradient_is_minus_advantage_times_grad_logp():
    logp = torch.tensor([[0.0, -1.0, -2.0]], requires_grad=True)
    mask = torch.tensor([[0.0, 1.0, 1.0]])
    loss, _ = policy_loss(logp, logp.detach(), torch.tensor([3.0]), mask)
    loss.backward()
    assert logp.grad.tolist() == [[0.0, -1.5, -1.5]]  # -A / number of response tokens


def test_clipping_stops_the_gradient_once_the_ratio_leaves_the_trust_region():
    old = torch.zeros(1, 2)
    logp = torch.tensor([[0.0, 0.5]], requires_grad=True)  # ratio 1.65 on token 2
    loss, stats = policy_loss(logp, old, torch.tensor([1.0]), torch.ones(1, 2), clip=0.2)
    loss.backward()
    assert logp.grad[0, 1] == 0.0 and logp.grad[0, 0] < 0
    assert stats["clip_frac"] == 0.5


def test_boxed_moves_are_single_tokens_and_unknown_words_map_to_unk():
    tok = word_tokenizer(["Guess a number ."], actions=["\\boxed{7}", "\\boxed{12}"])
    pieces = tok.convert_ids_to_tokens(tok("Guess \\boxed{12} zebra")["input_ids"])
    assert pieces == ["Guess", "\\boxed{12}", "<unk>"]
    assert tok.decode(tok("\\boxed{7}")["input_ids"]) == "\\boxed{7}"


def test_tiny_policy_samples_responses_that_end_at_eos_and_scores_them():
    torch.manual_seed(0)
    model, tok = tiny_policy("game:GuessTheNumber-v0-easy", episodes=2)
    prompts = [tok("Guess a number")["input_ids"], tok("Your guess")["input_ids"]]
    responses = sample(model, prompts, pad_id=tok.pad_token_id, eos_id=tok.eos_token_id,
                       max_new_tokens=3)  # fmt: skip
    assert all(1 <= len(r) <= 3 for r in responses)
    assert all(tok.eos_token_id not in r[:-1] for r in responses)
    ids, attn, mask = pack(prompts, responses, tok.pad_token_id)
    logp = token_logprobs(model, ids, attn)
    assert logp.shape == ids.shape and bool((logp[mask.bool()] < 0).all())


@dataclasses.dataclass
class _Flags:
    name: str = "x"
    rate: float | None = None
    fast: bool = False


def test_parse_args_builds_the_dataclass_from_flags():
    assert parse_args(_Flags, ["--rate", "0.5", "--fast"]) == _Flags("x", 0.5, True)
    assert parse_args(_Flags, ["--rate", "none"]).rate is None


def test_parse_args_rejects_a_bad_value_with_a_usage_message(capsys):
    with pytest.raises(SystemExit):
        parse_args(_Flags, ["--rate", "fast"])
    assert "--rate expects a float or 'none', got 'fast'" in capsys.readouterr().err


def _reference_kept(logits: list[float], params) -> set[int]:
    """The tokens `params` keeps, worked out one token at a time (no sorting tricks)."""
    import math

    scaled = [x / params.temperature for x in logits]
    top = max(scaled)
    probs = [math.exp(x - top) for x in scaled]
    total = sum(probs)
    probs = [p / total for p in probs]
    kept = set(range(len(logits)))
    if params.min_p > 0:
        kept = {i for i in kept if probs[i] >= params.min_p * max(probs)}
    if params.top_k != -1:
        kth = sorted((scaled[i] for i in kept), reverse=True)[min(params.top_k, len(kept)) - 1]
        kept = {i for i in kept if scaled[i] >= kth}  # ties with the k-th stay
    if params.top_p < 1:
        mass = sum(probs[i] for i in kept)
        ranked = sorted(kept, key=lambda i: -scaled[i])
        chosen, acc = set(), 0.0
        for i in ranked:  # the most likely first, until the mass reaches top_p
            chosen.add(i)
            acc += probs[i] / mass
            if acc >= params.top_p:
                break
        kept = chosen
    return kept


@pytest.mark.parametrize(
    "fields",
    [
        dict(temperature=0.7, top_k=3),
        dict(temperature=1.0, top_p=0.8),
        dict(temperature=0.7, top_p=0.9, top_k=5),
        dict(temperature=1.3, min_p=0.1),
        dict(temperature=0.5, top_k=2, top_p=0.5, min_p=0.01),
    ],
)
def test_processed_logits_keep_what_vllms_sampler_keeps_and_renormalise(fields):
    from gemkit.llm.sampling import SamplingParams
    from gemkit.train.sequences import processed_logits

    params = SamplingParams(**fields)
    gen = torch.Generator().manual_seed(3)
    logits = torch.randn(6, 11, generator=gen) * 2
    logits[0, 2] = logits[0, 5]  # a tie at some rank
    out = torch.log_softmax(processed_logits(logits, params), dim=-1)
    for row in range(logits.shape[0]):
        kept = {int(i) for i in torch.nonzero(torch.isfinite(out[row])).flatten()}
        assert kept == _reference_kept(logits[row].tolist(), params)
        assert float(out[row, sorted(kept)].exp().sum()) == pytest.approx(1.0, abs=1e-5)
        # a kept token's log-prob is its tempered log-prob, renormalised over what is kept
        scaled = torch.log_softmax(logits[row] / params.temperature, dim=-1)
        shift = torch.logsumexp(scaled[sorted(kept)], dim=0)
        for i in kept:
            assert float(out[row, i]) == pytest.approx(float(scaled[i] - shift), abs=1e-5)


def test_token_logprobs_under_top_k_one_is_zero_for_the_argmax_and_minus_inf_elsewhere():
    from gemkit.llm.sampling import SamplingParams

    torch.manual_seed(0)
    model, tok = tiny_policy("game:GuessTheNumber-v0-easy", episodes=2)
    greedy = torch.tensor([tok("Guess")["input_ids"]])
    for _ in range(4):  # decode greedily: each token is the argmax after the ones before
        nxt = model(input_ids=greedy).logits[0, -1].argmax()
        greedy = torch.cat([greedy, nxt.view(1, 1)], dim=1)
    logp = token_logprobs(model, greedy, torch.ones_like(greedy), sampling=SamplingParams(top_k=1))
    assert logp[0, 1:].tolist() == [0.0] * (greedy.shape[1] - 1)
    other = greedy.clone()
    other[0, 1] = (other[0, 1] + 1) % model.config.vocab_size
    logp = token_logprobs(model, other, torch.ones_like(other), sampling=SamplingParams(top_k=1))
    assert logp[0, 1] == float("-inf")


def test_log_probs_of_masked_positions_only_equal_the_full_pass():
    from gemkit.llm.sampling import SamplingParams

    torch.manual_seed(0)
    model, tok = tiny_policy("toy:Copy-v0", episodes=2)
    ids = torch.randint(3, len(tok), (3, 12))
    attn = torch.ones_like(ids)
    mask = torch.zeros(ids.shape)
    mask[:, 5:] = 1
    mask[1, 9:] = 0
    for params in (SamplingParams(), SamplingParams(temperature=0.7, top_p=0.9, top_k=5)):
        full = token_logprobs(model, ids, attn, sampling=params)
        part = token_logprobs(model, ids, attn, sampling=params, mask=mask)
        keep = mask > 0
        assert torch.equal(part[~keep], torch.zeros_like(part[~keep]))
        assert torch.allclose(part[keep], full[keep], atol=1e-5, equal_nan=True)
