"""An async client for any OpenAI-compatible chat-completions endpoint (vLLM, SGLang, OpenAI).

One aiohttp session per client, a concurrency limit, retries with exponential backoff and
jitter on 429/5xx, connect failures and dropped connections (honouring `Retry-After`), and
token totals. `reasoning_content` (from reasoning parsers) is kept apart from `content`.

Two bounds hold for every request: `max_tokens` (the client's default, `DEFAULT_MAX_TOKENS`,
unless a call or the client says otherwise) and `timeout`, the seconds the server has to
answer a request it accepted (`timeout=`, else `$GEMKIT_TIMEOUT`, else `DEFAULT_TIMEOUT`). A
request the server accepted and did not answer in time is not sent again: a retry would queue
the same work from scratch behind the first, on a server already too slow for it
(`LLMTimeoutError`, naming the setting to raise). A request that does not fit the model's
context window is refused by the server with HTTP 400; that is `ContextWindowError`, so a
caller can treat it as a result of its own input rather than a server failure.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import os
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import aiohttp
import numpy as np

from gemkit.errors import GemkitError
from gemkit.llm.sampled import SampledTokens, from_chat_choice

logger = logging.getLogger(__name__)
T = TypeVar("T")

ENV_BASE_URL = "GEMKIT_BASE_URL"
ENV_API_KEY = "GEMKIT_API_KEY"
ENV_MODEL = "GEMKIT_MODEL"
ENV_TIMEOUT = "GEMKIT_TIMEOUT"
#: seconds a server has to answer an accepted request, when neither `timeout=` nor
#: $GEMKIT_TIMEOUT says (the OpenAI SDK's default: a 0.5B model on 2 CPU cores needs minutes)
DEFAULT_TIMEOUT = 600.0
#: the longest reply a request asks for when neither the call nor the client says: a bound on
#: runaway replies (a weak model can write to the end of its window), room for reasoning
DEFAULT_MAX_TOKENS = 2048
#: seconds to open a connection (at most the timeout); a connect that fails is retried
CONNECT_TIMEOUT = 30.0
RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504})


class LLMError(GemkitError):
    """A chat request that failed: a rejected request, or retries exhausted."""

    def __init__(self, message: str, *, status: int | None = None, attempts: int = 1):
        super().__init__(message)
        self.status = status
        self.attempts = attempts


class LLMTimeoutError(LLMError):
    """The server accepted a request and sent no answer within the timeout (it is not re-sent)."""


class ContextWindowError(LLMError):
    """The server refused a request that does not fit the model's context window (HTTP 400).

    The request itself is too long (a conversation that outgrew the window), so sending it
    again fails again: callers record it as the outcome of their input, not a server failure.
    """


class LLMConfigError(GemkitError):
    """The client is missing its endpoint or model, or a setting is out of range."""


def resolve_timeout(timeout: float | None = None) -> float:
    """The timeout in seconds: `timeout` if given, else `$GEMKIT_TIMEOUT`, else the default."""
    where = "timeout="
    if timeout is None:
        text = os.environ.get(ENV_TIMEOUT, "").strip()
        if not text:
            return DEFAULT_TIMEOUT
        where = f"${ENV_TIMEOUT}"
        try:
            timeout = float(text)
        except ValueError:
            raise LLMConfigError(
                f"{ENV_TIMEOUT}={text!r} is not a number: give the seconds a model server has "
                f"to answer, e.g. {ENV_TIMEOUT}=900"
            ) from None
    if not timeout > 0 or timeout == float("inf"):
        raise LLMConfigError(f"{where} must be a number of seconds > 0, got {timeout!r}")
    return float(timeout)


@dataclass
class ToolCall:
    """A function call the model asked for; `arguments` is the raw JSON text the model wrote."""

    id: str
    name: str
    arguments: str = "{}"

    def parsed_arguments(self) -> Any:
        """The arguments decoded from JSON; the raw text when it is not valid JSON."""
        try:
            return json.loads(self.arguments)
        except (json.JSONDecodeError, TypeError):
            return self.arguments

    def to_dict(self) -> dict[str, Any]:
        """The OpenAI wire form."""
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ToolCall:
        """Read the OpenAI wire form (arguments given as a dict are JSON-encoded)."""
        fn = d.get("function") or {}
        args = fn.get("arguments", "{}")
        return cls(
            id=str(d.get("id") or ""),
            name=str(fn.get("name") or ""),
            arguments=args if isinstance(args, str) else json.dumps(args),
        )


@dataclass
class Message:
    """A chat message; `reasoning_content` is the model's thinking, kept apart from `content`."""

    role: str
    content: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_call_id: str | None = None
    name: str | None = None

    def to_dict(self, *, include_reasoning: bool = True) -> dict[str, Any]:
        """The OpenAI wire form; empty fields are left out."""
        d: dict[str, Any] = {"role": self.role, "content": self.content}
        if include_reasoning and self.reasoning_content is not None:
            d["reasoning_content"] = self.reasoning_content
        if self.tool_calls:
            d["tool_calls"] = [c.to_dict() for c in self.tool_calls]
        if self.tool_call_id is not None:
            d["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            d["name"] = self.name
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Message:
        """Read the OpenAI wire form."""
        return cls(
            role=str(d.get("role", "assistant")),
            content=d.get("content"),
            reasoning_content=d.get("reasoning_content") or d.get("reasoning"),
            tool_calls=[ToolCall.from_dict(c) for c in d.get("tool_calls") or []],
            tool_call_id=d.get("tool_call_id"),
            name=d.get("name"),
        )


@dataclass
class Usage:
    """Token counts as the server reported them.

    `cached_tokens` are prompt tokens the server served from its prefix cache (part of
    `prompt_tokens`), read from `prompt_tokens_details.cached_tokens` (OpenAI, vLLM,
    llama.cpp) or a top-level `cached_tokens`.
    """

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    cached_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.total_tokens + other.total_tokens,
            self.cached_tokens + other.cached_tokens,
        )

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> Usage:
        """Read the `usage` object of a response (missing or malformed fields count as 0)."""
        d = d if isinstance(d, Mapping) else {}
        details = d.get("prompt_tokens_details")
        cached = details.get("cached_tokens") if isinstance(details, Mapping) else None
        p, c = _count(d.get("prompt_tokens")), _count(d.get("completion_tokens"))
        return cls(
            p, c, _count(d.get("total_tokens")) or p + c, _count(cached or d.get("cached_tokens"))
        )


