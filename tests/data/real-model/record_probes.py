"""Record what a real model server answers to the requests gemkit's slow-server handling relies on.

    python tests/data/real-model/record_probes.py vllm http://127.0.0.1:8093 qwen [PROBE ...]
    python tests/data/real-model/record_probes.py llama-cpp http://127.0.0.1:8081 qwen [PROBE ...]

Writes `<kind>-probes.jsonl` next to this file, one HTTP exchange a line in the shape of the
other recordings (`{t, dt, path, status, request, response}`, plus `probe`, what it shows);
naming probes records those again and keeps the others' lines:

- `detect`: the first request of `gemkit.llm.token_counters.ServerTokenCounter`, which tells
  vLLM from llama.cpp (`POST /tokenize` with both `prompt` and `content`), and llama.cpp's
  `GET /props` (its slots' window);
- `tokenize_text`, `tokenize_chat`: the server's own tokenizer (vLLM: `POST /tokenize` with
  `prompt` or `messages`; llama.cpp: `POST /apply-template`, then `POST /tokenize`);
- `tokenize_tool_chat`: the same for the first chat of a recorded toolworld episode
  (`eval-e4_trip.jsonl`: tool schemas as JSON, which the heuristic counter overcounts);
- `raw_arguments`, `unparsed_arguments`: a chat whose assistant message holds a malformed
  call, its arguments the model's text as is (llama.cpp: HTTP 500), or as gemkit's history
  records them, `{"unparsed": <text>}` (rendered by both);
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
#: 4,070 tokens rendered: 26 left in a 4,096-token slot
NEAR = [{"role": "user", "content": "hello " * 4030 + "\nCount from 1 to 100."}]


def malformed_call_chat(arguments: str) -> list[dict]:
    """A chat after a malformed call, with `arguments` in the call's place."""
    call = {"id": "call_0", "type": "function",
            "function": {"name": "python", "arguments": arguments}}  # fmt: skip
    return [
        {"role": "user", "content": "What is 17 * 23?"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_0", "name": "python",
         "content": "Error: malformed JSON in <tool_call> at line 1, column 20"},
    ]  # fmt: skip


def tool_chat() -> list[dict]:
    """The chat a real model saw in the first recorded toolworld episode (1,758 tokens)."""
    episode = json.loads((HERE / "eval-e4_trip.jsonl").read_text().splitlines()[0])
    return episode["turns"][-1]["observation"]


def post(root: str, path: str, body: dict | None) -> tuple[int, object, float]:
    """POST `body` to `root + path` (GET when it is None); (status, decoded answer, seconds)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(root + path, data, {"Content-Type": "application/json"})
    start = time.time()
    try:
        with urllib.request.urlopen(request, timeout=600) as r:
            return r.status, json.loads(r.read()), time.time() - start
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null"), time.time() - start


def main(kind: str, root: str, model: str, *only: str) -> None:
    """Run the probes of `kind` (vllm or llama-cpp) against the server at `root`."""
    root = root.rstrip("/").removesuffix("/v1")
    out = HERE / f"{kind}-probes.jsonl"
    rows = []

    def probe(name: str, path: str, body: dict | None) -> object:
        t = time.time()
        status, answer, dt = post(root, path, body)
        rows.append({"probe": name, "t": t, "dt": dt, "path": path, "status": status,
                     "request": body, "response": answer})  # fmt: skip
        return answer

    def chat_count(name: str, messages: list[dict]) -> None:
        if kind == "vllm":
            body = {"model": model, "messages": messages, "add_generation_prompt": True}
            probe(name, "/tokenize", body)
            return
        rendered = probe(f"{name}_template", "/apply-template", {"messages": messages})
        prompt = rendered.get("prompt", "") if isinstance(rendered, dict) else ""
        probe(name, "/tokenize", {"content": prompt, "parse_special": True})

    def wanted(name: str) -> bool:
        return not only or name in only

    if wanted("detect"):
        probe("detect", "/tokenize", {"model": model, "prompt": "a", "content": "a"})
        if kind != "vllm":
            probe("detect_props", "/props", None)
    if wanted("tokenize_text"):
        text = CHAT[1]["content"]
        body = {"model": model, "prompt": text} if kind == "vllm" else {"content": text}
        probe("tokenize_text", "/tokenize", body)
    if wanted("tokenize_chat"):
        chat_count("tokenize_chat", CHAT)
    if wanted("tokenize_tool_chat"):
        chat_count("tokenize_tool_chat", tool_chat())
    wrote = '<tool_call>{"name": "python", "arguments": {"code": print(17*23)}}</tool_call>'
    for name, arguments in (
        ("raw_arguments", wrote),
        ("unparsed_arguments", json.dumps({"unparsed": wrote})),
    ):
        if wanted(name):
            chat = malformed_call_chat(arguments)
            if kind == "vllm":
                body = {"model": model, "messages": chat, "add_generation_prompt": True}
                probe(name, "/tokenize", body)
            else:
                probe(name, "/apply-template", {"messages": chat})
    if wanted("over_window"):
        body = {"model": model, "messages": LONG, "max_tokens": 1}
        probe("over_window", "/v1/chat/completions", body)
    if wanted("cut_at_max_tokens"):
        body = {"model": model, "messages": CHAT, "max_tokens": 8, "temperature": 0}
        probe("cut_at_max_tokens", "/v1/chat/completions", body)
    if kind != "vllm" and wanted("cut_at_window"):
        body = {"model": model, "messages": NEAR, "max_tokens": 200, "temperature": 0}
        probe("cut_at_window", "/v1/chat/completions", body)
    if only and out.exists():  # keep the lines of the probes not run again
        ran = {r["probe"] for r in rows} | {"apply_template"}  # an older name of a probe
        old = [json.loads(x) for x in out.read_text().splitlines()]
        rows = [r for r in old if r["probe"] not in ran] + rows
    out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    print(f"{len(rows)} exchanges in {out}")  # noqa: T201 - a script's report


if __name__ == "__main__":
    main(*sys.argv[1:])
