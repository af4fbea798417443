"""verl and OpenRLHF adapters, tested against their documented interfaces and real packages.

The pure episode logic runs with a scripted generator and a word-level tokenizer; the
trainer-bound classes run against verl and OpenRLHF themselves, installed `--no-deps` plus
their light dependencies (`make trainers`: neither needs CUDA or vLLM to import its agent
API). CI sets GEMKIT_REQUIRE_TRAINERS, so a missing trainer fails there instead of skipping.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import gemkit
from gemkit.errors import GemkitError
from gemkit.integrations.openrlhf import agent_instance_class, parse_label, prompts_jsonl
from gemkit.integrations.verl import _env_of, _token_output, play_episode, verl_rows
from gemkit.llm.episode_tokens import reply_ids

pytest.importorskip("tokenizers", reason="needs the `train` extra (tokenizers, transformers)")
pytest.importorskip("transformers", reason="needs the `train` extra (transformers)")

from gemkit.train.tiny import env_text, word_tokenizer  # noqa: E402

ENV = "toy:Copy-v0"


@pytest.fixture(scope="module")
def tok():
    text = env_text(ENV, episodes=8)
    return word_tokenizer(text.observations, text.actions)


def _require(module: str) -> None:
    """Import `module`, or skip (a failure under GEMKIT_REQUIRE_TRAINERS) with the reason."""
    try:
        __import__(module)
    except ImportError as e:
        why = f"{module} cannot be imported ({e}); `make trainers` installs verl and OpenRLHF"
        if os.environ.get("GEMKIT_REQUIRE_TRAINERS"):  # CI: a silent skip would hide a break
            pytest.fail(f"GEMKIT_REQUIRE_TRAINERS is set but {why}", pytrace=False)
        pytest.skip(why)


def _scripted(tok, answers):
    """A generate() that answers with the expert's word, then ends its turn with EOS."""
    calls = []

    async def generate(context):
        calls.append(list(context))
        word = answers(tok.decode(context))
        ids = tok(word, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        return ids, [-0.5] * len(ids)

    return generate, calls


def _last_word(text: str) -> str:
    return text.rsplit(":", 1)[-1].split()[0]


async def test_verl_episode_masks_env_tokens_and_scores_the_return(tok):
    generate, calls = _scripted(tok, _last_word)
    episode = await play_episode(gemkit.make(ENV), generate, tok, seed=1)
    assert episode.num_turns == 3 and episode.reward == 3.0 and episode.success
    assert len(episode.response_ids) == len(episode.response_mask) == len(episode.response_logprobs)
    # model turn (1s), env reply (0s), model turn, env reply, model turn
    runs = [
        m
        for k, m in enumerate(episode.response_mask)
        if k == 0 or episode.response_mask[k - 1] != m
    ]
    assert runs == [1, 0, 1, 0, 1]
    model = [t for t, m in zip(episode.response_ids, episode.response_mask, strict=True) if m]
    assert tok.decode(model, skip_special_tokens=True).split() == [
        c.split("Word :")[-1].split()[0] for c in map(tok.decode, calls)
    ]
    assert all(
        lp == 0.0
        for lp, m in zip(episode.response_logprobs, episode.response_mask, strict=True)
        if not m
    )
    # every turn's context is the prompt plus the whole response so far
    assert (
        calls[-1]
        == episode.prompt_ids + episode.response_ids[: len(calls[-1]) - len(episode.prompt_ids)]
    )


async def test_verl_episode_stops_at_the_response_budget(tok):
    generate, _ = _scripted(tok, _last_word)
    episode = await play_episode(gemkit.make(ENV), generate, tok, seed=1, response_length=5)
    assert len(episode.response_ids) == 5 and episode.response_mask[0] == 1


async def test_verl_episode_without_server_logprobs_reports_none(tok):
    async def generate(context):
        return [tok.eos_token_id], None

    episode = await play_episode(gemkit.make(ENV), generate, tok, seed=0)
    assert episode.response_logprobs is None and episode.num_turns == 3


def test_verl_reply_uses_the_chat_template_delta(tok):
    chat = word_tokenizer(["[ user ] [ assistant ] Correct ."])
    chat.chat_template = (
        "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }} <eos> {% endfor %}"
        "{% if add_generation_prompt %}[assistant] {% endif %}"
    )
    assert chat.decode(reply_ids(chat, "Correct .")) == "[ user ] Correct . <eos> [ assistant ]"
    assert tok.decode(reply_ids(tok, "Correct .")) == "Correct ."  # no template: plain text


def test_verl_rows_name_env_and_seed_and_the_loop_reads_them():
    rows = verl_rows(ENV, 3, seed=10)
    assert [r["extra_info"]["seed"] for r in rows] == [10, 11, 12]
    assert rows[0]["agent_name"] == "gemkit" and "Word:" in rows[0]["prompt"][0]["content"]
    assert _env_of(rows[1], None) == (ENV, 11)
    with pytest.raises(GemkitError, match="extra_info.env_id"):
        _env_of({"extra_info": {}}, None)


def test_verl_token_output_accepts_both_server_answers():
    class TokenOutput:
        token_ids = [1, 2]
        log_probs = [-0.1, -0.2]

    assert _token_output(TokenOutput()) == ([1, 2], [-0.1, -0.2])
    assert _token_output([3, 4]) == ([3, 4], None)


async def test_verl_agent_loop_runs_a_row_with_verls_own_classes(tok):
    _require("verl.experimental.agent_loop.agent_loop")
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import AgentLoopOutput, _agent_loop_registry
    from verl.workers.rollout.replica import TokenOutput

    from gemkit.integrations.verl import GemkitAgentLoop

    assert _agent_loop_registry["gemkit"] == {
        "_target_": "gemkit.integrations.verl.GemkitAgentLoop"
    }
    generate, _ = _scripted(tok, _last_word)

    class Server:  # verl's LLMServerClient.generate, answering in token ids
        async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
            ids, logprobs = await generate(prompt_ids)
            return TokenOutput(token_ids=ids, log_probs=logprobs)

    loop = GemkitAgentLoop.__new__(GemkitAgentLoop)  # skip verl's server/tokenizer plumbing
    loop.config = OmegaConf.create({"actor_rollout_ref": {"rollout": {"response_length": 64}}})
    loop.server_manager, loop.tokenizer = Server(), tok
    row = verl_rows(ENV, 1, seed=2)[0]
    out = await loop.run({"temperature": 1.0}, **row)
    assert isinstance(out, AgentLoopOutput)
    assert out.reward_score == 3.0 and out.num_turns == 6
    assert len(out.response_ids) == len(out.response_mask) == len(out.response_logprobs)


async def test_openrlhf_agent_replays_the_labelled_episode_and_frames_feedback(tmp_path):
    path = prompts_jsonl(ENV, 2, tmp_path / "prompts.jsonl", seed=5)
    row = json.loads(path.read_text().splitlines()[1])
    _require("openrlhf.utils.agent")
    agent = agent_instance_class()()
    first = await agent.reset({"observation": row["input"], "label": row["label"]})
    assert row["input"] in first["observation"]
    assert first["observation"].startswith("<|im_start|>user\n")
    word = row["input"].rsplit("Word:", 1)[1].strip()
    out = await agent.step({"action_text": word, "label": row["label"], "sampling_params": None})
    assert float(out["rewards"]) == 1.0 and out["done"] is False
    assert out["environment_feedback"].startswith("<|im_end|>\n<|im_start|>user\nCorrect.")
    out = await agent.step({"action_text": "x"})
    out = await agent.step({"action_text": "x"})
    assert out["done"] is True and float(out["scores"]) == 1.0 and out["environment_feedback"] == ""


def test_openrlhf_labels_must_name_an_env():
    _require("openrlhf.utils.agent")
    assert parse_label('{"env_id": "toy:Copy-v0", "seed": 3}')["seed"] == 3
    with pytest.raises(GemkitError, match="prompts_jsonl"):
        parse_label("42")
    with pytest.raises(GemkitError, match="must contain"):
        agent_instance_class(ENV, feedback_template="no placeholder")


async def test_openrlhfs_own_multi_turn_executor_plays_the_agent(tok, tmp_path):
    _require("openrlhf.utils.agent")
    from types import SimpleNamespace

    from openrlhf.utils.agent import AgentInstanceBase, MultiTurnAgentExecutor

    cls = agent_instance_class(
        ENV, prompt_template="{observation}", feedback_template=" {observation}"
    )
    assert issubclass(cls, AgentInstanceBase)

    class Engine:  # vLLM's answer shape: outputs[0].token_ids / .text / .finish_reason
        async def generate(self, prompt_ids, sampling_params, multi_modal_data=None):
            word = _last_word(tok.decode(prompt_ids))
            ids = tok(word, add_special_tokens=False)["input_ids"]
            out = SimpleNamespace(token_ids=ids, text=word, finish_reason="stop")
            return SimpleNamespace(outputs=[out])

    row = json.loads(prompts_jsonl(ENV, 1, tmp_path / "p.jsonl", seed=3).read_text())
    result = await MultiTurnAgentExecutor(cls).execute(
        row["input"], row["label"], SimpleNamespace(logprobs=None, max_tokens=8), 256, tok, Engine()
    )
    assert result["reward"] == 3.0 and len(result["action_ranges"]) == 3


def _import_with(blocked: str, code: str) -> str:
    """Run `code` in a fresh interpreter where `blocked` cannot be imported; return its stdout."""
    program = f"import sys; sys.modules[{blocked!r}] = None\n{code}"
    out = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=300
    )
    return out.stdout + out.stderr


