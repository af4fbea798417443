"""`gemkit serve model PATH`: a small OpenAI-protocol model server with token ids, log-probs
and versioned weight updates, for CPU runs and tests (vLLM or SGLang on a GPU machine).

Endpoints (JSON; every error a one-line `{"error"}` with a 4xx):

| request | answers |
|---|---|
| `POST /v1/completions` | `prompt` (token ids or text), `max_tokens`, `temperature`, `n`, `logprobs`; vLLM's shape with `token_ids`, `prompt_token_ids`, `logprobs.token_logprobs` (and `"token_id:N"` tokens under `return_tokens_as_token_ids`) |
| `POST /v1/chat/completions` | `messages` rendered by the tokenizer's chat template (plain lines without one); vLLM's token fields when asked |
| `POST /update_weights?weight_version=N` | a safetensors body with every tensor of the model: new weights, version `N` |
| `POST /update_weights_from_disk` | `{"model_path", "weight_version"}` (SGLang's name): the same from a local folder |
| `GET /health`, `GET /get_model_info`, `GET /v1/models` | model, `weight_version`, vocabulary size and hash |

Sampling is at `temperature` with `top_k`, `top_p` and `min_p` applied as vLLM applies them
(full distribution by default; penalties are refused), and each log-prob is the sampled
token's under that distribution (vLLM's `--logprobs-mode processed_logprobs`): what the
trainer's `gemkit.train.sequences.token_logprobs` computes under the same parameters for the
same weights, so importance ratios are exact. Concurrent requests are batched (up to `max_batch` rows per forward pass).
Generation and weight updates run one at a time on one worker thread, so a request is
sampled wholly by one version of the weights, and each answer says which
(`weight_version`); versions only go up.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import math
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from aiohttp import web

from gemkit.errors import GemkitError
from gemkit.llm.sampled import TOKEN_ID_PREFIX, chat_logprobs
from gemkit.llm.sampling import SamplingError, SamplingParams
from gemkit.serving import (
    RequestError,
    json_type,
    loads_json,
    middlewares,
    preview,
    resolve_token,
)
from gemkit.train.sequences import processed_logits

log = logging.getLogger(__name__)

ENDPOINTS = (
    "POST /v1/completions, POST /v1/chat/completions, POST /update_weights, "
    "POST /update_weights_from_disk, GET /health, GET /get_model_info, GET /v1/models"
)


@dataclass
class ServerLimits:
    """What one request may ask for; past these it gets a 4xx saying which limit."""

    max_tokens: int = 256
    max_n: int = 16
    max_batch: int = 64
    max_body: int = 4 * 1024 * 1024
    max_temperature: float = 10.0
    batch_wait_s: float = 0.003


# -- generation ------------------------------------------------------------------------------


@torch.no_grad()
def sample_batch(
    model: Any,
    prompts: Sequence[Sequence[int]],
    max_tokens: Sequence[int],
    *,
    temperature: float | None = None,
    sampling: SamplingParams | None = None,
    eos_id: int,
    pad_id: int,
    generator: torch.Generator | None = None,
    cache_arg: str | None = None,
) -> list[tuple[list[int], list[float]]]:
    """Sample a completion of each prompt with a KV cache; `(ids, logprobs)` per row.

    Rows are left-padded with positions counted from each row's first real token (as the
    trainer's right-padded rows count them); a row ends at its EOS (kept) or its
    `max_tokens`. The distribution is `sampling` (or plain `temperature`); temperature 0
    decodes greedily and reports log-probs at temperature 1.
    `cache_arg` is the model's KV-cache argument name (found from its signature when None).
    """
    if sampling is None:
        sampling = SamplingParams(temperature=1.0 if temperature is None else temperature)
    device = model.device
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p) :] = torch.tensor(list(p), dtype=torch.long)
        attn[i, width - len(p) :] = 1
    ids, attn = ids.to(device), attn.to(device)
    positions = (attn.cumsum(-1) - 1).clamp(min=0)
    cache_arg = cache_arg or _cache_argument(model)
    out = model(input_ids=ids, attention_mask=attn, position_ids=positions, use_cache=True)
    limit = torch.tensor(list(max_tokens), device=device)
    done = torch.zeros(len(prompts), dtype=torch.bool, device=device)
    tokens: list[torch.Tensor] = []
    logps: list[torch.Tensor] = []
    next_pos = positions[:, -1:] + 1
    for step in range(int(limit.max())):
        logits = out.logits[:, -1, :].float()
        if sampling.temperature > 0:
            logp = torch.log_softmax(processed_logits(logits, sampling), dim=-1)
            tok = torch.multinomial(logp.exp(), 1, generator=generator).squeeze(-1)
        else:
            logp = torch.log_softmax(logits, dim=-1)
            tok = logp.argmax(-1)
        tok = torch.where(done, torch.full_like(tok, pad_id), tok)
        tokens.append(tok)
        logps.append(logp.gather(-1, tok.unsqueeze(-1)).squeeze(-1))
        done = done | (tok == eos_id) | (step + 1 >= limit)
        if bool(done.all()):
            break
        attn = torch.cat([attn, torch.ones_like(attn[:, :1])], dim=-1)
        cache = getattr(out, cache_arg)
        out = model(
            input_ids=tok.unsqueeze(-1),
            attention_mask=attn,
            position_ids=next_pos,
            use_cache=True,
            **{cache_arg: cache},
        )
        next_pos = next_pos + 1
    sampled = torch.stack(tokens, dim=1).tolist()
    logprobs = torch.stack(logps, dim=1).tolist()
    results = []
    for row, lps, cap in zip(sampled, logprobs, max_tokens, strict=True):
        row, lps = row[:cap], lps[:cap]
        if eos_id in row:
            cut = row.index(eos_id) + 1
            row, lps = row[:cut], lps[:cut]
        results.append((row, lps))
    return results


def _cache_argument(model: Any) -> str:
    """The name of the KV-cache argument (and output): `cache` from transformers 5.2x on."""
    import inspect

    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def unique_state(model: Any) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """The model's tensors without tied copies, and each tied name's source name."""
    state, aliases, seen = {}, {}, {}
    for name, tensor in model.state_dict().items():
        key = (tensor.data_ptr(), tensor.shape, tensor.dtype)
        if key in seen:
            aliases[name] = seen[key]  # e.g. lm_head.weight tied to the embeddings
        else:
            seen[key] = name
            state[name] = tensor
    return state, aliases


class ModelEngine:
    """A causal LM, its tokenizer and its weight version; all calls on one worker thread."""

    def __init__(self, model: Any, tokenizer: Any, *, name: str, seed: int = 0, version: int = 0):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.name = name
        self.version = version
        self.vocab_size = int(model.get_input_embeddings().weight.shape[0])
        self.max_positions = int(getattr(model.config, "max_position_embeddings", 2048) or 2048)
        self.eos_id = int(tokenizer.eos_token_id)
        pad = tokenizer.pad_token_id
        self.pad_id = int(pad if pad is not None else self.eos_id)
        self.generator = torch.Generator(device=model.device).manual_seed(seed)
        self.tokenizer_hash = vocab_hash(tokenizer)
        state, self._aliases = unique_state(model)
        self._shapes = {k: (v.shape, v.dtype) for k, v in state.items()}
        self.cache_arg = _cache_argument(model)  # once, not per batch

    def generate(
        self, prompts: list[list[int]], max_tokens: list[int], sampling: SamplingParams
    ) -> tuple[int, list[tuple[list[int], list[float]]]]:
        """`(version, [(ids, logprobs), ...])`: one batch, all by one version."""
        rows = sample_batch(
            self.model,
            prompts,
            max_tokens,
            sampling=sampling,
            eos_id=self.eos_id,
            pad_id=self.pad_id,
            generator=self.generator,
            cache_arg=self.cache_arg,
        )
        return self.version, rows

    def check_state(self, state: dict[str, torch.Tensor]) -> None:
        """Raise `RequestError(400)` unless `state` has exactly this model's tensors."""
        missing = sorted(set(self._shapes) - set(state))
        extra = sorted(set(state) - set(self._shapes))
        if missing or extra:
            raise RequestError(
                400,
                f"the weights must name exactly the model's {len(self._shapes)} tensors: "
                f"{len(missing)} missing (e.g. {missing[:2]}), {len(extra)} unknown "
                f"(e.g. {extra[:2]})",
            )
        for key, tensor in state.items():
            shape, _ = self._shapes[key]
            if tensor.shape != shape:
                raise RequestError(
                    400, f"tensor {key!r} has shape {list(tensor.shape)}, expected {list(shape)}"
                )
            if not tensor.is_floating_point() or not bool(torch.isfinite(tensor).all()):
                raise RequestError(400, f"tensor {key!r} must hold finite floating-point values")

    def load(self, state: dict[str, torch.Tensor], version: int) -> int:
        """Swap in checked weights as `version` (greater than the current one)."""
        if version <= self.version:
            raise RequestError(
                409,
                f"weight_version must be greater than the current {self.version}, got {version}",
            )
        self.check_state(state)
        full = {**state, **{alias: state[source] for alias, source in self._aliases.items()}}
        self.model.load_state_dict(full, strict=True)
        self.version = version
        return version