def _count(value: Any) -> int:
    # servers differ: a missing field, null, or a float all read as a whole count
    try:
        return max(0, int(value or 0))
    except (TypeError, ValueError):
        return 0


@dataclass
class Choice:
    """One sampled completion; `tokens` when the server reported its ids (`gemkit.llm.sampled`)."""

    index: int
    message: Message
    finish_reason: str | None = None
    tokens: SampledTokens | None = None


@dataclass
class ChatResponse:
    """A chat completion: the choices, the usage, and how many attempts it took."""

    id: str
    model: str
    choices: list[Choice]
    usage: Usage
    attempts: int = 1
    latency_s: float = 0.0
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def message(self) -> Message:
        """The first choice's message."""
        return self.choices[0].message

    @property
    def content(self) -> str:
        """The first choice's content ('' when the model only called tools)."""
        return self.message.content or ""

    @property
    def reasoning_content(self) -> str | None:
        """The first choice's reasoning, when the server separates it."""
        return self.message.reasoning_content

    @property
    def tool_calls(self) -> list[ToolCall]:
        """The first choice's tool calls."""
        return self.message.tool_calls

    @property
    def finish_reason(self) -> str | None:
        """Why the first choice stopped (`stop`, `length`, `tool_calls`)."""
        return self.choices[0].finish_reason

    @property
    def tokens(self) -> SampledTokens | None:
        """The first choice's sampled token ids and log-probs, when the server sent them."""
        return self.choices[0].tokens

    @classmethod
    def from_dict(
        cls, d: Mapping[str, Any], *, attempts: int = 1, latency_s: float = 0.0
    ) -> ChatResponse:
        """Read a chat-completions response body."""
        choices = [
            Choice(
                int(c.get("index", i)),
                Message.from_dict(c.get("message") or {}),
                c.get("finish_reason"),
                from_chat_choice(c, d),
            )
            for i, c in enumerate(d.get("choices") or [])
        ]
        if not choices:
            raise LLMError(f"the endpoint answered with no choices: {json.dumps(d)[:300]}")
        return cls(
            id=str(d.get("id", "")),
            model=str(d.get("model", "")),
            choices=choices,
            usage=Usage.from_dict(d.get("usage")),
            attempts=attempts,
            latency_s=latency_s,
            raw=dict(d),
        )