@pytest.mark.parametrize(
    ("blocked", "package"),
    [("verl", "verl"), ("orjson", "orjson"), ("cachetools", "cachetools"), ("ray", "ray")],
)
def test_verl_agent_loop_names_the_missing_package(blocked, package):
    _require("verl.experimental.agent_loop.agent_loop")
    out = _import_with(
        blocked,
        "from gemkit.integrations.requires import MissingDependencyError\n"
        "try:\n    from gemkit.integrations.verl import GemkitAgentLoop\n"
        "except MissingDependencyError as e:\n    print('RAISED', e)\n",
    )
    assert "RAISED gemkit.integrations.verl.GemkitAgentLoop needs verl" in out, out[-2000:]
    assert f"pip install {package}" in out


@pytest.mark.parametrize(
    ("blocked", "package"), [("openrlhf", "openrlhf"), ("pylatexenc", "pylatexenc")]
)
def test_openrlhf_agent_class_names_the_missing_package(blocked, package):
    _require("openrlhf.utils.agent")
    out = _import_with(
        blocked,
        "from gemkit.integrations.openrlhf import agent_instance_class\n"
        "from gemkit.integrations.requires import MissingDependencyError\n"
        "try:\n    agent_instance_class('toy:Copy-v0')\n"
        "except MissingDependencyError as e:\n    print('RAISED', e)\n",
    )
    assert "RAISED agent_instance_class() needs openrlhf" in out, out[-2000:]
    assert f"pip install {package}" in out
