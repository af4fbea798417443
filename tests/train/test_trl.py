"""TRL adapters, with real TRL: GRPOTrainer runs on gemkit envs through both entry points."""

from __future__ import annotations

import pytest

pytest.importorskip("trl", reason="needs the `train` extra (trl)")
torch = pytest.importorskip("torch", reason="needs the `train` extra (torch)")

from transformers.utils import get_json_schema  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from gemkit.errors import GemkitError  # noqa: E402
from gemkit.integrations.trl import (  # noqa: E402
    GemkitRollout,
    env_reward,
    environment_factory,
    prompt_dataset,
)
from gemkit.train.tiny import env_text, tiny_causal_lm, tiny_policy, word_tokenizer  # noqa: E402

ENV = "toy:Copy-v0"


@pytest.fixture(autouse=True)
def _quiet_and_single_threaded(monkeypatch):
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    yield
    torch.set_num_threads(threads)


def _config(tmp_path, **kw) -> GRPOConfig:
    return GRPOConfig(
        output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=4, num_generations=2,
        learning_rate=1e-3, use_cpu=True, report_to=[], logging_steps=1, save_strategy="no",
        bf16=False, **kw,
    )  # fmt: skip


def test_rollout_func_runs_two_grpo_steps_and_updates_the_model(tmp_path):
    model, tok = tiny_policy(ENV, episodes=4)
    rollout = GemkitRollout(ENV, max_new_tokens=3)
    trainer = GRPOTrainer(
        model=model, reward_funcs=[env_reward], args=_config(tmp_path, max_completion_length=24),
        train_dataset=rollout.dataset(8), processing_class=tok, rollout_func=rollout,
    )  # fmt: skip
    before = [p.detach().clone() for p in model.parameters()]
    trainer.train()
    assert trainer.state.global_step == 2
    assert "rewards/env_reward/mean" in trainer.state.log_history[0]
    assert any((a != b).any() for a, b in zip(before, model.parameters(), strict=True))


def test_rollout_masks_env_tokens_and_replays_one_start_state_per_group(tmp_path):
    model, tok = tiny_policy(ENV, episodes=4)
    rollout = GemkitRollout(ENV, max_new_tokens=3)
    prompts = list(rollout.dataset(2)["prompt"])

    class FakeTrainer:  # just what rollout_func reads from a GRPOTrainer
        processing_class = tok
        max_completion_length = 40
        accelerator = type("A", (), {"unwrap_model": staticmethod(lambda m: m)})()

    FakeTrainer.model = model
    out = rollout([prompts[0], prompts[0], prompts[1], prompts[1]], FakeTrainer())
    assert out["prompt_ids"][0] == out["prompt_ids"][1] != out["prompt_ids"][2]
    for completion, mask, logp in zip(
        out["completion_ids"], out["env_mask"], out["logprobs"], strict=True
    ):
        assert len(completion) == len(mask) == len(logp)
        assert mask[0] == 1 and 0 in mask  # starts with the model, env replies in between
        assert all(lp == 0.0 for lp, m in zip(logp, mask, strict=True) if m == 0)
        assert all(lp < 0.0 for lp, m in zip(logp, mask, strict=True) if m == 1)
    assert all(0.0 <= r <= 3.0 for r in out["env_reward"])


def test_rollout_rejects_a_prompt_it_did_not_make():
    with pytest.raises(GemkitError, match="GemkitRollout.dataset"):
        GemkitRollout(ENV)._seed_of("some other prompt")


def test_environment_factory_env_follows_trls_contract():
    env = environment_factory(ENV, tool_name="say")()
    schema = get_json_schema(env.say)
    assert schema["function"]["name"] == "say"
    assert schema["function"]["parameters"]["properties"]["action"]["type"] == "string"
    first = env.reset(prompt="...", seed=4)
    word = first.rsplit("Word:", 1)[1].strip()
    reply = env.say(word)
    assert reply.startswith("Correct.")
    reply = env.say("wrong")
    assert reply.startswith("Wrong")
    assert env.say(reply.rsplit("Word:", 1)[1].strip()).endswith("The episode is over.")
    assert env.get_reward() == 2.0
    assert env.say(word) == "The episode is over; no more actions are taken."


def test_environment_factory_runs_two_grpo_steps_with_trls_tool_loop(tmp_path):
    from trl.chat_template_utils import qwen3_chat_template

    text = env_text(ENV, episodes=4)
    tok = word_tokenizer(text.observations + ["user assistant tool act action"], text.actions)
    tok.add_special_tokens(
        {"additional_special_tokens": ["<|im_start|>", "<|im_end|>", "<tool_call>",
                                       "</tool_call>", "<tool_response>", "</tool_response>",
                                       "<think>", "</think>"]}
    )  # fmt: skip
    tok.chat_template = qwen3_chat_template  # a template TRL knows how to parse tool calls of
    tok.eos_token = "<|im_end|>"
    model = tiny_causal_lm(len(tok), pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    trainer = GRPOTrainer(
        model=model,
        args=_config(tmp_path, max_completion_length=16, max_tool_calling_iterations=2),
        train_dataset=prompt_dataset(ENV, 8),
        processing_class=tok,
        environment_factory=environment_factory(ENV),
    )
    trainer.train()
    assert trainer.state.global_step == 2
    # The env owns the reward: TRL called get_reward on every rollout.
    assert "rewards/GemkitEnv/mean" in trainer.state.log_history[0]


def test_environment_factory_refuses_a_reserved_tool_name():
    with pytest.raises(GemkitError, match="tool_name"):
        environment_factory(ENV, tool_name="reset")