def vocab_hash(tokenizer: Any) -> str:
    """A short hash of the tokenizer's vocabulary: client and server must share one."""
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1])
    return hashlib.sha256(json.dumps(vocab).encode()).hexdigest()[:16]


# -- requests --------------------------------------------------------------------------------


def _int_field(body: dict[str, Any], key: str, default: int, lo: int, hi: int, why: str) -> int:
    value = body.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestError(400, f"'{key}' must be an integer, got a JSON {json_type(value)}")
    if not lo <= value <= hi:
        raise RequestError(400, f"'{key}' must be from {lo} to {hi}{why}, got {value}")
    return value


def sampling_fields(body: dict[str, Any], limits: ServerLimits) -> tuple[int, SamplingParams, int]:
    """`(max_tokens, sampling parameters, n)` of a request, checked."""
    max_tokens = _int_field(body, "max_tokens", 16, 1, limits.max_tokens, " (the server's cap)")
    n = _int_field(body, "n", 1, 1, limits.max_n, "")
    temperature = body.get("temperature", 1.0)
    if temperature is None:
        temperature = 1.0
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)):
        raise RequestError(400, f"'temperature' must be a number, got {preview(temperature)}")
    if not 0 <= temperature <= limits.max_temperature or math.isnan(temperature):
        raise RequestError(
            400, f"'temperature' must be from 0 to {limits.max_temperature:g}, got {temperature}"
        )
    given = {k: body[k] for k in SamplingParams.__dataclass_fields__ if body.get(k) is not None}
    given["temperature"] = float(temperature)
    try:
        sampling = SamplingParams(**given)
    except SamplingError as e:
        raise RequestError(400, str(e)) from None
    if sampling.penalised:
        raise RequestError(
            400,
            "repetition_penalty, presence_penalty and frequency_penalty are not supported (a "
            "learner cannot recompute penalised log-probs); leave them at 1, 0 and 0",
        )
    return max_tokens, sampling, n