class _Retryable(Exception):
    def __init__(self, reason: str, retry_after: float | None = None, status: int | None = None):
        super().__init__(reason)
        self.retry_after = retry_after
        self.status = status


class _Unanswered(Exception):
    """The server accepted the request and sent no whole answer within `timeout` seconds."""

    def __init__(self, timeout: float):
        super().__init__(f"no answer within {timeout:g} s")
        self.timeout = timeout


class LLMClient:
    """Async OpenAI-compatible chat client with a concurrency limit, retries and usage totals.

    Configure with arguments or the env vars `GEMKIT_BASE_URL`, `GEMKIT_API_KEY`,
    `GEMKIT_MODEL`, `GEMKIT_TIMEOUT`. Default sampling parameters (`temperature=0.7`, ...)
    passed as keyword arguments apply to every `chat` call unless the call overrides them.
    `max_tokens` bounds every reply unless a call says otherwise (None: send no bound, the
    server's own applies); `timeout` is the seconds a server has to answer (module docstring).
    """

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        model: str | None = None,
        *,
        max_concurrency: int = 16,
        timeout: float | None = None,
        max_tokens: int | None = DEFAULT_MAX_TOKENS,
        max_retries: int = 6,
        backoff_base: float = 0.5,
        backoff_max: float = 30.0,
        max_retry_after: float = 120.0,
        seed: int | None = None,
        headers: Mapping[str, str] | None = None,
        **default_params: Any,
    ):
        base_url = base_url or os.environ.get(ENV_BASE_URL)
        model = model or os.environ.get(ENV_MODEL)
        if not base_url:
            raise LLMConfigError(
                f"no LLM endpoint: pass base_url= or set {ENV_BASE_URL} "
                "(an OpenAI-compatible URL such as http://localhost:8000/v1)"
            )
        if not model:
            raise LLMConfigError(
                f"no model name: pass model= or set {ENV_MODEL} (e.g. Qwen/Qwen3-8B)"
            )
        if max_concurrency < 1:
            raise LLMConfigError(f"max_concurrency must be >= 1, got {max_concurrency}")
        if max_retries < 0:
            raise LLMConfigError(f"max_retries must be >= 0, got {max_retries}")
        if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 1):
            raise LLMConfigError(
                f"max_tokens must be a whole number >= 1 or None, got {max_tokens!r}"
            )
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key if api_key is not None else os.environ.get(ENV_API_KEY)
        self.model = model
        self.max_concurrency = max_concurrency
        self.timeout = resolve_timeout(timeout)
        self.max_retries = max_retries
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.max_retry_after = max_retry_after
        self.headers = dict(headers or {})
        if max_tokens is not None:
            default_params = {"max_tokens": max_tokens, **default_params}
        self.default_params = default_params
        self.usage = Usage()
        self.num_requests = 0
        self.num_attempts = 0
        self.num_retries = 0
        self._rng = np.random.default_rng(seed)
        self._session: aiohttp.ClientSession | None = None
        self._sem: asyncio.Semaphore | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def __repr__(self) -> str:
        return f"LLMClient(base_url={self.base_url!r}, model={self.model!r})"

    def __deepcopy__(self, memo: dict[int, Any]) -> LLMClient:
        # A client is a shared connection pool: cloned envs and policies use the same one.
        return self

    # -- session ------------------------------------------------------------------------------

    def _ensure_session(self) -> tuple[aiohttp.ClientSession, asyncio.Semaphore]:
        loop = asyncio.get_running_loop()
        if self._session is None or self._session.closed or self._loop is not loop:
            # A session is tied to its event loop; a client reused under a new loop (two
            # `asyncio.run` calls) gets a fresh one instead of failing; the old one cannot be
            # closed from here (its loop is gone), its idle sockets go with garbage collection.
            headers = {"Content-Type": "application/json", **self.headers}
            if self.api_key:
                headers["Authorization"] = f"Bearer {self.api_key}"
            limit = aiohttp.TCPConnector(limit=self.max_concurrency)
            self._session = aiohttp.ClientSession(headers=headers, connector=limit)
            self._sem = asyncio.Semaphore(self.max_concurrency)
            self._loop = loop
        assert self._sem is not None
        return self._session, self._sem

    async def close(self) -> None:
        """Close the HTTP session (safe to call twice)."""
        if self._session is not None and not self._session.closed:
            await self._session.close()
        self._session = None

    async def __aenter__(self) -> LLMClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- requests -----------------------------------------------------------------------------

    def build_body(
        self,
        messages: Sequence[Mapping[str, Any] | Message],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        **params: Any,
    ) -> dict[str, Any]:
        """The JSON body `chat` sends: default params, then call params (None means unset)."""
        extra_body = params.pop("extra_body", None) or {}
        merged = {**self.default_params, **{k: v for k, v in params.items() if v is not None}}
        extra_body = {**merged.pop("extra_body", {}), **extra_body}
        body: dict[str, Any] = {
            "model": merged.pop("model", None) or self.model,
            "messages": [m.to_dict() if isinstance(m, Message) else dict(m) for m in messages],
        }
        if tools:
            body["tools"] = list(tools)
        body.update({k: v for k, v in merged.items() if v is not None})
        body.update(extra_body)
        return body

    async def chat(
        self,
        messages: Sequence[Mapping[str, Any] | Message],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        tool_choice: str | Mapping[str, Any] | None = None,
        model: str | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        max_tokens: int | None = None,
        n: int | None = None,
        stop: str | Sequence[str] | None = None,
        seed: int | None = None,
        extra_body: Mapping[str, Any] | None = None,
        timeout: float | None = None,
    ) -> ChatResponse:
        """Send one chat-completions request; retry transient failures; return the response."""
        if not messages:
            raise LLMError("chat() needs at least one message")
        body = self.build_body(
            messages,
            tools=tools,
            tool_choice=tool_choice,
            model=model,
            temperature=temperature,
            top_p=top_p,
            max_tokens=max_tokens,
            n=n,
            stop=stop,
            seed=seed,
            extra_body=extra_body,
        )
        start = time.monotonic()
        data, attempt = await self._send("/chat/completions", body, timeout, "chat")
        response = ChatResponse.from_dict(
            data, attempts=attempt, latency_s=time.monotonic() - start
        )
        self.usage = self.usage + response.usage
        return response

    async def post_json(
        self, path: str, body: dict[str, Any], *, timeout: float | None = None
    ) -> dict[str, Any]:
        """POST `body` to `base_url + path` with the client's limit and retries; the JSON answer.

        For the endpoints next to chat: `/completions` with token-id prompts, SGLang's
        `/generate` (give a base URL without `/v1` for it).
        """
        data, _ = await self._send(path, body, timeout, path.strip("/") or "request")
        self.usage = self.usage + Usage.from_dict(data.get("usage"))
        return data

    async def _send(
        self, path: str, body: dict[str, Any], timeout: float | None, what: str
    ) -> tuple[dict[str, Any], int]:
        limit = resolve_timeout(timeout) if timeout is not None else self.timeout
        return await self._retrying(lambda: self._post(body, limit, path), what)

    async def _retrying(
        self,
        call: Callable[[], Awaitable[T]],
        what: str,
        sent: Callable[[], int] = lambda: 0,
    ) -> tuple[T, int]:
        """`call()` with the client's retries; `(its result, attempts)`.

        Retried: what failed before the server took the request or that it refused for now
        (a connection that cannot be opened or was dropped, 429, 5xx). Not retried: an
        accepted request left unanswered (`_Unanswered`: `LLMTimeoutError` at once) and any
        other refusal. `sent()` counts what an attempt has already handed on (stream pieces):
        once it is not 0, a failure is final, since a retry would hand them on twice.
        """
        self.num_requests += 1
        attempt = 0
        while True:
            attempt += 1
            self.num_attempts += 1
            try:
                return await call(), attempt
            except _Unanswered as e:
                raise LLMTimeoutError(
                    f"{what} request to {self.base_url}: the server accepted it and sent no "
                    f"answer within {e.timeout:g} s, so it was not sent again (a retry would "
                    "queue the same work from scratch). Give a slow server more time with "
                    f"--timeout SECONDS or {ENV_TIMEOUT}=SECONDS (LLMClient(timeout=) in "
                    "code), or ask for shorter replies (--max-tokens)",
                    attempts=attempt,
                ) from None
            except _Retryable as e:
                handed = sent()
                if handed or attempt > self.max_retries:
                    pieces = f" and {handed} chunks" if handed else ""
                    raise LLMError(
                        f"{what} request to {self.base_url} failed after {attempt} attempts"
                        f"{pieces}: {e}",
                        status=e.status,
                        attempts=attempt,
                    ) from None
                delay = self._delay(attempt, e.retry_after)
                logger.info("%s attempt %d failed (%s); retrying in %.2fs", what, attempt, e, delay)
                self.num_retries += 1
                await asyncio.sleep(delay)

    async def _post(
        self, body: dict[str, Any], timeout: float, path: str = "/chat/completions"
    ) -> dict[str, Any]:
        session, sem = self._ensure_session()
        url = f"{self.base_url}{path}"
        connect = min(CONNECT_TIMEOUT, timeout)
        # the connect has its own limit (a failed one is retried); once connected, the server
        # has `timeout` seconds to answer (sock_read), and the whole exchange a bound too
        limits = aiohttp.ClientTimeout(
            total=connect + timeout, sock_connect=connect, sock_read=timeout
        )
        async with sem:
            try:
                async with session.post(url, json=body, timeout=limits) as resp:
                    text = await resp.text()
                    status = resp.status
                    retry_after = _parse_retry_after(resp.headers.get("Retry-After"))
            except aiohttp.ConnectionTimeoutError:
                raise _Retryable(f"could not connect within {connect:g} s") from None
            except asyncio.TimeoutError:
                raise _Unanswered(timeout) from None
            except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError) as e:
                raise _Retryable(f"connection error: {type(e).__name__}: {e}") from None
        _raise_for(status, text, retry_after)
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            raise LLMError(
                f"the endpoint answered with invalid JSON: {text[:300]!r}", status=status
            ) from None
        if not isinstance(data, dict):
            raise LLMError(
                f"the endpoint answered with a non-object JSON body: {text[:300]!r}", status=status
            )
        return data

    async def chat_stream(
        self,
        messages: Sequence[Mapping[str, Any] | Message],
        *,
        on_delta: Callable[[ChatDelta], Any] | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        timeout: float | None = None,
        **params: Any,
    ) -> ChatResponse:
        """`chat` with `stream=true`: each piece goes to `on_delta` as it arrives; returns the
        whole response, assembled from the stream (usage included, via `stream_options`).

        Failures before the first piece are retried as in `chat`; once pieces have gone to
        `on_delta`, a broken stream raises `LLMError` (a retry would send them twice).
        """
        if not messages:
            raise LLMError("chat_stream() needs at least one message")
        body = self.build_body(messages, tools=tools, **params)
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
        limit = timeout if timeout is not None else self.timeout
        start = time.monotonic()
        chunks: list[dict[str, Any]] = []

        async def attempt() -> None:
            chunks.clear()
            await self._post_stream(body, limit, chunks, on_delta)

        _, attempts = await self._retrying(attempt, "streamed chat", lambda: len(chunks))
        response = ChatResponse.from_dict(
            assemble_chunks(chunks), attempts=attempts, latency_s=time.monotonic() - start
        )
        self.usage = self.usage + response.usage
        return response

    async def _post_stream(
        self,
        body: dict[str, Any],
        timeout: float,
        chunks: list[dict[str, Any]],
        on_delta: Callable[[ChatDelta], Any] | None,
    ) -> None:
        session, sem = self._ensure_session()
        url = f"{self.base_url}/chat/completions"
        async with sem:
            try:
                async with session.post(
                    url, json=body, timeout=aiohttp.ClientTimeout(total=timeout)
                ) as resp:
                    if resp.status >= 400:
                        retry_after = _parse_retry_after(resp.headers.get("Retry-After"))
                        _raise_for(resp.status, await resp.text(), retry_after)
                    if resp.content_type == "application/json":  # the same on every retry
                        raise _not_a_stream(resp.content_type, await resp.text(), resp.status)
                    other = b""  # the start of what came that is not an event
                    async for line in resp.content:
                        chunk = sse_data(line)
                        if chunk is None:
                            if not other and line.strip() and not line.startswith(b":"):
                                other = line.strip()[:200]
                            continue
                        if chunk == "[DONE]":
                            return
                        chunks.append(chunk)
                        if on_delta is not None:
                            for delta in chunk_deltas(chunk):
                                result = on_delta(delta)
                                if asyncio.iscoroutine(result):
                                    await result
            except asyncio.TimeoutError:
                raise _Retryable(f"no whole answer within {timeout:g}s") from None
            except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError) as e:
                raise _Retryable(f"connection error: {type(e).__name__}: {e}") from None
        if not chunks and other:
            raise _not_a_stream(resp.content_type, other.decode("utf-8", "replace"), resp.status)
        if not chunks:
            raise _Retryable("the stream ended before its first chunk")

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(retry_after, self.max_retry_after)
        cap: float = min(self.backoff_max, self.backoff_base * 2 ** (attempt - 1))
        # "Equal jitter": at least half the backoff, so retries never bunch at zero.
        return cap / 2 + float(self._rng.uniform(0, cap / 2))

    async def models(self) -> list[str]:
        """The model ids the endpoint serves (`GET /models`)."""
        session, _ = self._ensure_session()
        try:
            async with session.get(
                f"{self.base_url}/models", timeout=aiohttp.ClientTimeout(total=self.timeout)
            ) as resp:
                text = await resp.text()
                if resp.status >= 400:
                    raise LLMError(
                        f"GET /models failed (HTTP {resp.status}): {_error_message(text)}",
                        status=resp.status,
                    )
        except (asyncio.TimeoutError, aiohttp.ClientError) as e:
            raise LLMError(f"cannot reach {self.base_url}: {type(e).__name__}: {e}") from None
        return [m.get("id", "") for m in json.loads(text).get("data", [])]


