"""A scripted OpenAI-protocol server on 127.0.0.1 for tests and examples: no model, no network.

It speaks `POST /v1/chat/completions` (plain, or streamed as server-sent events with
`stream=true`, chunk by chunk as the OpenAI API streams) and `GET /v1/models`, answers with
replies taken from a queue or computed by a callable, counts tokens by a simple word count (and
cuts a reply at the request's `max_tokens` words, with finish reason `length`); with `window`,
a model of that many words: vLLM's `POST /tokenize` (the same word count, `max_model_len`) and
vLLM's HTTP 400 for a chat longer than the window; injects faults
(429 with `Retry-After`, 500, slow replies, dropped connections, a refusal with a given status
and body) on chosen requests or with a seeded probability, and records every request it got.

    with ScriptedOpenAIServer(["Hello!"]) as srv:        # sync tests: a background thread
        client = LLMClient(base_url=srv.base_url, model="m")

    async with ScriptedOpenAIServer(reply_fn) as srv:    # async tests: the running loop
        ...
"""

from __future__ import annotations

import asyncio
import inspect
import json
import re
import socket
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from aiohttp import web

from gemkit.errors import GemkitError

RATE_LIMIT = "rate_limit"
SERVER_ERROR = "server_error"
SLOW = "slow"
DROP = "drop"
REJECT = "reject"
FAULT_KINDS = (RATE_LIMIT, SERVER_ERROR, SLOW, DROP, REJECT)
_FAULT_ALIASES = {"429": RATE_LIMIT, "500": SERVER_ERROR, "timeout": SLOW, "disconnect": DROP}
_WORD = re.compile(r"\S+")


@dataclass
class Reply:
    """One scripted assistant message: content, optional reasoning, optional tool calls.

    `tool_calls` entries are either `{"name": ..., "arguments": dict | str}` or full OpenAI
    `{"id", "type": "function", "function": {"name", "arguments"}}` dicts. `usage` replaces
    the word-count usage the server reports for this reply (e.g. a recorded one, with
    `prompt_tokens_details.cached_tokens`). `token_ids` and `logprobs` are what a token
    server (`gemkit.testing.token_server`) reports as sampled, instead of the tokenization
    of `content` and seeded log-probs.
    """

    content: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None


@dataclass
class Fault:
    """A failure to inject: `rate_limit` (429), `server_error` (500), `slow`, `drop`, or
    `reject`: an answer with HTTP `status` and the JSON `body` (say, a real server's refusal
    of an over-window request)."""

    kind: str
    retry_after: float | None = 0.05
    delay: float = 1.0
    status: int = 400
    body: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        self.kind = _FAULT_ALIASES.get(self.kind, self.kind)
        if self.kind not in FAULT_KINDS:
            raise GemkitError(f"unknown fault kind {self.kind!r}; expected one of {FAULT_KINDS}")


@dataclass
class RecordedRequest:
    """A request the server received and what it did with it."""

    number: int
    method: str
    path: str
    body: Any
    headers: dict[str, str]
    fault: str | None = None
    outcome: str = "pending"
    received_at: float = field(default_factory=time.monotonic)


ReplyLike = Reply | str | Mapping[str, Any]
ReplyFn = Callable[[dict[str, Any]], ReplyLike | Awaitable[ReplyLike]]


def count_words(text: str | None) -> int:
    """The server's token count: whitespace-separated words."""
    return len(_WORD.findall(text or ""))


def as_reply(value: ReplyLike) -> Reply:
    """Normalise a str, dict or Reply into a Reply."""
    if isinstance(value, Reply):
        return value
    if isinstance(value, str):
        return Reply(content=value)
    if isinstance(value, Mapping):
        unknown = set(value) - {
            "content",
            "reasoning_content",
            "tool_calls",
            "finish_reason",
            "usage",
            "token_ids",
            "logprobs",
        }
        if unknown:
            raise GemkitError(
                f"scripted reply has unknown keys {sorted(unknown)}; expected content, "
                "reasoning_content, tool_calls, finish_reason, usage, token_ids, logprobs"
            )
        return Reply(**dict(value))
    raise GemkitError(f"a scripted reply must be a str, dict or Reply, got {type(value).__name__}")


