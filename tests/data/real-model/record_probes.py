"""Record what a real model server answers to the requests gemkit's slow-server handling relies on.

    python tests/data/real-model/record_probes.py vllm http://127.0.0.1:8093 qwen
    python tests/data/real-model/record_probes.py llama-cpp http://127.0.0.1:8081 qwen

Writes `<kind>-probes.jsonl` next to this file, one HTTP exchange a line in the shape of the
other recordings (`{t, dt, path, status, request, response}`, plus `probe`, what it shows):

- `tokenize_text`, `tokenize_chat`: the server's own tokenizer (vLLM: `POST /tokenize` with
  `prompt` or `messages`; llama.cpp: `POST /apply-template`, then `POST /tokenize`);
- `over_window`: a chat longer than the model's context window (refused, HTTP 400);
- `cut_at_max_tokens`: a reply cut at `max_tokens` (`finish_reason: length`);
- `cut_at_window` (llama.cpp): a prompt near the end of a slot's 4,096 tokens, a reply that
  runs into it (vLLM shortens `max_tokens` to the room left instead).

Each probe asks for a few tokens at most, so the run takes a minute on 2 CPU cores (the
over-window prompt is refused before it is computed), `cut_at_window` aside: its prompt
takes llama.cpp a minute or two to read.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

HERE = Path(__file__).parent
CHAT = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What is 17 * 23? Put your final answer inside \\boxed{}."},
]
LONG = [{"role": "user", "content": "hello " * 4200}]  # > 4,096 tokens: vLLM's and a slot's window
#: 4,060 tokens rendered: 36 left in a 4,096-token slot
NEAR = [{"role": "user", "content": "hello " * 4030 + "\nCount from 1 to 100."}]


def post(root: str, path: str, body: dict) -> tuple[int, object, float]:
    """POST `body` to `root + path`; (status, decoded answer, seconds)."""
    request = urllib.request.Request(
        root + path, json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    start = time.time()
    try:
        with urllib.request.urlopen(request, timeout=600) as r:
            return r.status, json.loads(r.read()), time.time() - start
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null"), time.time() - start


def main(kind: str, root: str, model: str) -> None:
    """Run the probes of `kind` (vllm or llama-cpp) against the server at `root`."""
    root = root.rstrip("/").removesuffix("/v1")
    out = HERE / f"{kind}-probes.jsonl"
    rows = []

    def probe(name: str, path: str, body: dict) -> object:
        t = time.time()
        status, answer, dt = post(root, path, body)
        rows.append({"probe": name, "t": t, "dt": dt, "path": path, "status": status,
                     "request": body, "response": answer})  # fmt: skip
        return answer

    if kind == "vllm":
        probe("tokenize_text", "/tokenize", {"model": model, "prompt": CHAT[1]["content"]})
        probe("tokenize_chat", "/tokenize",
              {"model": model, "messages": CHAT, "add_generation_prompt": True})  # fmt: skip
    else:
        probe("tokenize_text", "/tokenize", {"content": CHAT[1]["content"]})
        rendered = probe("apply_template", "/apply-template", {"messages": CHAT})
        prompt = rendered.get("prompt", "") if isinstance(rendered, dict) else ""
        probe("tokenize_chat", "/tokenize", {"content": prompt, "parse_special": True})
    probe(
        "over_window", "/v1/chat/completions", {"model": model, "messages": LONG, "max_tokens": 1}
    )
    probe("cut_at_max_tokens", "/v1/chat/completions",
          {"model": model, "messages": CHAT, "max_tokens": 8, "temperature": 0})  # fmt: skip
    if kind != "vllm":
        probe("cut_at_window", "/v1/chat/completions",
              {"model": model, "messages": NEAR, "max_tokens": 200, "temperature": 0})  # fmt: skip
    out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    print(f"{len(rows)} exchanges in {out}")  # noqa: T201 - a script's report


if __name__ == "__main__":
    main(*sys.argv[1:4])
