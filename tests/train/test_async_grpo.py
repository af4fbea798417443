"""Fully asynchronous GRPO: staleness, filtering, the corrected loss, and the example end to end."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs the `train` extra (torch, transformers)")
pytest.importorskip("transformers", reason="needs the `train` extra (torch, transformers)")

from gemkit.train.offpolicy import (  # noqa: E402
    FILTERED,
    KEPT,
    STALE,
    Row,
    admit,
    corrected_loss,
    pack_rows,
    staleness,
)


def test_staleness_is_counted_from_the_oldest_token():
    assert staleness(5, [5, 4, 3]) == 2
    assert staleness(5, []) == 0
    assert staleness(2, [3]) == 0  # a sample from a newer version than the learner's is fresh


@pytest.mark.parametrize(
    ("rewards", "versions", "verdict"),
    [
        ([1.0, 1.0, 1.0, 1.0], [5], FILTERED),  # no GRPO signal
        ([0.0, 0.0, 0.0, 0.0], [5], FILTERED),
        ([0.0, 1.0, 0.0, 0.0], [2], STALE),  # 3 versions behind, bound 2
        ([0.0, 1.0, 0.0, 0.0], [3, 5], KEPT),  # exactly at the bound
    ],
)
def test_admit_filters_equal_rewards_and_drops_groups_past_the_bound(rewards, versions, verdict):
    assert admit(rewards, versions, 5, max_staleness=2) == verdict


def test_filtering_can_be_turned_off():
    assert admit([1.0, 1.0], [5], 5, max_staleness=0, filter_equal=False) == KEPT


def _logp_setup():
    torch.manual_seed(0)
    logits = torch.randn(2, 5, requires_grad=True)
    logp = torch.log_softmax(logits, dim=-1)
    mask = torch.tensor([[0, 1, 1, 1, 0], [0, 0, 1, 1, 1]], dtype=torch.float32)
    return logits, logp, mask


def test_on_policy_tokens_get_the_plain_reinforce_gradient():
    logits, logp, mask = _logp_setup()
    adv = torch.tensor([1.0, -0.5])
    loss, stats = corrected_loss(logp, logp.detach(), adv, mask)
    (grad,) = torch.autograd.grad(loss, logits, retain_graph=True)
    plain = -(adv.unsqueeze(1) * logp * mask).sum() / mask.sum()
    (expected,) = torch.autograd.grad(plain, logits)
    assert torch.allclose(grad, expected) and stats["is_weight"] == pytest.approx(1.0)


def test_stale_tokens_are_weighted_by_the_truncated_importance_ratio():
    logits, logp, mask = _logp_setup()
    adv = torch.tensor([1.0, 1.0])
    # the behaviour policy gave these tokens a log-prob 0.5 lower (ratio e^0.5) or 2 lower
    behaviour = logp.detach() - torch.tensor([[0.5] * 5, [2.0] * 5])
    loss, stats = corrected_loss(logp, behaviour, adv, mask, cap=2.0)
    (grad,) = torch.autograd.grad(loss, logits, retain_graph=True)
    weight = torch.tensor([[math.exp(0.5)] * 5, [2.0] * 5])  # e^2 > cap: truncated to 2
    target = -(weight * adv.unsqueeze(1) * logp * mask).sum() / mask.sum()
    (expected,) = torch.autograd.grad(target, logits)
    assert torch.allclose(grad, expected)
    assert stats["is_truncated"] == pytest.approx(3 / 6)


def test_pack_rows_puts_the_loss_mask_and_behaviour_logprobs_after_each_prompt():
    rows = [
        Row([1, 2], [3, 4, 5], [1, 0, 1], [-0.1, 0.0, -0.3], 1.0),
        Row([6], [7], [1], [-0.7], -1.0),
    ]
    ids, attn, mask, behaviour = pack_rows(rows, pad_id=0)
    assert ids.tolist() == [[1, 2, 3, 4, 5], [6, 7, 0, 0, 0]]
    assert mask.tolist() == [[0, 0, 1, 0, 1], [0, 1, 0, 0, 0]]
    assert attn.tolist() == [[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]]
    assert behaviour[0].tolist() == pytest.approx([0, 0, -0.1, 0, -0.3])


def test_async_grpo_runs_end_to_end_against_its_model_server(example, tmp_path):
    trainer = example("async_grpo")
    history = trainer.main(
        ["--tiny", "--env", "toy:Copy-v0", "--steps", "4", "--num-groups", "2", "--in-flight", "8",
         "--no-progress", "--out", str(tmp_path / "run")]
    )  # fmt: skip
    assert [h["step"] for h in history] == [1, 2, 3, 4]
    assert [h["version"] for h in history] == [1, 2, 3, 4]
    assert all(h["staleness_max"] <= 4 for h in history)  # the default --max-staleness
    assert history[-1]["episodes"] >= 4 * 2 * 4 and history[-1]["errors"] == 0
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert json.loads(lines[-1])["step"] == 4
    assert (tmp_path / "run" / "final" / "config.json").exists()
    log = (tmp_path / "run" / "server.log").read_text()
    assert "serving" in log


def test_async_grpo_learns_to_copy_words(example, tmp_path):
    trainer = example("async_grpo")
    history = trainer.main(
        ["--tiny", "--env", "toy:Copy-v0", "--steps", "30", "--no-progress",
         "--out", str(tmp_path / "run"), "--seed", "0"]
    )  # fmt: skip
    curve = [h["return"] for h in history]
    assert np.mean(curve[-5:]) > np.mean(curve[:3]) + 0.4, np.round(curve, 2).tolist()


def test_async_grpo_explains_bad_flags(example):
    trainer = example("async_grpo")
    with pytest.raises(SystemExit, match="exactly one of --tiny or --model"):
        trainer.main(["--env", "toy:Copy-v0"])
    with pytest.raises(SystemExit, match="--weight-sync must be"):
        trainer.main(["--tiny", "--weight-sync", "nccl"])


def test_async_grpo_explains_a_server_it_cannot_reach(example, tmp_path):
    from gemkit.train.server_process import free_port

    trainer = example("async_grpo")
    url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    with pytest.raises(SystemExit, match="error: cannot reach the server at .*Cannot connect"):
        trainer.main(["--tiny", "--env", "toy:Copy-v0", "--server", url, "--no-progress",
                      "--out", str(tmp_path / "run")])  # fmt: skip


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_the_server_it_starts_admits_max_new_tokens_and_requires_the_token(
    example, tmp_path, monkeypatch, device
):
    from types import SimpleNamespace

    trainer = example("async_grpo")
    started = {}

    class Recorder:
        def __init__(self, *args, **kwargs):
            started.update(args=args, kwargs=kwargs)

        def start(self):
            return self

    monkeypatch.setattr(trainer, "ForkedServer", Recorder)
    monkeypatch.setattr(trainer, "ServerProcess", Recorder)
    args = trainer.Args(tiny=True, env="toy:Copy-v0", max_new_tokens=300, token="s3cret", out=str(tmp_path))  # fmt: skip
    model = SimpleNamespace(device=torch.device(device))
    assert isinstance(trainer.start_server(args, model, object()), Recorder)
    if device == "cpu":  # forked: its limits must take 300 tokens a turn (the default is 256)
        kwargs = started["kwargs"]
        assert kwargs["limits"].max_tokens >= 300 and kwargs["token"] == "s3cret"
    else:  # `gemkit serve model` flags
        flags = started["args"][0]
        assert flags[flags.index("--max-tokens") + 1] == "300"
        assert flags[flags.index("--token") + 1] == "s3cret"


async def test_the_server_url_is_found_with_or_without_v1_and_names_its_models(example):
    import aiohttp
    from aiohttp import web

    from gemkit.errors import GemkitError

    trainer = example("async_grpo")

    async def models(_):
        return web.json_response({"object": "list", "data": [{"id": "qwen"}, {"id": "policy"}]})

    app = web.Application()
    app.router.add_get("/v1/models", models)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    root = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
    try:
        async with aiohttp.ClientSession() as session:
            for given in (root, root + "/", root + "/v1"):
                assert await trainer.resolve_server(session, given, {}) == (
                    root + "/v1",
                    ["qwen", "policy"],
                )
            with pytest.raises(
                GemkitError,
                match=r"GET /models answered 404 at .*/v2/models and .*/v2/v1/models; pass its base URL",
            ):
                await trainer.resolve_server(session, root + "/v2", {})
    finally:
        await runner.cleanup()


def test_async_grpo_refuses_raw_log_probs_of_another_distribution(example, tmp_path):
    # vLLM's default --logprobs-mode raw_logprobs reports temperature-1 log-probs of the full
    # distribution: at temperature 0.7 they are not the behaviour log-probs. The scripted
    # server ignores top_k, so its log-probs read as raw too.
    from gemkit.testing.token_server import TokenScriptedServer
    from gemkit.train.tiny import tiny_policy

    trainer = example("async_grpo")
    _, tok = tiny_policy("toy:Copy-v0", seed=0)
    with TokenScriptedServer(["lamp"] * 4, tokenizer=tok) as srv:
        with pytest.raises(SystemExit, match="raw log-probs .*--logprobs-mode processed_logprobs"):
            trainer.main(["--tiny", "--env", "toy:Copy-v0", "--server", srv.base_url, "--temperature", "0.7",
                          "--no-progress", "--out", str(tmp_path / "run")])  # fmt: skip


def test_async_grpo_refuses_sampling_it_cannot_recompute(example):
    trainer = example("async_grpo")
    with pytest.raises(SystemExit, match="top_p must be a number in"):
        trainer.main(["--tiny", "--top-p", "1.5"])
    with pytest.raises(SystemExit, match="greedily"):
        trainer.main(["--tiny", "--temperature", "0"])


def test_the_memory_flags_change_what_is_trained_not_what_is_computed(example, tmp_path):
    trainer = example("async_grpo")
    history = trainer.main(
        ["--tiny", "--env", "toy:Copy-v0", "--steps", "2", "--num-groups", "2", "--in-flight", "8",
         "--gradient-checkpointing", "--freeze-embeddings", "--no-progress", "--out", str(tmp_path / "run")]
    )  # fmt: skip
    assert [h["step"] for h in history] == [1, 2]
    from gemkit.train.tiny import tiny_policy

    start, _ = tiny_policy("toy:Copy-v0", seed=0)
    from transformers import AutoModelForCausalLM

    final = AutoModelForCausalLM.from_pretrained(tmp_path / "run" / "final")
    # the vocabulary matrix (tied in the tiny model) did not move; the layers did
    assert torch.equal(final.get_input_embeddings().weight, start.get_input_embeddings().weight)
    moved = [
        name for name, p in final.named_parameters()
        if "embed" not in name and not torch.equal(p, start.state_dict()[name])
    ]  # fmt: skip
    assert moved