class ModelServer:
    """The aiohttp app over a `ModelEngine`, with request batching and limits."""

    def __init__(
        self, engine: ModelEngine, *, limits: ServerLimits | None = None, token: str | None = None
    ):
        self.engine = engine
        self.limits = limits or ServerLimits()
        self.token = resolve_token(token)  # None: $GEMKIT_SERVE_TOKEN, as the other servers
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gemkit-model")
        self._queue: asyncio.Queue | None = None
        self._worker: asyncio.Task | None = None
        self.batches = 0
        self.rows = 0
        self.busy_s = 0.0
        size = sum(t.numel() * t.element_size() for t in engine.model.state_dict().values())
        #: a weight upload may be the model's size plus the safetensors header
        self.max_upload = max(size * 2, 1 << 20)

    def app(self) -> web.Application:
        """The aiohttp application (its batching worker starts with it)."""
        app = web.Application(
            client_max_size=max(self.max_upload, self.limits.max_body),
            middlewares=middlewares(ENDPOINTS, self.token),
        )
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/update_weights", self._update_weights)
        app.router.add_post("/update_weights_from_disk", self._update_from_disk)
        app.router.add_get("/health", self._health)
        app.router.add_get("/get_model_info", self._health)
        app.router.add_get("/v1/models", self._models)
        app.on_startup.append(self._start)
        app.on_cleanup.append(self._stop)
        return app

    async def _start(self, _: web.Application) -> None:
        self._queue = asyncio.Queue()
        self._worker = asyncio.create_task(self._batches())

    async def _stop(self, _: web.Application) -> None:
        if self._worker is not None:
            self._worker.cancel()
        self._pool.shutdown(wait=False, cancel_futures=True)

    # -- batching -----------------------------------------------------------------------------

    async def _run(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    async def generate(
        self, prompts: list[list[int]], max_tokens: int, sampling: SamplingParams
    ) -> tuple[int, list[tuple[list[int], list[float]]]]:
        """Queue the rows for the next batch; `(version, rows)` once sampled."""
        assert self._queue is not None, "the app is not started"
        futures = []
        for p in prompts:
            future = asyncio.get_running_loop().create_future()
            self._queue.put_nowait((p, max_tokens, sampling, future))
            futures.append(future)
        results = await asyncio.gather(*futures)
        versions = {v for v, _ in results}
        if len(versions) != 1:  # the n rows of one request straddled a weight update: redo
            return await self.generate(prompts, max_tokens, sampling)
        return versions.pop(), [row for _, row in results]

    async def _batches(self) -> None:
        assert self._queue is not None
        while True:
            items = [await self._queue.get()]
            if self.limits.batch_wait_s > 0 and self._queue.qsize() + 1 < self.limits.max_batch:
                # a forward pass costs about the same for 1 row as for 30 on a small model:
                # waiting briefly for the requests on their way makes each pass serve more
                await asyncio.sleep(self.limits.batch_wait_s)
            while not self._queue.empty() and len(items) < self.limits.max_batch:
                items.append(self._queue.get_nowait())
            by_sampling: dict[SamplingParams, list] = {}
            for item in items:
                by_sampling.setdefault(item[2], []).append(item)
            for sampling, group in by_sampling.items():
                live = [g for g in group if not g[3].cancelled()]
                if not live:
                    continue
                start = time.perf_counter()
                try:
                    version, rows = await self._run(
                        self.engine.generate,
                        [g[0] for g in live],
                        [g[1] for g in live],
                        sampling,
                    )
                except Exception as e:  # noqa: BLE001 - fail these requests, keep serving
                    log.exception("generation failed")
                    for g in live:
                        if not g[3].done():
                            g[3].set_exception(e)
                    continue
                self.busy_s += time.perf_counter() - start
                self.batches += 1
                self.rows += len(live)
                for g, row in zip(live, rows, strict=True):
                    if not g[3].done():
                        g[3].set_result((version, row))

    # -- handlers -----------------------------------------------------------------------------

    async def _json(self, request: web.Request, shape: str) -> dict[str, Any]:
        # the app's client_max_size is the weight upload's; a JSON body stops at max_body,
        # refused by its Content-Length or once max_body + 1 bytes have arrived
        limit = self.limits.max_body
        too_big = RequestError(
            413,
            f"the body is over the server's limit of {limit:,} bytes; send less per request "
            "or start the server with a larger --max-body-kb",
        )
        if request.content_length is not None and request.content_length > limit:
            raise too_big
        raw = bytearray()
        while len(raw) <= limit:
            chunk = await request.content.read(limit + 1 - len(raw))
            if not chunk:
                break
            raw += chunk
        if len(raw) > limit:
            raise too_big
        raw = bytes(raw)
        body = loads_json(raw) if raw.strip() else {}
        if not isinstance(body, dict):
            raise RequestError(400, f"expected a JSON object {shape}, got a JSON {json_type(body)}")
        return body

    def _prompt_ids(self, prompt: Any, max_tokens: int) -> list[int]:
        if isinstance(prompt, str):
            ids = list(self.engine.tokenizer(prompt, add_special_tokens=False)["input_ids"])
        elif isinstance(prompt, list) and all(
            isinstance(x, int) and not isinstance(x, bool) for x in prompt
        ):
            ids = list(prompt)
            bad = [x for x in ids if not 0 <= x < self.engine.vocab_size]
            if bad:
                raise RequestError(
                    400,
                    f"token id {bad[0]} is outside the vocabulary (0..{self.engine.vocab_size - 1})",
                )
        else:
            raise RequestError(
                400, "'prompt' must be a list of token ids or a string (one prompt per request)"
            )
        if not ids:
            raise RequestError(400, "'prompt' is empty; send at least one token")
        room = self.engine.max_positions
        if len(ids) + max_tokens > room:
            raise RequestError(
                400,
                f"the prompt ({len(ids)} tokens) plus max_tokens ({max_tokens}) is over the "
                f"model's {room} positions; send a shorter prompt or fewer max_tokens",
            )
        return ids

    def _logprob_tokens(self, ids: list[int], as_ids: bool) -> list[str]:
        if as_ids:
            return [f"{TOKEN_ID_PREFIX}{t}" for t in ids]
        return [self.engine.tokenizer.decode([t]) for t in ids]

    def _usage(self, prompt: list[int], rows: list[tuple[list[int], list[float]]]) -> dict:
        completion = sum(len(r[0]) for r in rows)
        return {
            "prompt_tokens": len(prompt),
            "completion_tokens": completion,
            "total_tokens": len(prompt) + completion,
        }

    def _finish(self, ids: list[int]) -> str:
        return "stop" if ids and ids[-1] == self.engine.eos_id else "length"

    def _check_rows(self, prompts: int, n: int) -> None:
        """Refuse a request for more than `max_batch` rows (prompts x n), on every path."""
        if prompts * n > self.limits.max_batch:
            raise RequestError(
                400,
                f"{prompts} prompt{'s' if prompts != 1 else ''} x n={n} is over the server's "
                f"{self.limits.max_batch} rows per request; send fewer prompts or a smaller n "
                "per request",
            )

    def _prompts(self, prompt: Any, max_tokens: int, n: int) -> list[list[int]]:
        """The prompts of a completions request: one, or a batch (a list of id lists)."""
        if isinstance(prompt, list) and prompt and all(isinstance(p, list) for p in prompt):
            self._check_rows(len(prompt), n)
            return [self._prompt_ids(p, max_tokens) for p in prompt]
        self._check_rows(1, n)
        return [self._prompt_ids(prompt, max_tokens)]

    async def _completions(self, request: web.Request) -> web.Response:
        body = await self._json(request, '{"prompt": [ids] or "text", "max_tokens": n}')
        max_tokens, sampling, n = sampling_fields(body, self.limits)
        if "prompt" not in body:
            raise RequestError(400, "the body needs 'prompt': a list of token ids or a string")
        prompts = self._prompts(body["prompt"], max_tokens, n)
        # vLLM's order: the n choices of the first prompt, then of the second, ...
        rows_for = [p for p in prompts for _ in range(n)]
        version, rows = await self.generate(rows_for, max_tokens, sampling)
        as_ids = bool(body.get("return_tokens_as_token_ids"))
        with_ids = bool(body.get("return_token_ids"))
        choices = []
        for i, (prompt, (ids, logprobs)) in enumerate(zip(rows_for, rows, strict=True)):
            choice: dict[str, Any] = {
                "index": i,
                "text": self.engine.tokenizer.decode(ids, skip_special_tokens=True),
                "finish_reason": self._finish(ids),
                "stop_reason": None,
                "token_ids": ids if with_ids else None,
                "prompt_token_ids": prompt if with_ids else None,
            }
            if body.get("logprobs") is not None:
                choice["logprobs"] = {
                    "tokens": self._logprob_tokens(ids, as_ids),
                    "token_logprobs": logprobs,
                    "top_logprobs": None,
                    "text_offset": None,
                }
            choices.append(choice)
        completion = sum(len(r[0]) for r in rows)
        prompt_tokens = sum(len(p) for p in rows_for)
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion,
            "total_tokens": prompt_tokens + completion,
        }
        return web.json_response(
            {
                "id": f"cmpl-{time.monotonic_ns():x}",
                "object": "text_completion",
                "created": int(time.time()),
                "model": self.engine.name,
                "choices": choices,
                "usage": usage,
                "weight_version": str(version),
            }
        )

    def _chat_prompt(self, messages: Any, max_tokens: int) -> list[int]:
        if not isinstance(messages, list) or not messages:
            raise RequestError(400, "'messages' must be a non-empty list of chat messages")
        for k, m in enumerate(messages):
            if not isinstance(m, dict) or not isinstance(m.get("content"), str):
                raise RequestError(
                    400, f"message {k} must be an object with a string 'content' (and a 'role')"
                )
        tok = self.engine.tokenizer
        if getattr(tok, "chat_template", None):
            ids = tok.apply_chat_template(
                [{"role": str(m.get("role", "user")), "content": m["content"]} for m in messages],
                add_generation_prompt=True,
            )
            ids = ids["input_ids"] if hasattr(ids, "keys") else ids
            return self._prompt_ids(list(ids), max_tokens)
        return self._prompt_ids("\n".join(m["content"] for m in messages), max_tokens)

    async def _chat(self, request: web.Request) -> web.Response:
        body = await self._json(request, '{"messages": [...], "max_tokens": n}')
        max_tokens, sampling, n = sampling_fields(body, self.limits)
        self._check_rows(1, n)
        prompt = self._chat_prompt(body.get("messages"), max_tokens)
        version, rows = await self.generate([prompt] * n, max_tokens, sampling)
        as_ids = bool(body.get("return_tokens_as_token_ids"))
        choices = []
        for i, (ids, logprobs) in enumerate(rows):
            text = self.engine.tokenizer.decode(ids, skip_special_tokens=True)
            choice: dict[str, Any] = {
                "index": i,
                "message": {"role": "assistant", "content": text},
                "finish_reason": self._finish(ids),
            }
            if body.get("return_token_ids"):
                choice["token_ids"] = ids
            if body.get("logprobs"):
                choice["logprobs"] = chat_logprobs(self._logprob_tokens(ids, as_ids), logprobs)
            choices.append(choice)
        payload = {
            "id": f"chatcmpl-{time.monotonic_ns():x}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.engine.name,
            "choices": choices,
            "usage": self._usage(prompt, rows),
            "weight_version": str(version),
        }
        if body.get("return_token_ids"):
            payload["prompt_token_ids"] = prompt
        return web.json_response(payload)

    def _version_of(self, value: Any) -> int:
        if value is None:
            return self.engine.version + 1
        try:
            version = int(value)
        except (TypeError, ValueError):
            raise RequestError(
                400, f"weight_version must be an integer, got {preview(value)}"
            ) from None
        return version

    async def _apply(self, state: dict[str, torch.Tensor], version: int) -> web.Response:
        def load() -> int:
            return self.engine.load(state, version)

        loaded = await self._run(load)
        return web.json_response({"success": True, "weight_version": str(loaded)})

    async def _update_weights(self, request: web.Request) -> web.Response:
        from safetensors import SafetensorError
        from safetensors.torch import load as load_bytes

        version = self._version_of(request.query.get("weight_version"))
        raw = await request.read()
        if len(raw) > self.max_upload:
            raise RequestError(413, f"the weights are over {self.max_upload:,} bytes")
        try:
            state = load_bytes(raw)
        except (SafetensorError, ValueError, RuntimeError):
            raise RequestError(
                400, "the body is not a safetensors file; send safetensors.torch.save(state_dict)"
            ) from None
        return await self._apply(state, version)

    async def _update_from_disk(self, request: web.Request) -> web.Response:
        from safetensors.torch import load_file

        body = await self._json(request, '{"model_path": "DIR", "weight_version": n}')
        path = body.get("model_path")
        if not isinstance(path, str) or not path:
            raise RequestError(400, "'model_path' must be a folder with model.safetensors")
        files = sorted(Path(path).glob("*.safetensors")) if Path(path).is_dir() else []
        if not files:
            raise RequestError(400, f"no *.safetensors files in {preview(path)}")
        version = self._version_of(body.get("weight_version"))
        state: dict[str, torch.Tensor] = {}
        for f in files:
            state.update(load_file(str(f)))
        for alias in self.engine._aliases:
            state.pop(alias, None)  # a tied tensor saved twice (save_pretrained keeps one)
        return await self._apply(state, version)

    async def _health(self, _: web.Request) -> web.Response:
        return web.json_response(
            {
                "model": self.engine.name,
                "model_path": self.engine.name,
                "weight_version": str(self.engine.version),
                "vocab_size": self.engine.vocab_size,
                "tokenizer_hash": self.engine.tokenizer_hash,
                "batches": self.batches,
                "rows": self.rows,
                "busy_s": round(self.busy_s, 3),
            }
        )

    async def _models(self, _: web.Request) -> web.Response:
        data = [
            {
                "id": self.engine.name,
                "object": "model",
                "owned_by": "gemkit",
                "max_model_len": self.engine.max_positions,
            }
        ]
        return web.json_response({"object": "list", "data": data})


