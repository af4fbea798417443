"""Record what a real vLLM and a real llama.cpp answer to gemkit's token requests.

    python tests/data/real-model/record_tokens.py VLLM_PROCESSED VLLM_RAW LLAMA_CPP

Each argument is a server root such as `http://127.0.0.1:8097`: a vLLM started with
`--logprobs-mode processed_logprobs` (`tests/live/servers/vllm-cpu.sh`), a vLLM in its default
raw mode, and llama.cpp's `llama-server`, all serving Qwen2.5-Coder-0.5B-Instruct (whose
tokenizer is read from `~/.cache/gemkit-real-model/qwen2.5-coder-0.5b-instruct-hf`). Writes
`tokens-exchanges.jsonl` next to this file, one exchange a line: `server`, `note` (what it
shows), `path`, `status`, `dt`, `request`, `response`:

- `probe`: `gemkit.llm.token_policy.logprobs_kind`'s one-token request with `top_k=1` (vLLM
  processed and raw; llama.cpp with and without `post_sampling_probs`);
- `sample`: a token-id prompt sampled at temperature 0.7, top-p 0.9, top-k 20, every
  parameter named (each server's spelling);
- `prompt_logprobs` (vLLM): what `examples/async_grpo.py` compares after a weight sync;
- `chat`: a chat asking for token ids (vLLM sends them; llama.cpp cannot);
- `tokenize` (vLLM): the tokenizer check of `examples/async_grpo.py`.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from transformers import AutoTokenizer

from gemkit.llm.sampled import VLLM_CHAT_TOKEN_FIELDS, VLLM_COMPLETION_TOKEN_FIELDS
from gemkit.llm.sampling import SamplingParams

HERE = Path(__file__).parent
MODEL = Path.home() / ".cache" / "gemkit-real-model" / "qwen2.5-coder-0.5b-instruct-hf"
QUESTION = "Guess a number from 1 to 10. Put it in \\boxed{}."


def main(processed: str, raw: str, llama: str) -> None:
    """Record every exchange listed in the module docstring."""
    tok = AutoTokenizer.from_pretrained(str(MODEL), local_files_only=True)
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": QUESTION}], add_generation_prompt=True, tokenize=False
    )
    ids = tok(prompt, add_special_tokens=False)["input_ids"]
    sample, probe = SamplingParams(temperature=0.7, top_p=0.9, top_k=20), SamplingParams(top_k=1)
    chat = [{"role": "user", "content": QUESTION}]
    with (HERE / "tokens-exchanges.jsonl").open("w") as out:

        def post(server: str, root: str, path: str, body: dict, note: str) -> None:
            start = time.time()
            request = urllib.request.Request(
                root + path, json.dumps(body).encode(), {"Content-Type": "application/json"}
            )
            try:
                with urllib.request.urlopen(request, timeout=600) as resp:
                    status, answer = resp.status, json.loads(resp.read())
            except urllib.error.HTTPError as e:
                status, answer = e.code, json.loads(e.read() or b"{}")
            row = {"server": server, "note": note, "path": path, "status": status,
                   "dt": round(time.time() - start, 2), "request": body, "response": answer}  # fmt: skip
            out.write(json.dumps(row) + "\n")
            print(server, note, status, file=sys.stderr)

        completion = {"model": "qwen", "prompt": ids, **VLLM_COMPLETION_TOKEN_FIELDS}
        for server, root in (("vllm-processed", processed), ("vllm-raw", raw)):
            body = {**completion, "max_tokens": 1, **probe.request_fields()}
            post(server, root, "/v1/completions", body, "probe: top_k=1")
        body = {**completion, "max_tokens": 12, **sample.request_fields()}
        post("vllm-processed", processed, "/v1/completions", body, "sample: t0.7 p0.9 k20")
        body = {"model": "qwen", "prompt": ids[:12], "max_tokens": 1, "prompt_logprobs": 0}
        post("vllm-processed", processed, "/v1/completions", body, "prompt_logprobs")
        body = {"model": "qwen", "messages": chat, "max_tokens": 12, **sample.request_fields(),
                **VLLM_CHAT_TOKEN_FIELDS}  # fmt: skip
        post("vllm-processed", processed, "/v1/chat/completions", body, "chat with token ids")
        body = {"model": "qwen", "prompt": "Guess the number: 17 is too low.\n<tool_call>",
                "add_special_tokens": False}  # fmt: skip
        post("vllm-processed", processed, "/tokenize", body, "tokenize")
        llama_probe = {**completion, "max_tokens": 1, **probe.request_fields("llama.cpp")}
        post("llama.cpp", llama, "/v1/completions", {**llama_probe, "post_sampling_probs": True},
             "probe: top_k=1, post_sampling_probs")  # fmt: skip
        # what the completions protocol sends (vLLM's spelling, no post_sampling_probs)
        body = {**completion, "max_tokens": 1, **probe.request_fields()}
        post("llama.cpp", llama, "/v1/completions", body, "probe: top_k=1, raw")
        body = {**completion, "max_tokens": 12, **sample.request_fields("llama.cpp"),
                "post_sampling_probs": True}  # fmt: skip
        post("llama.cpp", llama, "/v1/completions", body, "sample: t0.7 p0.9 k20")
        body = {"model": "qwen", "messages": chat, "max_tokens": 12, **sample.request_fields(),
                **VLLM_CHAT_TOKEN_FIELDS}  # fmt: skip
        post("llama.cpp", llama, "/v1/chat/completions", body, "chat asking for token ids")


if __name__ == "__main__":
    main(*sys.argv[1:4])
