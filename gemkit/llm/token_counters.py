"""Token counters for context budgets: the model server's own tokenizer, any Hugging Face
tokenizer, or a fast heuristic."""

from __future__ import annotations

import json
import logging
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

logger = logging.getLogger(__name__)

MESSAGE_OVERHEAD = 4  # role markers and separators a chat template adds per message
_PIECE = re.compile(r"\w+|[^\w\s]", re.UNICODE)


@runtime_checkable
class TokenCounter(Protocol):
    """Counts tokens of a text and of a chat message list."""

    def count(self, text: str) -> int:
        """Tokens in `text`."""
        ...

    def count_messages(self, messages: Sequence[Mapping[str, Any]]) -> int:
        """Tokens of a whole chat, template overhead included."""
        ...


def message_text(message: Mapping[str, Any]) -> str:
    """Everything in a message the model reads: reasoning, content, tool calls."""
    parts = []
    for key in ("reasoning_content", "content"):
        value = message.get(key)
        if isinstance(value, str):
            parts.append(value)
        elif isinstance(value, list):  # OpenAI content parts
            parts.extend(p.get("text", "") for p in value if isinstance(p, Mapping))
    for call in message.get("tool_calls") or []:
        fn = call.get("function") or {}
        args = fn.get("arguments", "")
        parts.append(str(fn.get("name", "")))
        parts.append(args if isinstance(args, str) else json.dumps(args))
    return "\n".join(parts)


