"""The OpenAI protocol as `gemkit serve model` speaks it: which request fields it honours, and
the shapes of its answers and stream chunks, written after vLLM's (recorded from vLLM 0.32 in
`tests/data/vllm/streams.json`).

Requests are read strictly: a field this server does not honour is a 400 naming it, never
silently ignored (a client asking for `stop`, `presence_penalty` or `tools` would otherwise get
samples it did not ask for, and a trainer log-probs that are not the policy's). A field with
its neutral value (`top_p: 1`, `presence_penalty: 0`, `stop: null`) is accepted. What vLLM
refuses, this refuses too: `top_logprobs` without `logprobs`, more than 20 top log-probs,
`stream_options` without `stream`.

Answers: a whole body (`chat.completion`, `text_completion`), or with `"stream": true`
server-sent events as vLLM sends them: per choice a first chat chunk with the role, then one
chunk per sampled token (its text, its log-probs and `token_ids` when asked, the
`finish_reason` on the last), a last chunk with `usage` and no choices when
`stream_options.include_usage` is set, then `data: [DONE]`. Every answer and chunk also
carries `weight_version`, the version of the weights that sampled it.

This module is pure: request bodies in, checked values or `RequestError` out; samples in,
JSON-ready dicts out. The server (`gemkit.train.model_server`) does the sampling.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gemkit.llm.sampled import TOKEN_ID_PREFIX
from gemkit.llm.sampling import SamplingError, SamplingParams
from gemkit.serving import RequestError, json_type, preview

#: the most top log-probs a request may ask for per token (vLLM's default `max_logprobs`)
MAX_TOP_LOGPROBS = 20
#: fields each endpoint honours
CHAT_FIELDS = frozenset(
    {"model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k",
     "min_p", "n", "seed", "stream", "stream_options", "logprobs", "top_logprobs",
     "return_token_ids", "return_tokens_as_token_ids", "user"}
)  # fmt: skip
COMPLETION_FIELDS = frozenset(
    {"model", "prompt", "max_tokens", "temperature", "top_p", "top_k", "min_p", "n", "seed",
     "stream", "stream_options", "logprobs", "return_token_ids", "return_tokens_as_token_ids",
     "user"}
)  # fmt: skip
#: fields accepted only with the value that changes nothing (a learner could not recompute
#: penalised log-probs, and the rest are not implemented)
NEUTRAL: dict[str, tuple[Any, ...]] = {
    "presence_penalty": (None, 0, 0.0),
    "frequency_penalty": (None, 0, 0.0),
    "repetition_penalty": (None, 1, 1.0),
    "stop": (None, [], ""),
    "echo": (None, False),
    "best_of": (None, 1),
    "tools": (None, []),
    "tool_choice": (None, "none"),
    "parallel_tool_calls": (None,),
    "response_format": (None, {"type": "text"}),
    "logit_bias": (None, {}),
}
#: why a field other than its neutral value is refused, for the 400 message
_PENALTY = "a learner cannot recompute penalised log-probs, so the server applies none"
WHY_NOT = {
    "presence_penalty": _PENALTY,
    "frequency_penalty": _PENALTY,
    "repetition_penalty": _PENALTY,
    "stop": "stop strings are not supported; cut the text after sampling",
    "tools": "tool calling is not supported; describe the tools in the prompt",
    "tool_choice": "tool calling is not supported; describe the tools in the prompt",
    "response_format": "structured output is not supported",
}
#: the seeds `torch.Generator.manual_seed` takes
SEED_RANGE = (-(2**63), 2**64 - 1)


@dataclass
class Sample:
    """One sampled row: its token ids, each one's log-prob under the sampling distribution,
    and per token the `top` most likely `(id, logprob)` pairs when asked."""

    ids: list[int]
    logprobs: list[float]
    top: list[list[tuple[int, float]]] = field(default_factory=list)


@dataclass
class Sampling:
    """A request's checked fields: what to sample and what to answer."""

    kind: str  # "chat" or "completions"
    model: str
    max_tokens: int
    params: SamplingParams
    n: int
    seed: int | None
    stream: bool
    include_usage: bool
    logprobs: bool
    top: int
    token_ids: bool
    as_ids: bool

    @property
    def temperature(self) -> float:
        """The sampling temperature."""
        return self.params.temperature