def state_bytes(model: Any) -> bytes:
    """A model's weights as a safetensors body for `POST /update_weights`."""
    from safetensors.torch import save

    state, _ = unique_state(model)
    return save({k: v.detach().contiguous().cpu() for k, v in state.items()})


def load_engine(
    path: str | None = None,
    *,
    tiny: str | None = None,
    seed: int = 0,
    device: str = "cpu",
) -> ModelEngine:
    """A `ModelEngine` over a local model folder, or over `--tiny ENV`'s tiny random model."""
    from gemkit.train.tiny import load_policy, tiny_policy

    if (path is None) == (tiny is None):
        raise GemkitError("pass a model folder PATH or --tiny ENV_ID (one of them)")
    if path is not None and not Path(path).is_dir():
        raise GemkitError(
            f"{path!r} is not a folder; pass a local Hugging Face model folder (config.json, "
            "weights, tokenizer files) or --tiny ENV_ID for a tiny random model"
        )
    try:
        model, tokenizer = tiny_policy(tiny, seed=seed) if tiny else load_policy(str(path))
    except OSError as e:
        raise GemkitError(f"cannot load the model in {path!r}: {e}") from None
    name = f"tiny:{tiny}" if tiny else str(path)
    return ModelEngine(model.to(device), tokenizer, name=name, seed=seed)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _die_with_parent() -> None:
    """In the child, before exec: on Linux, get SIGTERM when the parent dies (even by a kill
    that skips its cleanup), so a server never outlives the trainer that started it."""
    import sys

    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class _ChildServer:
    """A model server in a child of this process on 127.0.0.1: awaited and stopped alike."""

    def __init__(self, log_path: str | Path | None):
        import tempfile

        self._dir = tempfile.TemporaryDirectory(prefix="gemkit-serve-")
        self.log_path = Path(log_path) if log_path else Path(self._dir.name) / "server.log"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self._ready = Path(self._dir.name) / "ready"
        self.proc: Any = None

    def start(self) -> _ChildServer:
        """Start the child (returns at once; `wait` blocks until it serves)."""
        raise NotImplementedError

    def exit_code(self) -> int | None:
        """The child's exit status, or None while it runs."""
        raise NotImplementedError

    def _terminate(self) -> None:
        raise NotImplementedError

    def wait(self, timeout: float = 300.0) -> str:
        """Block until the child serves; its base URL. A child that died is a GemkitError."""
        deadline = time.monotonic() + timeout
        while not self._ready.exists():
            code = self.exit_code()
            if code is not None:
                tail = self.log_path.read_text()[-1500:] if self.log_path.exists() else ""
                raise GemkitError(f"the model server exited ({code}):\n{tail}")
            if time.monotonic() > deadline:
                self.stop()
                raise GemkitError(f"the model server did not start within {timeout:g} s")
            time.sleep(0.02)
        return self.url

    def stop(self) -> None:
        """Stop the child (safe to call twice)."""
        if self.proc is not None and self.exit_code() is None:
            self._terminate()

    def __enter__(self) -> Any:
        self.start()
        self.wait()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
        self._dir.cleanup()