class ScriptedOpenAIServer:
    """A real aiohttp server on a free 127.0.0.1 port that answers chat completions by script.

    `replies` is an iterable of replies (str, dict or `Reply`) served in order, or a callable
    `(request_json) -> reply` (may be async). `faults` maps a 1-based chat-request number to a
    fault kind or `Fault`; `fault_rate` adds faults of `fault_kinds` at random, drawn from a
    generator seeded with `seed`. A faulted request consumes no scripted reply. `window` (a
    number of words) serves vLLM's `/tokenize` and refuses, as vLLM does, a chat over it.
    """

    def __init__(
        self,
        replies: Iterable[ReplyLike] | ReplyFn = (),
        *,
        model: str = "scripted-model",
        faults: Mapping[int, str | Fault] | None = None,
        fault_rate: float = 0.0,
        fault_kinds: Iterable[str | Fault] = (RATE_LIMIT, SERVER_ERROR),
        seed: int = 0,
        api_key: str | None = None,
        window: int | None = None,
    ):
        self.model = model
        self.api_key = api_key
        self.window = window
        self._fn: ReplyFn | None = replies if callable(replies) else None
        self._queue: deque[Reply] = deque() if callable(replies) else deque(map(as_reply, replies))
        self.faults = {int(k): _as_fault(v) for k, v in (faults or {}).items()}
        if not 0.0 <= fault_rate <= 1.0:
            raise GemkitError(f"fault_rate must be within [0, 1], got {fault_rate}")
        self.fault_rate = fault_rate
        self.fault_kinds = [_as_fault(k) for k in fault_kinds]
        self._rng = np.random.default_rng(seed)
        self.requests: list[RecordedRequest] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._chat_count = 0
        self._lock = threading.Lock()
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.port: int | None = None

    # -- script -------------------------------------------------------------------------------

    def push(self, *replies: ReplyLike) -> None:
        """Append replies to the queue."""
        with self._lock:
            self._queue.extend(as_reply(r) for r in replies)

    @property
    def base_url(self) -> str:
        """The `/v1` base URL clients should use."""
        if self.port is None:
            raise GemkitError("the server is not running; use it as a (async) context manager")
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def chat_requests(self) -> list[RecordedRequest]:
        """Every chat-completions request received, in arrival order."""
        return [r for r in self.requests if r.path.endswith("/chat/completions")]

    @property
    def answered(self) -> list[RecordedRequest]:
        """Chat requests that got a successful reply."""
        return [r for r in self.chat_requests if r.outcome == "answered"]

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> ScriptedOpenAIServer:
        """Start serving on the running event loop."""
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        if self.window is not None:
            app.router.add_post("/tokenize", self._tokenize)
        self._add_routes(app)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        await web.SockSite(self._runner, sock).start()
        return self

    async def stop(self) -> None:
        """Stop serving and release the port."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> ScriptedOpenAIServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def __enter__(self) -> ScriptedOpenAIServer:
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(
            target=loop.run_forever, name="scripted-openai", daemon=True
        )
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.start(), loop).result(timeout=30)
        return self

    def __exit__(self, *exc: object) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        asyncio.run_coroutine_threadsafe(self.stop(), loop).result(timeout=30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=30)
        loop.close()
        self._loop = self._thread = None

    # -- handlers -----------------------------------------------------------------------------

    def _add_routes(self, app: web.Application) -> None:
        """More endpoints, for subclasses (the token server adds completions and SGLang's)."""

    def _finish_choice(
        self, body: dict[str, Any], reply: Reply, choice: dict[str, Any]
    ) -> dict[str, Any]:
        """A chat choice as sent; subclasses add fields (`reply` is the one before any cut)."""
        return choice

    def _record(self, request: web.Request, body: Any) -> RecordedRequest:
        with self._lock:
            rec = RecordedRequest(
                number=len(self.requests) + 1,
                method=request.method,
                path=request.path,
                body=body,
                headers=dict(request.headers),
            )
            self.requests.append(rec)
        return rec

    def _unauthorized(self, request: web.Request) -> bool:
        return (
            self.api_key is not None
            and request.headers.get("Authorization") != f"Bearer {self.api_key}"
        )

    async def _models(self, request: web.Request) -> web.Response:
        rec = self._record(request, None)
        if self._unauthorized(request):
            rec.outcome = "rejected"
            return _error(401, "invalid API key", "invalid_api_key")
        rec.outcome = "answered"
        data = [{"id": self.model, "object": "model", "owned_by": "gemkit"}]
        return web.json_response({"object": "list", "data": data})

    async def _tokenize(self, request: web.Request) -> web.Response:
        # vLLM's shape (tests/data/real-model/vllm-probes.jsonl), counting words
        body = await request.json()
        self._record(request, body).outcome = "answered"
        if isinstance(body.get("messages"), list):
            n = _prompt_words(body["messages"])
        else:
            n = count_words(str(body.get("prompt", "")))
        return web.json_response({"count": n, "max_model_len": self.window, "tokens": [0] * n})

    def _pick_fault(self) -> tuple[int, Fault | None]:
        with self._lock:
            self._chat_count += 1
            n = self._chat_count
            fault = self.faults.get(n)
            if fault is None and self.fault_rate > 0 and self.fault_kinds:
                if self._rng.random() < self.fault_rate:
                    fault = self.fault_kinds[int(self._rng.integers(len(self.fault_kinds)))]
        return n, fault

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            body = None
        rec = self._record(request, body)
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            return await self._answer(request, rec, body)
        except asyncio.CancelledError:
            if rec.outcome == "pending":
                rec.outcome = "abandoned"
            raise
        finally:
            with self._lock:
                self.in_flight -= 1

    async def _answer(
        self, request: web.Request, rec: RecordedRequest, body: Any
    ) -> web.StreamResponse:
        if self._unauthorized(request):
            rec.outcome = "rejected"
            return _error(401, "invalid API key", "invalid_api_key")
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            rec.outcome = "rejected"
            return _error(
                400, "request body must be a JSON object with a 'messages' list", "invalid_request"
            )
        if self.window is not None and _prompt_words(body["messages"]) > self.window:
            rec.outcome = "rejected"
            n = _prompt_words(body["messages"])
            return _error(
                400,
                f"This model's maximum context length is {self.window} tokens. However, your "
                f"prompt contains at least {n} input tokens, which exceeds this limit even "
                "without any output tokens. (scripted)",
                "BadRequestError",
            )
        number, fault = self._pick_fault()
        rec.fault = fault.kind if fault else None
        if fault is not None and fault.kind == RATE_LIMIT:
            rec.outcome = "rate_limited"
            headers = {} if fault.retry_after is None else {"Retry-After": f"{fault.retry_after:g}"}
            return _error(429, "rate limit reached (scripted)", "rate_limit_exceeded", headers)
        if fault is not None and fault.kind == SERVER_ERROR:
            rec.outcome = "server_error"
            return _error(500, "internal error (scripted)", "server_error")
        if fault is not None and fault.kind == REJECT:
            rec.outcome = "rejected"
            payload = fault.body or {"error": {"message": "rejected (scripted)", "code": "x"}}
            return web.json_response(payload, status=fault.status)
        if fault is not None and fault.kind == DROP:
            rec.outcome = "dropped"
            if request.transport is not None:
                request.transport.close()
            raise asyncio.CancelledError  # nothing more to send on a closed connection
        if fault is not None and fault.kind == SLOW:
            await asyncio.sleep(fault.delay)
            if request.transport is None or request.transport.is_closing():
                rec.outcome = "abandoned"  # the client gave up; keep its reply for the retry
                raise asyncio.CancelledError
        try:
            replies = [await self._next_reply(body) for _ in range(int(body.get("n") or 1))]
        except _ScriptExhausted:
            rec.outcome = "rejected"
            return _error(
                400,
                f"ScriptedOpenAIServer has no scripted reply left for request #{number}",
                "script_exhausted",
            )
        rec.outcome = "answered"
        completion = self._completion(number, body, replies)
        if body.get("stream"):
            return await _stream(request, completion, body.get("stream_options"))
        return web.json_response(completion)

    async def _next_reply(self, body: dict[str, Any]) -> Reply:
        if self._fn is not None:
            value = self._fn(body)
            if inspect.isawaitable(value):
                value = await value
            return as_reply(value)
        with self._lock:
            if not self._queue:
                raise _ScriptExhausted
            return self._queue.popleft()

    def _completion(
        self, number: int, body: dict[str, Any], replies: list[Reply]
    ) -> dict[str, Any]:
        choices = []
        completion_tokens = 0
        limit = body.get("max_tokens")
        for i, original in enumerate(replies):
            reply = cut_to(original, limit if isinstance(limit, int) and limit > 0 else None)
            message: dict[str, Any] = {"role": "assistant", "content": reply.content}
            if reply.reasoning_content is not None:
                message["reasoning_content"] = reply.reasoning_content
            calls = [
                _openai_call(c, f"call_{number}_{i}_{j}")
                for j, c in enumerate(reply.tool_calls or [])
            ]
            if calls:
                message["tool_calls"] = calls
            completion_tokens += count_words(reply.content) + count_words(reply.reasoning_content)
            completion_tokens += sum(count_words(c["function"]["arguments"]) for c in calls)
            finish = reply.finish_reason or ("tool_calls" if calls else "stop")
            choice = {"index": i, "message": message, "finish_reason": finish}
            choices.append(self._finish_choice(body, original, choice))
        prompt_tokens = _prompt_words(body["messages"])
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }
        if len(replies) == 1 and replies[0].usage is not None:
            usage = dict(replies[0].usage)
        return {
            "id": f"chatcmpl-scripted-{number}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model") or self.model,
            "choices": choices,
            "usage": usage,
        }


