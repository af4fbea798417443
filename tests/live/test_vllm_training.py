"""Against a real vLLM: `examples/async_grpo.py` trains, syncs weights, and stays exact.

Several learner steps of the fully asynchronous trainer on this CPU, with fp32 master weights
and `--weight-sync vllm` (vLLM's development endpoints: drain, `reload_weights` from the saved
folder, `update_weight_version`, resume). After every sync the server's log-probs of a probe
sequence equal the learner's (`sync_gaps`, tolerance as in `test_vllm_tokens.py`), and the
server's weights did move. The server gets its original weights back at the end.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiohttp
import pytest

pytestmark = pytest.mark.live
torch = pytest.importorskip("torch", reason="needs the `train` extra")

TOLERANCE = 1e-3  # float32 server and learner, see test_vllm_tokens.py


async def _weight_version(root: str) -> str | None:
    async with aiohttp.ClientSession() as s, s.get(f"{root}/weight_info") as resp:
        return (await resp.json()).get("weight_version")


@pytest.fixture
def restored(vllm, model_dir, async_grpo):
    """The server's root URL; its original weights are reloaded afterwards."""
    trainer = async_grpo
    root = vllm[: -len("/v1")]
    yield root

    async def restore():
        async with aiohttp.ClientSession() as session:
            await trainer.vllm_reload(session, root, Path(model_dir), 0, {})

    asyncio.run(restore())


def test_async_grpo_trains_against_vllm_with_exact_weight_sync(
    restored, model_dir, async_grpo, docs_command, tmp_path
):
    trainer = async_grpo
    before = asyncio.run(_probe(trainer, restored, model_dir))
    # the command docs/training.md shows, with this machine's model folder and server
    argv = docs_command("examples/async_grpo.py --model")
    argv = argv[argv.index("examples/async_grpo.py") + 1 :]
    argv[argv.index("--model") + 1] = str(model_dir)
    argv[argv.index("--server") + 1] = restored  # no /v1: the trainer finds it and the name
    assert argv[argv.index("--weight-sync") + 1] == "vllm"
    history = trainer.main([*argv, "--out", str(tmp_path / "run"), "--no-progress"])
    assert len(history) == 3
    gaps = history[-1]["sync_gaps"]
    # the starting weights and each of the 3 synced versions were checked
    assert sorted(int(v) for v in gaps) == [0, 1, 2, 3], gaps
    assert max(gaps.values()) <= TOLERANCE, gaps
    assert asyncio.run(_weight_version(restored)) == "3"
    # the server's log-probs moved with the learner's weights
    after = asyncio.run(_probe(trainer, restored, model_dir))
    shift = max(abs(a - b) for a, b in zip(before, after, strict=True))
    print(json.dumps({"sync_gaps": gaps, "probe_shift": shift}))  # the figures, with -s
    assert shift > 10 * TOLERANCE
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    assert [m["version"] for m in metrics] == [1, 2, 3]
    # only the newest snapshot is kept on disk
    assert sorted(p.name for p in (tmp_path / "run" / "weights").iterdir()) == ["v3"]


async def _probe(trainer, root: str, model_dir) -> list[float]:
    from transformers import AutoTokenizer

    from gemkit.llm import LLMClient

    tok = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
    ids = tok("The quick brown fox jumps over the lazy dog.")["input_ids"]
    async with LLMClient(base_url=root + "/v1", model="qwen", timeout=600) as client:
        served = await trainer.served_probe(client, ids)
    assert served is not None
    return served