class ServerProcess(_ChildServer):
    """`gemkit serve model` in a child process on 127.0.0.1: started, awaited, stopped.

    `args` are the serve flags after `gemkit serve model` (a PATH or `--tiny ENV`, ...);
    the port is picked here. Its output goes to `log_path` (a temporary file by default).
    """

    def __init__(self, args: Sequence[str], *, log_path: str | Path | None = None):
        super().__init__(log_path)
        self.args = list(args)
        self._log: Any = None

    def start(self) -> ServerProcess:
        """Start the child process (returns at once; `wait` blocks until it serves)."""
        import subprocess
        import sys

        cmd = [sys.executable, "-m", "gemkit", "serve", "model", *self.args]
        cmd += ["--port", str(self.port), "--ready-file", str(self._ready)]
        self._log = self.log_path.open("w")
        self.proc = subprocess.Popen(
            cmd, stdout=self._log, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent
        )
        return self

    def exit_code(self) -> int | None:
        """The child's exit status, or None while it runs."""
        return self.proc.poll()

    def _terminate(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except Exception:  # noqa: BLE001 - a child that ignores SIGTERM
            self.proc.kill()
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        """Stop the child process (safe to call twice)."""
        super().stop()
        if self._log is not None:
            self._log.close()
            self._log = None


class ForkedServer(_ChildServer):
    """The model server in a forked child of this process, over `model` exactly as it is now.

    The child shares the parent's imports and weights (copy-on-write): no second start-up,
    no second load, and the served weights are the learner's by construction. CPU only (CUDA
    does not survive a fork); fork before this process starts threads or an event loop. Same
    interface as `ServerProcess`.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        name: str = "policy",
        seed: int = 0,
        limits: ServerLimits | None = None,
        token: str | None = None,
        log_path: str | Path | None = None,
    ):
        super().__init__(log_path)
        self.model, self.tokenizer, self.name, self.seed = model, tokenizer, name, seed
        self.limits, self.token = limits or ServerLimits(), token

    def start(self) -> ForkedServer:
        """Fork the child (returns at once; `wait` blocks until it serves)."""
        import multiprocessing

        if str(getattr(self.model, "device", "cpu")) != "cpu":
            raise GemkitError("a forked server needs a CPU model; use ServerProcess for CUDA")
        ctx = multiprocessing.get_context("fork")
        self.proc = ctx.Process(target=self._serve, name="gemkit-model-server", daemon=True)
        self.proc.start()
        return self

    def _serve(self) -> None:  # in the child
        import os
        import sys

        from gemkit.serving import run_app
        from gemkit.vector.aio import new_event_loop

        _die_with_parent()
        log = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        torch.set_num_threads(1)
        engine = ModelEngine(self.model, self.tokenizer, name=self.name, seed=self.seed)
        server = ModelServer(engine, limits=self.limits, token=self.token)

        def started() -> None:
            os.write(1, f"serving {self.name} on {self.url} (forked, weight_version 0)\n".encode())
            self._ready.write_text(self.url)

        run_app(server.app(), "127.0.0.1", self.port, token=server.token, on_start=started,
                loop=new_event_loop())  # fmt: skip
        sys.exit(0)

    def exit_code(self) -> int | None:
        """The child's exit status, or None while it runs."""
        return None if self.proc.is_alive() else self.proc.exitcode

    def _terminate(self) -> None:
        self.proc.terminate()
        self.proc.join(30)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(30)