def _int(body: dict[str, Any], key: str, default: int, lo: int, hi: int, why: str = "") -> int:
    value = body.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestError(400, f"'{key}' must be an integer, got a JSON {json_type(value)}")
    if not lo <= value <= hi:
        raise RequestError(400, f"'{key}' must be from {lo} to {hi}{why}, got {preview(value, 40)}")
    return value


def _bool(body: dict[str, Any], key: str) -> bool:
    value = body.get(key)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise RequestError(400, f"'{key}' must be true or false, got {preview(value, 40)}")
    return value


def check_fields(body: dict[str, Any], honoured: frozenset[str]) -> None:
    """Refuse (400, naming it) the first field that is not honoured, unless it is neutral."""
    for key, value in body.items():
        if key in honoured:
            continue
        if key in NEUTRAL:
            if any(value == v and type(value) is type(v) for v in NEUTRAL[key] if v is not None):
                continue
            if value is None:
                continue
            why = WHY_NOT.get(key, "this server does not support it")
            raise RequestError(
                400, f"'{key}' {preview(value, 40)} is not supported: {why}; leave it out"
            )
        raise RequestError(
            400,
            f"unknown or unsupported field {preview(key, 40)}; this endpoint reads: "
            f"{', '.join(sorted(honoured))}",
        )


def check_model(body: dict[str, Any], served: Sequence[str]) -> str:
    """The model a request names (the first served name when it names none); an unknown name
    is a 404 listing the served ones, as vLLM answers."""
    name = body.get("model")
    if name is None:
        return served[0]
    if not isinstance(name, str) or name not in served:
        raise RequestError(
            404,
            f"the model {preview(name, 80)} does not exist; this server serves: "
            f"{', '.join(served)}",
        )
    return name


def parse_sampling(
    body: dict[str, Any],
    kind: str,
    *,
    served: Sequence[str],
    max_tokens: int,
    max_n: int,
    max_temperature: float,
) -> Sampling:
    """The checked fields of a chat (`kind="chat"`) or completions request, or a 4xx."""
    check_fields(body, CHAT_FIELDS if kind == "chat" else COMPLETION_FIELDS)
    model = check_model(body, served)
    cap = " (the server's cap)"
    if kind == "chat" and body.get("max_completion_tokens") is not None:
        tokens = _int(body, "max_completion_tokens", 16, 1, max_tokens, cap)
    else:
        tokens = _int(body, "max_tokens", 16, 1, max_tokens, cap)
    n = _int(body, "n", 1, 1, max_n)
    temperature = body.get("temperature", 1.0)
    if temperature is None:
        temperature = 1.0
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)):
        raise RequestError(400, f"'temperature' must be a number, got {preview(temperature)}")
    if math.isnan(temperature) or not 0 <= temperature <= max_temperature:
        raise RequestError(
            400, f"'temperature' must be from 0 to {max_temperature:g}, got {temperature}"
        )
    given = {k: body[k] for k in ("top_p", "top_k", "min_p") if body.get(k) is not None}
    try:
        params = SamplingParams(temperature=float(temperature), **given)
    except SamplingError as e:
        raise RequestError(400, str(e)) from None
    seed = body.get("seed")
    if seed is not None:
        seed = _int(body, "seed", 0, *SEED_RANGE)
    stream = _bool(body, "stream")
    options = body.get("stream_options")
    include_usage = False
    if options is not None:
        if not stream:
            raise RequestError(400, "'stream_options' can only be given with \"stream\": true")
        if not isinstance(options, dict):
            raise RequestError(400, "'stream_options' must be an object {\"include_usage\": b}")
        for key in options:
            if key != "include_usage":
                raise RequestError(
                    400, f"stream_options.{preview(key, 40)} is not supported; only include_usage"
                )
        include_usage = _bool(options, "include_usage")
    if kind == "chat":
        logprobs = _bool(body, "logprobs")
        if body.get("top_logprobs") is not None and not logprobs:
            raise RequestError(400, "'top_logprobs' needs \"logprobs\": true")
        top = _int(body, "top_logprobs", 0, 0, MAX_TOP_LOGPROBS)
    else:
        value = body.get("logprobs")
        logprobs = value is not None
        if isinstance(value, bool):  # an int here: how many top log-probs per token
            raise RequestError(400, "'logprobs' must be an integer from 0 to 20 on /v1/completions")
        top = _int(body, "logprobs", 0, 0, MAX_TOP_LOGPROBS)
    return Sampling(
        kind=kind,
        model=model,
        max_tokens=tokens,
        params=params,
        n=n,
        seed=seed,
        stream=stream,
        include_usage=include_usage,
        logprobs=logprobs,
        top=top,
        token_ids=_bool(body, "return_token_ids"),
        as_ids=_bool(body, "return_tokens_as_token_ids"),
    )