def _not_a_stream(content_type: str, text: str, status: int) -> LLMError:
    """A stream request answered with something other than server-sent events: a server that
    does not stream, so retrying cannot help."""
    shown = " ".join(_error_message(text).split())[:160]
    return LLMError(
        f"the endpoint answered a stream request with {content_type or 'untyped data'}, not "
        f"server-sent events, so it does not stream (it sent {shown!r}); use chat() instead",
        status=status,
    )


def _parse_retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


#: how servers say a request does not fit the window (vLLM, llama.cpp, OpenAI, SGLang, TGI)
_WINDOW_WORDS = ("context length", "context_length", "context size", "context window",
                 "exceed_context_size", "maximum input length")  # fmt: skip


def is_context_overflow(status: int, text: str) -> bool:
    """Whether an error answer says the request does not fit the model's context window."""
    low = text.lower()
    return status in (400, 413, 422) and any(w in low for w in _WINDOW_WORDS)


def _raise_for(status: int, text: str, retry_after: float | None) -> None:
    """Raise for an HTTP status that is no answer: `_Retryable` (429, 5xx), `ContextWindowError`
    or `LLMError`."""
    if status in RETRY_STATUSES or status >= 500:
        raise _Retryable(f"HTTP {status}: {_error_message(text)}", retry_after, status)
    if is_context_overflow(status, text):
        raise ContextWindowError(
            f"the request does not fit the model's context window (HTTP {status}): "
            f"{_error_message(text)}",
            status=status,
        )
    if status >= 400:
        raise LLMError(
            f"the endpoint rejected the request (HTTP {status}): {_error_message(text)}",
            status=status,
        )


