"""The example trainers run end to end as scripts, on a game, with nothing downloaded."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("torch", reason="needs the `train` extra (torch, transformers)")
pytest.importorskip("transformers", reason="needs the `train` extra (torch, transformers)")

from .conftest import EXAMPLES

GAME = "game:GuessTheNumber-v0-easy"


def _run(script: str, *flags: str, timeout: int = 240) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(EXAMPLES / script), *flags],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.parametrize(
    ("script", "size"),
    [("rebn.py", ["--num-envs", "4"]), ("grpo.py", ["--num-groups", "2", "--group-size", "2"])],
)
def test_trainer_runs_an_iteration_on_a_game(tmp_path, script, size):
    out = tmp_path / "run"
    done = _run(script, "--tiny", "--env", GAME, "--iterations", "1", "--out", str(out), *size)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "iter    1  return" in done.stderr
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(metrics) == 1 and metrics[0]["transitions"] > 0
    assert (out / "final" / "config.json").exists() and (out / "final" / "tokenizer.json").exists()


def test_a_saved_checkpoint_is_a_model_folder_that_model_reads_back(example, tmp_path):
    rebn = example("rebn")
    common = ["--env", GAME, "--iterations", "1", "--num-envs", "2", "--no-progress"]
    rebn.main(["--tiny", "--out", str(tmp_path / "a"), *common])
    history = rebn.main(["--model", str(tmp_path / "a" / "final"), "--max-new-tokens", "4",
                         "--lr", "1e-3", "--out", str(tmp_path / "b"), *common])  # fmt: skip
    assert history[0]["transitions"] > 0


def test_trainer_explains_a_missing_model_choice():
    done = _run("rebn.py", "--env", GAME, "--iterations", "1", timeout=60)
    assert done.returncode != 0
    assert "pass exactly one of --tiny or --model PATH" in done.stderr
    assert "Traceback" not in done.stderr


def test_trainer_explains_a_model_path_that_is_not_a_folder(tmp_path):
    done = _run("grpo.py", "--model", str(tmp_path / "nope"), "--env", GAME, timeout=60)
    assert done.returncode != 0
    assert "is not a folder" in done.stderr and "Traceback" not in done.stderr
