"""docs/training.md's verl and OpenRLHF set-ups, as written, checked by each trainer's own code.

The commands need GPUs, so the docs tests do not run them; here each trainer's own parser and
loader reads exactly what the page says: verl's Hydra config composes the `main_ppo` overrides
and `hydra.utils.instantiate` builds the loop from `gemkit_agent.yaml` as verl's agent-loop
worker does; OpenRLHF's `train_ppo_ray` parser and checks (its `__main__` block, without the
final `train(args)`) read the command, and its `_load_agent_executor` builds `AgentExecutor`
from `agent_func.py`, which then plays a documented prompt. The TRL blocks run in the docs
tests themselves (docs/training.md, "Quick start").
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import shlex
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import gemkit

DOC = Path(__file__).resolve().parents[2] / "docs" / "training.md"
FENCE = re.compile(r"^```(?P<info>[^\n]*)\n(?P<body>.*?)^```$", re.MULTILINE | re.DOTALL)
ENV = "game:GuessTheNumber-v0-easy"


def _require(module: str) -> None:
    """Import `module`, or skip (a failure under GEMKIT_REQUIRE_TRAINERS) with the reason."""
    try:
        __import__(module)
    except ImportError as e:
        why = f"{module} cannot be imported ({e}); `make trainers` installs verl and OpenRLHF"
        if os.environ.get("GEMKIT_REQUIRE_TRAINERS"):
            pytest.fail(f"GEMKIT_REQUIRE_TRAINERS is set but {why}", pytrace=False)
        pytest.skip(why)


def block(containing: str) -> tuple[str, str]:
    """The one fenced block of the page whose info line or body holds `containing`."""
    found = [
        (m["info"], m["body"])
        for m in FENCE.finditer(DOC.read_text())
        if containing in m["info"] or containing in m["body"]
    ]
    assert len(found) == 1, f"docs/training.md has {len(found)} blocks with {containing!r}"
    return found[0]


def command(module: str) -> list[str]:
    """The arguments the page passes to `python -m module`, as a shell would split them."""
    _, body = block(f"python -m {module}")
    words = shlex.split(body.replace("\\\n", " "), comments=True)
    return words[words.index(module) + 1 :]


def _source_of(package: str, relative: str) -> tuple[Path, ast.Module]:
    """A module's source by file (importing it, or its package, would import vLLM)."""
    path = Path(__import__(package).__file__).parent / relative
    return path, ast.parse(path.read_text())


def _imports_that_work(tree: ast.Module) -> list[ast.stmt]:
    """The module's top-level imports, each kept only where it imports here (no vLLM)."""
    kept: list[ast.stmt] = []
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            guard = ast.parse("try:\n    pass\nexcept ImportError:\n    pass").body[0]
            guard.body = [node]
            kept.append(guard)
    return kept


# -- OpenRLHF ---------------------------------------------------------------------------------


def openrlhf_parse(argv: list[str]) -> argparse.Namespace:
    """OpenRLHF's own `train_ppo_ray` command line: its parser and checks, up to `train(args)`.

    The module imports vLLM at the top (not installed here), so its `__main__` block is run on
    its own, from OpenRLHF's source, without the last statement that starts the training.
    """
    path, tree = _source_of("openrlhf", "cli/train_ppo_ray.py")
    main = next(
        node
        for node in tree.body
        if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test)
    )
    assert ast.unparse(main.body[-1]) == "train(args)", "OpenRLHF's entry point changed shape"
    program = ast.Module(body=[*_imports_that_work(tree), *main.body[:-1]], type_ignores=[])
    namespace = {"__name__": "__main__"}
    saved = sys.argv
    sys.argv = [str(path), *argv]
    try:
        exec(compile(program, str(path), "exec"), namespace)
    finally:
        sys.argv = saved
    return namespace["args"]


def openrlhf_loader():
    """OpenRLHF's own `_load_agent_executor`, from its source (its module imports vLLM)."""
    from openrlhf.utils.agent import AgentExecutorBase

    path, tree = _source_of("openrlhf", "trainer/ray/vllm_engine.py")
    function = next(
        node
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and node.name == "_load_agent_executor"
    )
    namespace = {"AgentExecutorBase": AgentExecutorBase}
    exec(compile(ast.Module(body=[function], type_ignores=[]), str(path), "exec"), namespace)
    return namespace["_load_agent_executor"]


def test_openrlhf_parses_the_documented_command_with_its_own_parser():
    _require("openrlhf.utils.agent")
    args = openrlhf_parse(command("openrlhf.cli.train_ppo_ray"))
    assert args.train.agent_func_path == "agent_func.py"
    assert args.data.prompt_dataset == "prompts.jsonl"
    assert (args.data.input_key, args.data.label_key) == ("input", "label")
    assert args.data.apply_chat_template is False, "the prompt comes from the env"
    assert args.reward.remote_url == ["agent"], "OpenRLHF takes the agent file as the reward"


def test_openrlhfs_parser_rejects_the_flags_it_no_longer_has(capsys):
    _require("openrlhf.utils.agent")
    with pytest.raises(SystemExit) as e:  # the spelling these docs had before OpenRLHF 0.10
        openrlhf_parse(["--prompt_data", "prompts.jsonl", "--agent_func_path", "agent_func.py"])
    assert e.value.code == 2 and "unrecognized arguments" in capsys.readouterr().err