def _error_message(text: str) -> str:
    try:
        err = json.loads(text).get("error")
    except (json.JSONDecodeError, AttributeError):
        return text[:300]
    if isinstance(err, Mapping):
        return str(err.get("message", err))
    return str(err)[:300] if err else text[:300]


# -- streaming ------------------------------------------------------------------------------------


@dataclass
class ChatDelta:
    """One piece of a streamed answer: new text of choice `index`, or a tool call's piece."""

    index: int = 0
    content: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    finish_reason: str | None = None


def sse_data(line: bytes | str) -> Any:
    """The JSON of one server-sent `data:` line (`"[DONE]"` for the end), None for others."""
    text = line.decode("utf-8", "replace") if isinstance(line, bytes) else line
    text = text.strip()
    if not text.startswith("data:"):
        return None
    payload = text[5:].strip()
    if payload == "[DONE]":
        return "[DONE]"
    try:
        data = json.loads(payload)
    except json.JSONDecodeError:
        raise LLMError(
            f"the endpoint streamed a line that is not JSON: {payload[:200]!r}"
        ) from None
    if isinstance(data, dict) and "error" in data:
        raise LLMError(f"the endpoint failed mid-stream: {_error_message(payload)}")
    return data if isinstance(data, dict) else None


def chunk_deltas(chunk: Mapping[str, Any]) -> list[ChatDelta]:
    """The pieces of one `chat.completion.chunk`, one per choice it carries."""
    out = []
    for c in chunk.get("choices") or []:
        delta = c.get("delta") or {}
        out.append(
            ChatDelta(
                index=int(c.get("index", 0)),
                content=delta.get("content"),
                reasoning_content=delta.get("reasoning_content") or delta.get("reasoning"),
                tool_calls=list(delta.get("tool_calls") or []),
                finish_reason=c.get("finish_reason"),
            )
        )
    return out


