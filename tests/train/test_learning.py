"""The learning proof: a tiny random model trained by the example trainers learns a toy task."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch", reason="needs the `train` extra (torch, transformers)")
pytest.importorskip("transformers", reason="needs the `train` extra (torch, transformers)")


def _curve(example, name: str, tmp_path, *flags: str) -> list[float]:
    trainer = example(name)
    history = trainer.main(
        ["--tiny", "--env", "toy:Copy-v0", "--threads", "1", "--no-progress",
         "--out", str(tmp_path / name), "--seed", "0", *flags]
    )  # fmt: skip
    return [h["return"] for h in history]


def test_rebn_tiny_model_learns_to_copy_words(example, tmp_path):
    # Untrained, the model copies about 1 word in 10; three turns make a return of ~0.3.
    curve = _curve(example, "rebn", tmp_path, "--iterations", "30", "--num-envs", "32")
    before, after = np.mean(curve[:3]), np.mean(curve[-5:])
    assert after > before + 0.5, f"no clear learning: {np.round(curve, 2).tolist()}"


@pytest.mark.parametrize("flags", [("--clip", "0.2", "--update-epochs", "2")])
def test_rebn_with_ppo_clipping_also_learns(example, tmp_path, flags):
    curve = _curve(example, "rebn", tmp_path, "--iterations", "20", "--num-envs", "32", *flags)
    assert np.mean(curve[-5:]) > np.mean(curve[:3]) + 0.3, np.round(curve, 2).tolist()


def test_grpo_tiny_model_learns_to_copy_words(example, tmp_path):
    # Episode-level credit learns more slowly than ReBN's per-turn credit on this dense task.
    curve = _curve(example, "grpo", tmp_path, "--iterations", "40")
    assert np.mean(curve[-5:]) > np.mean(curve[:3]) + 0.4, np.round(curve, 2).tolist()
