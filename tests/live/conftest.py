"""The live suite: gemkit against a real vLLM and a real llama.cpp serving a real model.

`make live` (and CI after `make test`) starts both servers with the scripts in
`tests/live/servers/` (the first run installs vLLM's CPU build and builds llama.cpp, then
they start in about 2 minutes and a few seconds) and runs `pytest -m live tests/live`. The
fixtures here only find them: `GEMKIT_LIVE_VLLM` and `GEMKIT_LIVE_LLAMA` name their base
URLs (default: the scripts' ports, 8097 and 8087). A server that does not answer skips its
tests with the command that starts it, unless `GEMKIT_REQUIRE_LIVE=1` (CI), where it fails.

Every module here that needs a server marks its tests `live` (`pytestmark`); the default
test run leaves them out (`-m "not live"` in pyproject.toml), since a real 0.5B model on 2
CPU cores answers 5 to 20 tokens a second.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import urllib.request
from pathlib import Path

import pytest

SERVERS = Path(__file__).parent / "servers"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "training.md"
#: the model folder vllm-cpu.sh converts the GGUF into (its tokenizer is the real Qwen one)
MODEL_DIR = (
    Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    / "gemkit-real-model"
    / "qwen2.5-coder-0.5b-instruct-hf"
)


def _answering(base_url: str) -> list[str] | None:
    """The served model names, or None when nothing answers at `base_url`."""
    try:
        with urllib.request.urlopen(f"{base_url}/models", timeout=10) as resp:
            data = json.loads(resp.read())
    except (OSError, ValueError):
        return None
    return [m["id"] for m in data.get("data", [])]


def _server(env: str, port: int, script: str) -> str:
    base = os.environ.get(env, f"http://127.0.0.1:{port}/v1").rstrip("/")
    if _answering(base) is None:
        why = f"no server answers at {base}: start it with `bash tests/live/servers/{script}`"
        if os.environ.get("GEMKIT_REQUIRE_LIVE") == "1":
            pytest.fail(why)
        pytest.skip(why)
    return base


def _docs_command(marker: str) -> list[str]:
    """The words of the docs/training.md bash line that contains `marker` (continuations
    joined): what a user copies, so what the live tests run."""
    for block in re.findall(r"```bash[^\n]*\n(.*?)```", DOCS.read_text(), flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            if marker in line:
                return shlex.split(line)
    raise AssertionError(f"docs/training.md shows no command with {marker!r}")


@pytest.fixture(scope="session")
def docs_command():
    """`docs_command(marker)`: the words of the docs' command line that contains `marker`."""
    return _docs_command


@pytest.fixture(scope="session")
def vllm() -> str:
    """Base URL (`.../v1`) of the real vLLM (processed log-probs, development endpoints)."""
    return _server("GEMKIT_LIVE_VLLM", 8097, "vllm-cpu.sh")


@pytest.fixture(scope="session")
def llama() -> str:
    """Base URL (`.../v1`) of the real llama.cpp server."""
    return _server("GEMKIT_LIVE_LLAMA", 8087, "llama-cpp.sh")


@pytest.fixture(scope="session")
def model_dir() -> Path:
    """The real model's Hugging Face folder (weights and tokenizer), as the servers use it."""
    if not (MODEL_DIR / ".ready").exists():
        why = f"{MODEL_DIR} is missing: `bash tests/live/servers/vllm-cpu.sh` makes it"
        if os.environ.get("GEMKIT_REQUIRE_LIVE") == "1":
            pytest.fail(why)
        pytest.skip(why)
    return MODEL_DIR


@pytest.fixture(scope="session")
def tokenizer(model_dir: Path):
    """The real model's tokenizer."""
    transformers = pytest.importorskip("transformers", reason="needs the `train` extra")
    return transformers.AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)


@pytest.fixture(scope="session")
def async_grpo():
    """`examples/async_grpo.py` imported as a module (tests/train/conftest.py's loader)."""
    import importlib.util

    path = Path(__file__).parents[1] / "train" / "conftest.py"
    spec = importlib.util.spec_from_file_location("gemkit_train_conftest", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.load_example("async_grpo")


@pytest.fixture(scope="session")
def learner(model_dir: Path):
    """The real model as a learner holds it: fp32 master weights, in eval mode."""
    torch = pytest.importorskip("torch", reason="needs the `train` extra")
    from gemkit.train.tiny import load_policy

    model, _ = load_policy(str(model_dir))
    assert next(model.parameters()).dtype == torch.float32
    return model.eval()