def cut_to(reply: Reply, max_tokens: int | None) -> Reply:
    """The reply a server with `max_tokens` sends: content cut to that many words, `length`."""
    if max_tokens is None or reply.content is None or reply.tool_calls:
        return reply
    words = list(_WORD.finditer(reply.content))
    if len(words) <= max_tokens:
        return reply
    cut = reply.content[: words[max_tokens - 1].end()]
    return Reply(cut, reply.reasoning_content, None, "length", reply.usage)


class _ScriptExhausted(Exception):
    pass


def _as_fault(value: str | Fault) -> Fault:
    return value if isinstance(value, Fault) else Fault(str(value))


def _error(
    status: int, message: str, code: str, headers: Mapping[str, str] | None = None
) -> web.Response:
    payload = {"error": {"message": message, "type": code, "code": code}}
    return web.json_response(payload, status=status, headers=dict(headers or {}))


def _openai_call(call: Mapping[str, Any], default_id: str) -> dict[str, Any]:
    fn = call.get("function", call)
    args = fn.get("arguments", {})
    return {
        "id": call.get("id") or default_id,
        "type": "function",
        "function": {
            "name": fn["name"],
            "arguments": args if isinstance(args, str) else json.dumps(args),
        },
    }


def _prompt_words(messages: list[Any]) -> int:
    """The server's count of a chat's prompt tokens: the words of its messages."""
    return sum(count_words(_text_of(m)) for m in messages if isinstance(m, dict))