# -- answers ----------------------------------------------------------------------------------


class Shaper:
    """Builds one request's answer or stream chunks from its samples (`decode` is the
    tokenizer's, `eos` its end-of-sequence id)."""

    def __init__(
        self, sampling: Sampling, decode: Callable[..., str], eos: int, version: int
    ) -> None:
        self.s = sampling
        self.decode = decode
        self.eos = eos
        self.version = str(version)
        prefix = "chatcmpl" if sampling.kind == "chat" else "cmpl"
        self.id = f"{prefix}-{time.monotonic_ns():x}"
        self.created = int(time.time())

    def token(self, t: int) -> str:
        """How a token is spelled in log-probs: its text, or `token_id:N` when asked."""
        return f"{TOKEN_ID_PREFIX}{t}" if self.s.as_ids else self.decode([t])

    def finish(self, ids: Sequence[int], done: bool = True) -> str | None:
        """`stop` for a row that ended at EOS, `length` for one cut at max_tokens."""
        if not done:
            return None
        return "stop" if ids and ids[-1] == self.eos else "length"

    def _head(self, obj: str) -> dict[str, Any]:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.s.model}

    # -- log-probs --

    def chat_logprobs(self, ids: Sequence[int], lps: Sequence[float], top: Sequence) -> Any:
        """vLLM's chat `logprobs`: per token its text, log-prob, bytes and top alternatives."""
        content = []
        for k, (t, lp) in enumerate(zip(ids, lps, strict=True)):
            alts = top[k] if k < len(top) else []
            content.append(
                {**self._entry(t, lp), "top_logprobs": [self._entry(a, b) for a, b in alts]}
            )
        return {"content": content}

    def _entry(self, t: int, lp: float) -> dict[str, Any]:
        text = self.token(t)
        return {"token": text, "logprob": lp, "bytes": list(text.encode("utf-8", "replace"))}

    def completion_logprobs(
        self, ids: Sequence[int], lps: Sequence[float], top: Sequence, offset: int = 0
    ) -> dict[str, Any]:
        """vLLM's completions `logprobs`: tokens, their log-probs, per token the sampled one and
        the `logprobs` most likely ones, and each token's offset in the text."""
        tokens = [self.token(t) for t in ids]
        offsets = []
        for text in tokens:
            offsets.append(offset)
            offset += len(text)
        tops = []
        for k, lp in enumerate(lps):
            alts = {self.token(a): b for a, b in (top[k] if k < len(top) else [])}
            tops.append({tokens[k]: lp, **alts} if self.s.top else {tokens[k]: lp})
        return {
            "text_offset": offsets,
            "token_logprobs": list(lps),
            "tokens": tokens,
            "top_logprobs": tops,
        }

    # -- whole answers --

    def usage(self, prompt_tokens: int, samples: Sequence[Sample]) -> dict[str, int]:
        """Prompt, completion and total token counts."""
        completion = sum(len(x.ids) for x in samples)
        return {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion,
            "total_tokens": prompt_tokens + completion,
        }

    def chat_body(self, prompt: list[int], samples: Sequence[Sample]) -> dict[str, Any]:
        """A whole `chat.completion` answer."""
        choices = []
        for i, x in enumerate(samples):
            choice: dict[str, Any] = {
                "index": i,
                "message": {
                    "role": "assistant",
                    "content": self.decode(x.ids, skip_special_tokens=True),
                },
                "logprobs": self.chat_logprobs(x.ids, x.logprobs, x.top)
                if self.s.logprobs
                else None,
                "finish_reason": self.finish(x.ids),
                "stop_reason": None,
            }
            if self.s.token_ids:
                choice["token_ids"] = x.ids
            choices.append(choice)
        body = {
            **self._head("chat.completion"),
            "choices": choices,
            "usage": self.usage(len(prompt), samples),
            "weight_version": self.version,
        }
        if self.s.token_ids:
            body["prompt_token_ids"] = prompt
        return body

    def completion_body(
        self, prompts: Sequence[list[int]], samples: Sequence[Sample]
    ) -> dict[str, Any]:
        """A whole `text_completion` answer; `prompts[i]` is the prompt of choice `i`."""
        choices = []
        for i, (prompt, x) in enumerate(zip(prompts, samples, strict=True)):
            choices.append(
                {
                    "index": i,
                    "text": self.decode(x.ids, skip_special_tokens=True),
                    "logprobs": self.completion_logprobs(x.ids, x.logprobs, x.top)
                    if self.s.logprobs
                    else None,
                    "finish_reason": self.finish(x.ids),
                    "stop_reason": None,
                    "token_ids": x.ids if self.s.token_ids else None,
                    "prompt_token_ids": prompt if self.s.token_ids else None,
                }
            )
        # one prompt's tokens count once however many choices it has (n)
        prompt_tokens = sum(len(p) for p in prompts[:: max(1, self.s.n)])
        return {
            **self._head("text_completion"),
            "choices": choices,
            "usage": self.usage(prompt_tokens, samples),
            "weight_version": self.version,
        }

    # -- stream chunks --

    def role_chunk(self, index: int, prompt: list[int]) -> dict[str, Any]:
        """A chat stream's first chunk of choice `index`: the role, no text yet."""
        return {
            **self._head("chat.completion.chunk"),
            "choices": [
                {
                    "index": index,
                    "delta": {"role": "assistant", "content": ""},
                    "logprobs": None,
                    "finish_reason": None,
                }
            ],
            "prompt_token_ids": prompt if self.s.token_ids else None,
            "prompt_text": None,
            "weight_version": self.version,
        }

    def token_chunk(
        self,
        index: int,
        text: str,
        token: tuple[int, float, list[tuple[int, float]]],
        finish: str | None,
        *,
        prompt: list[int] | None = None,
        offset: int = 0,
    ) -> dict[str, Any]:
        """One sampled token of choice `index` as a stream chunk (`finish` on the last)."""
        t, lp, top = token
        choice: dict[str, Any]
        if self.s.kind == "chat":
            choice = {
                "index": index,
                "delta": {"content": text},
                "logprobs": self.chat_logprobs([t], [lp], [top]) if self.s.logprobs else None,
                "finish_reason": finish,
            }
            head = self._head("chat.completion.chunk")
        else:
            choice = {
                "index": index,
                "text": text,
                "logprobs": self.completion_logprobs([t], [lp], [top], offset)
                if self.s.logprobs
                else None,
                "finish_reason": finish,
                "prompt_token_ids": prompt if self.s.token_ids else None,
            }
            head = self._head("text_completion")
        if finish is not None or self.s.kind != "chat":
            choice["stop_reason"] = None
        choice["token_ids"] = [t] if self.s.token_ids else None
        return {**head, "choices": [choice], "weight_version": self.version}

    def usage_chunk(self, prompt_tokens: int, samples: Sequence[Sample]) -> dict[str, Any]:
        """The last chunk with `stream_options.include_usage`: usage and no choices."""
        obj = "chat.completion.chunk" if self.s.kind == "chat" else "text_completion"
        return {
            **self._head(obj),
            "choices": [],
            "usage": self.usage(prompt_tokens, samples),
            "weight_version": self.version,
        }


def sse(payload: Any) -> bytes:
    """One server-sent event `data: <json>` (or `data: [DONE]`)."""
    text = payload if isinstance(payload, str) else json.dumps(payload, allow_nan=False)
    return f"data: {text}\n\n".encode()


class TextDeltas:
    """A row's text as it grows token by token: each new token's piece, holding back a piece
    that ends inside a character (a byte-level token that splits a UTF-8 sequence)."""

    def __init__(self, decode: Callable[..., str]):
        self.decode = decode
        self.ids: list[int] = []
        self.sent = ""

    def push(self, token: int, last: bool) -> str:
        """The text that `token` adds (all that is left when `last`)."""
        self.ids.append(token)
        text = self.decode(self.ids, skip_special_tokens=True)
        if last:  # whatever is left, even if decoding the longer text changed what was sent
            common = len(os.path.commonprefix([text, self.sent]))
            piece, self.sent = text[common:], text
            return piece
        if not text.startswith(self.sent) or text.endswith("\ufffd"):
            return ""
        piece, self.sent = text[len(self.sent) :], text
        return piece