class HeuristicTokenCounter:
    """A fast, dependency-free estimate: each word costs one token per 4 characters, each
    punctuation mark one token. Close to BPE tokenizers on English prose and code."""

    def count(self, text: str) -> int:
        """Estimated tokens in `text`."""
        return sum((len(p) + 3) // 4 for p in _PIECE.findall(text))

    def count_messages(self, messages: Sequence[Mapping[str, Any]]) -> int:
        """Estimated tokens of a chat."""
        return sum(MESSAGE_OVERHEAD + self.count(message_text(m)) for m in messages)


class FunctionTokenCounter:
    """Adapts a plain `text -> int` function into a `TokenCounter`."""

    def __init__(self, fn: Callable[[str], int]):
        self.fn = fn

    def count(self, text: str) -> int:
        """Tokens in `text`."""
        return int(self.fn(text))

    def count_messages(self, messages: Sequence[Mapping[str, Any]]) -> int:
        """Tokens of a chat, with a fixed per-message overhead."""
        return sum(MESSAGE_OVERHEAD + self.count(message_text(m)) for m in messages)


class HFTokenCounter:
    """Exact counts from a Hugging Face tokenizer you pass in (nothing is downloaded here).

    With `chat_template=True` (default: when the tokenizer has one) a chat is counted by
    rendering it with `apply_chat_template`; otherwise per message plus a fixed overhead.
    """

    def __init__(self, tokenizer: Any, *, chat_template: bool | None = None):
        self.tokenizer = tokenizer
        if chat_template is None:
            chat_template = bool(getattr(tokenizer, "chat_template", None)) and hasattr(
                tokenizer, "apply_chat_template"
            )
        self.chat_template = chat_template

    def count(self, text: str) -> int:
        """Tokens in `text`, special tokens excluded."""
        return len(self.tokenizer.encode(text, add_special_tokens=False))

    def count_messages(self, messages: Sequence[Mapping[str, Any]]) -> int:
        """Tokens of a chat as the model's template renders it."""
        if self.chat_template:
            ids = self.tokenizer.apply_chat_template([dict(m) for m in messages], tokenize=True)
            if isinstance(ids, Mapping):  # some tokenizers return a BatchEncoding
                ids = ids["input_ids"]
            return len(ids)
        return sum(MESSAGE_OVERHEAD + self.count(message_text(m)) for m in messages)


class ServerTokenCounter:
    """Exact counts from the model server's own tokenizer and chat template, one request away.

    vLLM: `POST /tokenize` with `prompt` (a text) or `messages` (a chat, rendered with the
    generation prompt, as the model reads it). llama.cpp: `POST /tokenize` with `content`, and
    a chat rendered by `POST /apply-template` first. The first count finds which one the
    server is (both endpoints sit at the server's root, beside `/v1`); counts are cached.
    A server with neither, or one that fails a request, gets the heuristic estimate instead
    (`HeuristicTokenCounter`, which overcounts a BPE model's tokens by 10-40%): `exact` says
    which, `source` names it, and the switch is logged once.

    The requests are blocking (a counter is called from sync code); each is one fast request
    to a local server, answered without waiting for generation.
    """

    def __init__(
        self,
        base_url: str,
        model: str | None = None,
        *,
        api_key: str | None = None,
        timeout: float = 10.0,
        cache_size: int = 4096,
    ):
        root = base_url.rstrip("/")
        self.root = root[: -len("/v1")] if root.endswith("/v1") else root
        # how messages name the server: never with the user:password@ a URL may carry
        scheme, _, rest = self.root.partition("://")
        host, sep, path = rest.partition("/")
        self._shown = f"{scheme}://{host.rpartition('@')[2]}{sep}{path}"
        self.model = model
        self.api_key = api_key
        self.timeout = timeout
        self.cache_size = cache_size
        self.kind: str | None = None  # "vllm", "llama.cpp", or "heuristic" once known
        self.window: int | None = None  # the server's context window, when it says
        self.fallback_reason = ""
        self._heuristic = HeuristicTokenCounter()
        self._cache: OrderedDict[str, int] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def exact(self) -> bool:
        """Whether counts come from the server (False: the heuristic estimate)."""
        self._detect()
        return self.kind != "heuristic"

    @property
    def source(self) -> str:
        """What counts: `vllm /tokenize`, `llama.cpp /tokenize`, or the heuristic and why."""
        self._detect()
        if self.kind == "heuristic":
            return f"the heuristic estimate ({self.fallback_reason})"
        return f"{self.kind} /tokenize at {self._shown}"

    def count(self, text: str) -> int:
        """Tokens in `text` by the server's tokenizer (no special tokens added)."""
        return self._cached("t" + text, lambda: self._count_text(text), self._heuristic.count, text)

    def count_messages(self, messages: Sequence[Mapping[str, Any]]) -> int:
        """Tokens of a chat as the server's template renders it, generation prompt included."""
        chat = [dict(m) for m in messages]
        key = "m" + json.dumps(chat, sort_keys=True, ensure_ascii=False, default=str)
        return self._cached(
            key, lambda: self._count_chat(chat), self._heuristic.count_messages, messages
        )

    # -- the server ---------------------------------------------------------------------------

    def _cached(
        self, key: str, ask: Callable[[], int], estimate: Callable[[Any], int], x: Any
    ) -> int:
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
        self._detect()
        if self.kind == "heuristic":
            return estimate(x)
        try:
            n = ask()
        except (OSError, ValueError, KeyError, TypeError) as e:
            self._give_up(f"a /tokenize request failed: {type(e).__name__}: {e}")
            return estimate(x)
        with self._lock:
            self._cache[key] = n
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        return n

    def _detect(self) -> None:
        if self.kind is not None:
            return
        with self._lock:
            if self.kind is not None:
                return
            try:
                answer = self._post(
                    "/tokenize", {"model": self.model, "prompt": "a", "content": "a"}
                )
            except (OSError, ValueError) as e:
                self._give_up(
                    f"{self._shown} has no /tokenize: {type(e).__name__}: {e}", locked=True
                )
                return
            if isinstance(answer.get("count"), int):
                self.kind = "vllm"
                window = answer.get("max_model_len")
                self.window = window if isinstance(window, int) and window > 0 else None
            elif isinstance(answer.get("tokens"), list):
                self.kind = "llama.cpp"
                self.window = self._llama_window()
            else:
                self._give_up(
                    f"{self.root}/tokenize answered {json.dumps(answer)[:80]}", locked=True
                )

    def _give_up(self, why: str, *, locked: bool = False) -> None:
        if self.kind != "heuristic":
            logger.warning("token counts: %s; counting with the heuristic estimate instead", why)
        if locked:
            self.kind, self.fallback_reason = "heuristic", why
            return
        with self._lock:
            self.kind, self.fallback_reason = "heuristic", why

    def _llama_window(self) -> int | None:
        try:
            props = self._get("/props")
        except (OSError, ValueError):
            return None
        n = (props.get("default_generation_settings") or {}).get("n_ctx")
        return n if isinstance(n, int) and n > 0 else None  # a slot's window, not the total

    def _count_text(self, text: str) -> int:
        if self.kind == "vllm":
            return int(self._post("/tokenize", {"model": self.model, "prompt": text})["count"])
        return len(self._post("/tokenize", {"content": text})["tokens"])

    def _count_chat(self, chat: list[dict[str, Any]]) -> int:
        if self.kind == "vllm":
            body = {"model": self.model, "messages": chat, "add_generation_prompt": True}
            return int(self._post("/tokenize", body)["count"])
        prompt = self._post("/apply-template", {"messages": chat})["prompt"]
        return len(self._post("/tokenize", {"content": prompt, "parse_special": True})["tokens"])

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        data = json.dumps({k: v for k, v in body.items() if v is not None}).encode()
        return self._open(path, data)

    def _get(self, path: str) -> dict[str, Any]:
        return self._open(path, None)

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers

    def _open(self, path: str, data: bytes | None) -> dict[str, Any]:
        import urllib.request  # here: counters are imported with every context wrapper

        request = urllib.request.Request(self.root + path, data, self._headers())
        with urllib.request.urlopen(request, timeout=self.timeout) as r:
            answer = json.loads(r.read())
        if not isinstance(answer, dict):
            raise ValueError(f"not a JSON object: {str(answer)[:80]}")
        return answer


def as_counter(counter: TokenCounter | Callable[[str], int] | None) -> TokenCounter:
    """A `TokenCounter` from a counter, a `text -> int` function, or None (the heuristic)."""
    if counter is None:
        return HeuristicTokenCounter()
    if isinstance(counter, TokenCounter):
        return counter
    if callable(counter):
        return FunctionTokenCounter(counter)
    raise TypeError(
        "counter must be a TokenCounter, a function text -> int, or None; "
        f"got {type(counter).__name__}"
    )
