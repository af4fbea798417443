"""`gemkit serve model PATH`: a small OpenAI-protocol model server with token ids, log-probs
and versioned weight updates, for CPU runs and tests (vLLM or SGLang on a GPU machine).

This file is the HTTP server and its request batching; the sampling is `engine.py`'s
(`ModelEngine`), the weight-update endpoints `weight_updates.py`'s, and running a server in a
child process `server_process.py`'s.

Endpoints (JSON bodies sent as `application/json`; every error a one-line 4xx in OpenAI's
shape, `{"error": {"message", "type", "param", "code"}}`):

| request | answers |
|---|---|
| `POST /v1/completions` | `prompt` (token ids or text), `max_tokens`, `temperature`, `n`, `seed`, `logprobs` (how many top log-probs), `stream`; vLLM's shape with `token_ids`, `prompt_token_ids`, `logprobs.token_logprobs` (and `"token_id:N"` tokens under `return_tokens_as_token_ids`) |
| `POST /v1/chat/completions` | `messages` rendered by the tokenizer's chat template (plain lines without one), `logprobs`, `top_logprobs`, `seed`, `stream`; vLLM's token fields when asked |
| `POST /update_weights?weight_version=N` | a safetensors body (`application/octet-stream`) with every tensor of the model: new weights, version `N` |
| `POST /update_weights_from_disk` | `{"model_path", "weight_version"}` (SGLang's name): the same from a local folder |
| `GET /health`, `GET /get_model_info`, `GET /v1/models` | model names, `weight_version`, vocabulary size and hash |

Which request fields are honoured, and the shapes of answers and stream chunks, are
`gemkit.train.protocol`'s: a field it does not honour is a 400 naming it, and a model name it
does not serve is a 404.

Sampling is at `temperature` with `top_k`, `top_p` and `min_p` applied as vLLM applies them
(full distribution by default; penalties are refused), and each log-prob is the sampled
token's under that distribution (vLLM's `--logprobs-mode processed_logprobs`): what the
trainer's `gemkit.train.sequences.token_logprobs` computes under the same parameters for the
same weights, so importance ratios are exact. Concurrent requests are batched (up to `max_batch` rows per forward pass; one
request's rows never split across two). Generation and weight updates run one at a time on
one worker thread, so a request is sampled wholly by one version of the weights, and each
answer says which (`weight_version`). Versions go up by exactly one per update
(`ModelEngine.load`), uploads are bounded in time, size and number (`ServerLimits`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from gemkit.llm.sampling import SamplingParams
from gemkit.serving import (
    BODY_TIMEOUT,
    RequestError,
    middlewares,
    openai_error,
    read_json_object,
    resolve_token,
)
from gemkit.train.engine import ModelEngine, _params
from gemkit.train.protocol import Sample, Sampling, Shaper, TextDeltas, parse_sampling, sse
from gemkit.train.weight_updates import WeightUpdates

log = logging.getLogger(__name__)

ENDPOINTS = (
    "POST /v1/completions, POST /v1/chat/completions, POST /update_weights, "
    "POST /update_weights_from_disk, GET /health, GET /get_model_info, GET /v1/models"
)
#: the Content-Type of a weight upload (a safetensors file); never one a web page may send
#: without asking the server first
WEIGHTS = "application/octet-stream"


@dataclass
class ServerLimits:
    """What one request may ask for; past these it gets a 4xx saying which limit.

    A JSON body must arrive within `body_timeout_s`; a weight upload (at most twice the
    model's size) within `upload_timeout_s`, and at most `max_uploads` are received at once.
    """

    max_tokens: int = 256
    max_n: int = 16
    max_batch: int = 64
    max_body: int = 4 * 1024 * 1024
    max_temperature: float = 10.0
    batch_wait_s: float = 0.003
    body_timeout_s: float = BODY_TIMEOUT
    upload_timeout_s: float = 120.0
    max_uploads: int = 2


@dataclass
class _Job:
    """One request's rows, sampled together in one forward pass (never split across two)."""

    prompts: list[list[int]]
    max_tokens: int
    sampling: SamplingParams
    seed: int | None
    top: int
    future: asyncio.Future
    #: per step, the version sampling, and `(row of this job, token, logprob, top)` of each
    #: of its rows still running (for streams)
    on_step: Callable[[tuple[int, list[tuple[int, int, float, list]]]], None] | None


class ModelServer(WeightUpdates):
    """The aiohttp app over a `ModelEngine`, with request batching and limits."""

    def __init__(
        self, engine: ModelEngine, *, limits: ServerLimits | None = None, token: str | None = None
    ):
        self.engine = engine
        self.limits = limits or ServerLimits()
        self.token = resolve_token(token)  # None: $GEMKIT_SERVE_TOKEN, as the other servers
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gemkit-model")
        self._queue: asyncio.Queue[_Job] | None = None
        self._held: _Job | None = None  # a job that did not fit the last batch
        self._worker: asyncio.Task | None = None
        self._uploads = 0
        self.batches = 0
        self.rows = 0
        self.busy_s = 0.0
        size = sum(t.numel() * t.element_size() for t in engine.model.state_dict().values())
        #: a weight upload may be the model's size plus the safetensors header (or twice it,
        #: for fp32 weights of a bf16 model)
        self.max_upload = max(size * 2, 1 << 20)

    def app(self) -> web.Application:
        """The aiohttp application (its batching worker starts with it)."""
        app = web.Application(
            client_max_size=max(self.max_upload, self.limits.max_body),
            middlewares=middlewares(
                ENDPOINTS, self.token, bodies={"/update_weights": (WEIGHTS,)}, render=openai_error
            ),
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
        self,
        prompts: list[list[int]],
        max_tokens: int,
        sampling: SamplingParams | float,
        *,
        seed: int | None = None,
        top: int = 0,
        on_step: Callable[[tuple[int, list[tuple[int, int, float, list]]]], None] | None = None,
    ) -> tuple[int, list[Sample]]:
        """Queue one request's rows for the next batch; `(version, samples)` once sampled.

        The rows of one request always share a forward pass, so one version of the weights
        samples all of them. `on_step` (on the event loop) hears each step's tokens.
        """
        assert self._queue is not None, "the app is not started"
        future = asyncio.get_running_loop().create_future()
        job = _Job(prompts, max_tokens, _params(sampling), seed, top, future, on_step)
        self._queue.put_nowait(job)
        return await future

    async def _batches(self) -> None:
        assert self._queue is not None
        while True:
            first, self._held = self._held or await self._queue.get(), None
            jobs, rows = [first], len(first.prompts)
            if self.limits.batch_wait_s > 0 and rows < self.limits.max_batch:
                # a forward pass costs about the same for 1 row as for 30 on a small model:
                # waiting briefly for the requests on their way makes each pass serve more
                await asyncio.sleep(self.limits.batch_wait_s)
            while not self._queue.empty():
                job = self._queue.get_nowait()
                if rows + len(job.prompts) > self.limits.max_batch:
                    self._held = job  # the next batch starts with it
                    break
                jobs.append(job)
                rows += len(job.prompts)
            by_sampling: dict[SamplingParams, list[_Job]] = {}
            for job in jobs:
                by_sampling.setdefault(job.sampling, []).append(job)
            for sampling, group in by_sampling.items():
                live = [j for j in group if not j.future.cancelled()]
                if live:
                    await self._sample(live, sampling)

    async def _sample(self, jobs: list[_Job], sampling: SamplingParams) -> None:
        loop = asyncio.get_running_loop()
        prompts, caps, gens, owner = [], [], [], []
        for j, job in enumerate(jobs):
            gen = self.engine.seeded(job.seed) if job.seed is not None else None
            for k, p in enumerate(job.prompts):
                prompts.append(p)
                caps.append(job.max_tokens)
                gens.append(gen)
                owner.append((j, k))
        on_step = None
        if any(job.on_step for job in jobs):

            def on_step(step: int, rows: list) -> None:  # on the worker thread, mid-batch
                version = self.engine.version
                per_job: dict[int, list] = {}
                for r, tok, lp, top in rows:
                    j, k = owner[r]
                    if jobs[j].on_step is not None:
                        per_job.setdefault(j, []).append((k, tok, lp, top[: jobs[j].top]))
                for j, items in per_job.items():
                    hear = jobs[j].on_step
                    if hear is not None:  # only jobs with a listener have rows here
                        loop.call_soon_threadsafe(hear, (version, items))

        def run() -> tuple[int, list[Sample]]:
            return self.engine.generate(
                prompts,
                caps,
                sampling,
                generators=gens if any(g is not None for g in gens) else None,
                top=max(job.top for job in jobs),
                on_step=on_step,
            )

        start = time.perf_counter()
        try:
            version, samples = await self._run(run)
        except Exception as e:  # noqa: BLE001 - fail these requests, keep serving
            log.exception("generation failed")
            for job in jobs:
                if not job.future.done():
                    job.future.set_exception(e)
            return
        self.busy_s += time.perf_counter() - start
        self.batches += 1
        self.rows += len(prompts)
        at = 0
        for job in jobs:
            mine = samples[at : at + len(job.prompts)]
            at += len(job.prompts)
            for x in mine:
                x.top = [alts[: job.top] for alts in x.top]
            if not job.future.done():
                job.future.set_result((version, mine))

    # -- handlers -----------------------------------------------------------------------------

    async def _json(self, request: web.Request, shape: str) -> dict[str, Any]:
        # the app's client_max_size is the weight upload's; a JSON body stops at max_body
        return await read_json_object(
            request,
            shape=shape,
            max_body=self.limits.max_body,
            limit_flag="--max-body-kb",
            timeout=self.limits.body_timeout_s,
        )

    def _sampling(self, body: dict[str, Any], kind: str) -> Sampling:
        return parse_sampling(
            body,
            kind,
            served=self.engine.names,
            max_tokens=self.limits.max_tokens,
            max_n=self.limits.max_n,
            max_temperature=self.limits.max_temperature,
        )

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

    def _shaper(self, sampling: Sampling, version: int) -> Shaper:
        return Shaper(sampling, self.engine.tokenizer.decode, self.engine.eos_id, version)

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        body = await self._json(request, '{"prompt": [ids] or "text", "max_tokens": n}')
        sampling = self._sampling(body, "completions")
        if "prompt" not in body:
            raise RequestError(400, "the body needs 'prompt': a list of token ids or a string")
        prompts = self._prompts(body["prompt"], sampling.max_tokens, sampling.n)
        # vLLM's order: the n choices of the first prompt, then of the second, ...
        rows_for = [p for p in prompts for _ in range(sampling.n)]
        if sampling.stream:
            return await self._stream(request, sampling, rows_for)
        version, samples = await self._generate(sampling, rows_for)
        return web.json_response(self._shaper(sampling, version).completion_body(rows_for, samples))

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

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await self._json(request, '{"messages": [...], "max_tokens": n}')
        sampling = self._sampling(body, "chat")
        self._check_rows(1, sampling.n)
        prompt = self._chat_prompt(body.get("messages"), sampling.max_tokens)
        rows = [prompt] * sampling.n
        if sampling.stream:
            return await self._stream(request, sampling, rows)
        version, samples = await self._generate(sampling, rows)
        return web.json_response(self._shaper(sampling, version).chat_body(prompt, samples))

    async def _generate(
        self, sampling: Sampling, rows: list[list[int]], on_step: Any = None
    ) -> tuple[int, list[Sample]]:
        return await self.generate(
            rows,
            sampling.max_tokens,
            sampling.params,
            seed=sampling.seed,
            top=sampling.top if sampling.logprobs else 0,
            on_step=on_step,
        )

    async def _stream(
        self, request: web.Request, sampling: Sampling, rows: list[list[int]]
    ) -> web.StreamResponse:
        """Answer with server-sent events, one chunk per token per choice, as vLLM does."""
        steps: asyncio.Queue = asyncio.Queue()
        task = asyncio.ensure_future(self._generate(sampling, rows, steps.put_nowait))

        def finished(done: asyncio.Future) -> None:  # runs after every step's report
            if not done.cancelled():
                done.exception()  # read here too: a client that left never reads it
            steps.put_nowait(None)

        task.add_done_callback(finished)
        resp = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream; charset=utf-8",
                "Cache-Control": "no-cache",
            }
        )
        shaper = self._shaper(sampling, 0)
        decode = self.engine.tokenizer.decode
        texts = [TextDeltas(decode) for _ in rows]
        counts = [0] * len(rows)
        offsets = [0] * len(rows)
        try:
            await resp.prepare(request)
            report = await steps.get()  # the version is known once the batch has started
            if report is not None:
                shaper.version = str(report[0])
            if sampling.kind == "chat":
                for i in range(len(rows)):
                    await resp.write(sse(shaper.role_chunk(i, rows[i])))
            while report is not None:
                for i, tok, lp, top in report[1]:
                    counts[i] += 1
                    last = tok == self.engine.eos_id or counts[i] >= sampling.max_tokens
                    piece = texts[i].push(tok, last)
                    chunk = shaper.token_chunk(
                        i,
                        piece,
                        (tok, lp, top),
                        shaper.finish(texts[i].ids, last),
                        prompt=rows[i] if counts[i] == 1 else None,
                        offset=offsets[i],
                    )
                    offsets[i] += len(shaper.token(tok))
                    await resp.write(sse(chunk))
                report = await steps.get()
            _, samples = task.result()
            if sampling.include_usage:
                prompt_tokens = sum(len(p) for p in rows[:: max(1, sampling.n)])
                await resp.write(sse(shaper.usage_chunk(prompt_tokens, samples)))
        except ConnectionError:  # the client left; its rows finish in their batch unread
            return resp
        except Exception:  # noqa: BLE001 - the stream has begun: say so in it, then end it
            log.exception("streamed generation failed")
            error = {"message": "internal server error; the server log has the details"}
            with contextlib.suppress(ConnectionError):
                await resp.write(
                    sse({"error": {**error, "type": "InternalServerError", "code": 500}})
                )
        with contextlib.suppress(ConnectionError):
            await resp.write(sse("[DONE]"))
            await resp.write_eof()
        return resp

    async def _health(self, _: web.Request) -> web.Response:
        return web.json_response(
            {
                "model": self.engine.name,
                "model_path": self.engine.name,
                "served_model_names": self.engine.names,
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
                "id": name,
                "object": "model",
                "owned_by": "gemkit",
                "root": self.engine.name,
                "max_model_len": self.engine.max_positions,
            }
            for name in self.engine.names
        ]
        return web.json_response({"object": "list", "data": data})
