"""docs/training.md shows exactly the server commands the live suite runs.

The live suite starts vLLM and llama.cpp with `tests/live/servers/*.sh`; the docs show the
command lines those scripts run, with the scripts' defaults filled in. Reading both here
keeps them from drifting apart (`tests/live/test_vllm_training.py` reads its trainer command
from the docs the same way). No server is needed: these run in the default suite.
"""

from __future__ import annotations

import shlex
from pathlib import Path

SERVERS = Path(__file__).parent / "servers"


def script_command(script: str, start: str, end: str, defaults: dict[str, str]) -> list[str]:
    """The words of the command in `script` from `start` to `end`, its variables filled in."""
    text = (SERVERS / script).read_text().replace("\\\n", " ")
    body = text[text.index(start) : text.index(end)]
    for name, value in defaults.items():
        body = body.replace(name, value)
    return shlex.split(body)


def test_the_vllm_command_in_the_docs_is_the_scripts(docs_command):
    script = script_command(
        "vllm-cpu.sh",
        "-m vllm.entrypoints.openai.api_server --model",
        "${VLLM_ARGS:-}",
        {'"$HF"': "MODEL", '"$PORT"': "8097", '"${VLLM_DTYPE:-float32}"': "float32"},
    )
    docs = docs_command("vllm.entrypoints.openai.api_server")
    assert docs[0] == "VLLM_SERVER_DEV_MODE=1"  # the script's default VLLM_DEV=1
    docs = docs[docs.index("-m") :]
    docs[docs.index("--model") + 1] = "MODEL"
    assert docs == script
    assert "--logprobs-mode" in docs and "processed_logprobs" in docs


def test_the_llama_cpp_command_in_the_docs_is_the_scripts(docs_command):
    script = script_command(
        "llama-cpp.sh",
        '"$SERVER" -m',
        "${LLAMA_ARGS:-}",
        {
            '"$SERVER"': "llama-server",
            '"$GGUF"': "MODEL",
            '"$PORT"': "8087",
            '"${THREADS:-1}"': "1",
            '"${CTX:-16384}"': "16384",
            '"${SLOTS:-4}"': "4",
        },
    )
    docs = docs_command("llama-server -m")
    docs[docs.index("-m") + 1] = "MODEL"
    assert docs == script