def _text_of(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):  # OpenAI content parts
        content = " ".join(p.get("text", "") for p in content if isinstance(p, Mapping))
    return content if isinstance(content, str) else ""


# -- streaming (server-sent events, as the OpenAI API sends `stream=true` answers) ------------

_PIECE = re.compile(r"\s*\S+\s*|\s+")


def text_pieces(text: str) -> list[str]:
    """`text` cut into word-sized pieces (each with its spaces) that join back to it."""
    return _PIECE.findall(text)


def completion_chunks(
    completion: Mapping[str, Any], *, include_usage: bool = False
) -> list[dict[str, Any]]:
    """A chat completion as the `chat.completion.chunk` objects an OpenAI stream sends.

    Per choice: a first chunk with the role, the reasoning and the content word by word, each
    tool call's id and name and then its arguments, and a last chunk with the finish reason;
    with `include_usage`, a final chunk with no choices and the usage (`stream_options`).
    """
    head = {
        "id": completion["id"],
        "object": "chat.completion.chunk",
        "created": completion["created"],
        "model": completion["model"],
    }

    def chunk(index: int, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        choice = {"index": index, "delta": delta, "finish_reason": finish}
        return {**head, "choices": [choice]}

    out = []
    for choice in completion["choices"]:
        i, message = choice["index"], choice["message"]
        out.append(chunk(i, {"role": "assistant", "content": ""}))
        for piece in text_pieces(message.get("reasoning_content") or ""):
            out.append(chunk(i, {"reasoning_content": piece}))
        for piece in text_pieces(message.get("content") or ""):
            out.append(chunk(i, {"content": piece}))
        for k, call in enumerate(message.get("tool_calls") or []):
            fn = call["function"]
            start = {"index": k, "id": call["id"], "type": "function"}
            out.append(chunk(i, {"tool_calls": [{**start, "function": {"name": fn["name"]}}]}))
            for piece in text_pieces(fn["arguments"]):
                out.append(
                    chunk(i, {"tool_calls": [{"index": k, "function": {"arguments": piece}}]})
                )
        out.append(chunk(i, {}, choice["finish_reason"]))
    if include_usage:
        out.append({**head, "choices": [], "usage": completion["usage"]})
    return out


async def _stream(
    request: web.Request, completion: Mapping[str, Any], options: Any
) -> web.StreamResponse:
    include_usage = isinstance(options, Mapping) and bool(options.get("include_usage"))
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
    )
    await response.prepare(request)
    for piece in completion_chunks(completion, include_usage=include_usage):
        await response.write(f"data: {json.dumps(piece)}\n\n".encode())
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()
    return response