def test_openrlhfs_loader_builds_the_documented_agent_and_it_plays_a_prompt(tmp_path, monkeypatch):
    _require("openrlhf.utils.agent")
    pytest.importorskip("tokenizers", reason="needs the `train` extra (tokenizers)")
    from openrlhf.utils.agent import AgentExecutorBase

    from gemkit.train.tiny import env_text, word_tokenizer

    info, agent_file = block("file=agent_func.py")
    (tmp_path / "agent_func.py").write_text(agent_file)
    monkeypatch.chdir(tmp_path)
    exec(block("prompts_jsonl(")[1], {})  # the page's own prompts block
    executor = openrlhf_loader()("agent_func.py")
    assert isinstance(executor, AgentExecutorBase)

    text = env_text(ENV, episodes=4)
    tok = word_tokenizer(text.observations, text.actions)

    class Engine:  # vLLM's answer shape: outputs[0].token_ids / .text / .finish_reason
        async def generate(self, prompt_ids, sampling_params, multi_modal_data=None):
            ids = tok("\\boxed{10}", add_special_tokens=False)["input_ids"]
            out = SimpleNamespace(token_ids=ids, text="\\boxed{10}", finish_reason="stop")
            return SimpleNamespace(outputs=[out])

    import asyncio

    row = json.loads(Path("prompts.jsonl").read_text().splitlines()[3])
    sampling = SimpleNamespace(logprobs=None, max_tokens=8)
    result = asyncio.run(
        executor.execute(row["input"], row["label"], sampling, 4096, tok, Engine())
    )
    env = gemkit.make(ENV)  # the same episode, played here: the agent replayed the label's seed
    env.reset(seed=json.loads(row["label"])["seed"])
    total, turns, done = 0.0, 0, False
    while not done:
        _, reward, terminated, truncated, _ = env.step("\\boxed{10}")
        total, turns, done = total + reward, turns + 1, terminated or truncated
    assert result["reward"] == total and len(result["action_ranges"]) == turns


# -- verl -------------------------------------------------------------------------------------


def verl_config(overrides: list[str]):
    """verl's own `ppo_trainer` config (what `main_ppo` gets from Hydra) with `overrides`."""
    import verl.trainer
    from hydra import compose, initialize_config_dir

    folder = Path(verl.trainer.__file__).parent / "config"
    with initialize_config_dir(config_dir=str(folder), version_base=None):
        return compose(config_name="ppo_trainer", overrides=overrides)


def test_verl_composes_the_documented_overrides_with_its_own_config():
    _require("verl.experimental.agent_loop.agent_loop")
    config = verl_config(command("verl.trainer.main_ppo"))
    rollout = config.actor_rollout_ref.rollout
    assert rollout.agent.agent_loop_config_path == "gemkit_agent.yaml"
    assert rollout.mode == "async" and config.data.return_raw_chat is True
    assert config.data.train_files == "train.parquet"


def test_verls_config_rejects_a_key_it_does_not_have():
    _require("verl.experimental.agent_loop.agent_loop")
    from hydra.errors import ConfigCompositionException

    with pytest.raises(ConfigCompositionException):
        verl_config(["actor_rollout_ref.rollout.agent.no_such_key=1"])


async def test_verl_builds_the_documented_loop_as_its_worker_does_and_it_plays_a_row(tmp_path):
    _require("verl.experimental.agent_loop.agent_loop")
    pytest.importorskip("tokenizers", reason="needs the `train` extra (tokenizers)")
    import hydra
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import (
        AgentLoopOutput,
        DictConfigWrap,
        ToolListWrap,
    )
    from verl.workers.rollout.replica import TokenOutput

    from gemkit.integrations.verl import verl_rows
    from gemkit.train.tiny import env_text, word_tokenizer

    config = verl_config(command("verl.trainer.main_ppo"))
    _, yaml_text = block("file=gemkit_agent.yaml")
    (tmp_path / "gemkit_agent.yaml").write_text(yaml_text)
    registry = {entry.name: entry for entry in OmegaConf.load(tmp_path / "gemkit_agent.yaml")}
    row = verl_rows(ENV, 1, seed=3)[0]
    text = env_text(ENV, episodes=4)
    tok = word_tokenizer(text.observations, text.actions)

    class Server:  # verl's LLMServerClient.generate, answering in token ids
        async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
            ids = tok("\\boxed{10}", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
            return TokenOutput(token_ids=ids, log_probs=[-0.5] * len(ids))

    loop = hydra.utils.instantiate(  # the call of verl's AgentLoopWorker, argument for argument
        config=registry[row["agent_name"]],
        trainer_config=DictConfigWrap(config=config),
        server_manager=Server(),
        tokenizer=tok,
        processor=None,
        hf_model_type=None,
        dataset_cls=None,
        data_config=DictConfigWrap(config.data),
        tools=ToolListWrap([]),
    )
    out = await loop.run({"temperature": 1.0}, **row)
    assert isinstance(out, AgentLoopOutput)
    assert len(out.response_ids) == len(out.response_mask) and out.num_turns >= 2