def assemble_chunks(chunks: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """A chat-completions body from its stream: texts joined, tool-call pieces merged by index."""
    choices: dict[int, dict[str, Any]] = {}
    usage = None
    for chunk in chunks:
        usage = chunk.get("usage") or usage
        for d in chunk_deltas(chunk):
            c = choices.setdefault(d.index, {"content": [], "reasoning": [], "calls": {}})
            if d.content:
                c["content"].append(d.content)
            if d.reasoning_content:
                c["reasoning"].append(d.reasoning_content)
            for piece in d.tool_calls:
                call = c["calls"].setdefault(int(piece.get("index", 0)), {"name": "", "args": []})
                call["id"] = piece.get("id") or call.get("id")
                fn = piece.get("function") or {}
                call["name"] += fn.get("name") or ""
                call["args"].append(fn.get("arguments") or "")
            if d.finish_reason:
                c["finish"] = d.finish_reason
    first = chunks[0] if chunks else {}
    body_choices = []
    for i, c in sorted(choices.items()):
        message: dict[str, Any] = {"role": "assistant", "content": "".join(c["content"]) or None}
        if c["reasoning"]:
            message["reasoning_content"] = "".join(c["reasoning"])
        if c["calls"]:
            message["tool_calls"] = [
                {
                    "id": call.get("id") or f"call_{i}_{k}",
                    "type": "function",
                    "function": {"name": call["name"], "arguments": "".join(call["args"])},
                }
                for k, call in sorted(c["calls"].items())
            ]
        body_choices.append({"index": i, "message": message, "finish_reason": c.get("finish")})
    return {
        "id": first.get("id", ""),
        "model": first.get("model", ""),
        "choices": body_choices,
        "usage": usage,
    }
