"""Every command that talks to a model takes `--timeout` (read by `LLMClient`), with one help."""

from __future__ import annotations

import pytest

from gemkit.cli import build_parser
from gemkit.cli.arguments import TIMEOUT_HELP
from gemkit.llm.client import DEFAULT_TIMEOUT, ENV_TIMEOUT

MODEL_COMMANDS = {
    "eval": ["eval", "game:GuessTheNumber-v0-easy", "--out", "x"],
    "synth qa": ["synth", "qa", "--out", "x", "--llm", "http://h/v1", "--model", "m"],
    "synth tasks": ["synth", "tasks", "--out", "x", "--llm", "http://h/v1", "--model", "m"],
    "filter": ["filter", "src", "--out", "x", "--llm", "http://h/v1", "--model", "m"],
}


@pytest.mark.parametrize("command", list(MODEL_COMMANDS))
def test_every_model_command_takes_a_timeout(command):
    parser = build_parser()
    args = parser.parse_args([*MODEL_COMMANDS[command], "--timeout", "900"])
    assert args.timeout == 900.0
    assert parser.parse_args(MODEL_COMMANDS[command]).timeout is None  # LLMClient decides


def test_the_help_names_the_env_var_and_default_the_client_uses():
    assert f"${ENV_TIMEOUT}" in TIMEOUT_HELP and f"else {DEFAULT_TIMEOUT:g})" in TIMEOUT_HELP


def test_the_filter_timeout_reaches_its_client_and_not_its_settings(tmp_path):
    from gemkit.synth.difficulty_filter import FilterConfig

    config = FilterConfig(source=str(tmp_path), out=str(tmp_path / "o"), llm_url="http://h/v1",
                          model="m", timeout=900)  # fmt: skip
    assert "timeout" not in config.settings(), "a longer timeout does not change the verdicts"
