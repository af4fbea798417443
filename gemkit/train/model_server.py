"""`gemkit serve model PATH`: a small OpenAI-protocol model server with token ids, log-probs
and versioned weight updates, for CPU runs and tests (vLLM or SGLang on a GPU machine).

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
import hashlib
import json
import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from aiohttp import web

from gemkit.errors import GemkitError
from gemkit.llm.sampling import SamplingParams
from gemkit.serving import (
    BODY_TIMEOUT,
    RequestError,
    middlewares,
    openai_error,
    preview,
    read_body,
    read_json_object,
    resolve_token,
)
from gemkit.train.protocol import Sample, Sampling, Shaper, TextDeltas, parse_sampling, sse
from gemkit.train.sequences import processed_logits

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


# -- generation ------------------------------------------------------------------------------


#: what `sample_batch` tells `on_step` after each step: the step, then per row still running
#: `(row, token, logprob, top)` (`top` the step's `(id, logprob)` alternatives, or [])
StepReport = Callable[[int, list[tuple[int, int, float, list[tuple[int, float]]]]], None]


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
    generators: Sequence[torch.Generator | None] | None = None,
    top: int = 0,
    on_step: StepReport | None = None,
) -> list[Sample]:
    """Sample a completion of each prompt with a KV cache; one `Sample` per row.

    Rows are left-padded with positions counted from each row's first real token (as the
    trainer's right-padded rows count them); a row ends at its EOS (kept) or its
    `max_tokens`. The distribution is `sampling` (or plain `temperature`); temperature 0
    decodes greedily and reports log-probs at temperature 1. `generators[i]` draws row `i`'s samples (rows that share one draw from it in order; None:
    `generator`), so a seeded request gets the same tokens whatever else is in the batch.
    `top` asks for the most likely `top` tokens of each step, under the same distribution.
    `on_step` hears each step's tokens as they are sampled (for streaming).
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
    draws = _draw_groups(generators, generator, len(prompts), device)
    out = model(input_ids=ids, attention_mask=attn, position_ids=positions, use_cache=True)
    limit = torch.tensor(list(max_tokens), device=device)
    done = torch.zeros(len(prompts), dtype=torch.bool, device=device)
    tokens: list[torch.Tensor] = []
    logps: list[torch.Tensor] = []
    tops: list[tuple[torch.Tensor, torch.Tensor]] = []
    next_pos = positions[:, -1:] + 1
    for step in range(int(limit.max())):
        logits = out.logits[:, -1, :].float()
        if sampling.temperature > 0:
            logp = torch.log_softmax(processed_logits(logits, sampling), dim=-1)
            tok = _draw(logp.exp(), draws)
        else:
            logp = torch.log_softmax(logits, dim=-1)
            tok = logp.argmax(-1)
        tok = torch.where(done, torch.full_like(tok, pad_id), tok)
        tokens.append(tok)
        logps.append(logp.gather(-1, tok.unsqueeze(-1)).squeeze(-1))
        if top:
            values, which = logp.topk(min(top, logp.shape[-1]), dim=-1)
            values = values.clamp(min=-9999.0)  # a cut token: vLLM's -9999, not -inf
            tops.append((which, values))
        if on_step is not None:
            _report(on_step, step, done, tok, logps[-1], tops[-1] if top else None)
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
    if top:
        which = torch.stack([w for w, _ in tops], dim=1).tolist()
        values = torch.stack([v for _, v in tops], dim=1).tolist()
    results = []
    for r, (row, lps, cap) in enumerate(zip(sampled, logprobs, max_tokens, strict=True)):
        end = min(cap, len(row))
        if eos_id in row[:end]:
            end = row.index(eos_id) + 1
        alts = (
            [list(zip(which[r][k], values[r][k], strict=True)) for k in range(end)] if top else []
        )
        results.append(Sample(row[:end], lps[:end], alts))
    return results


def _draw_groups(
    generators: Sequence[torch.Generator | None] | None,
    default: torch.Generator | None,
    rows: int,
    device: Any,
) -> list[tuple[torch.Tensor, torch.Generator | None]]:
    """The rows that draw from each generator, in order of first use."""
    if generators is None:
        return [(torch.arange(rows, device=device), default)]
    groups: dict[int, tuple[list[int], torch.Generator | None]] = {}
    for i, g in enumerate(generators):
        g = g if g is not None else default
        groups.setdefault(id(g), ([], g))[0].append(i)
    return [(torch.tensor(idx, device=device), g) for idx, g in groups.values()]


def _draw(probs: torch.Tensor, draws: list[tuple[torch.Tensor, torch.Generator | None]]) -> Any:
    if len(draws) == 1:
        return torch.multinomial(probs, 1, generator=draws[0][1]).squeeze(-1)
    tok = torch.empty(probs.shape[0], dtype=torch.long, device=probs.device)
    for idx, g in draws:
        tok[idx] = torch.multinomial(probs[idx], 1, generator=g).squeeze(-1)
    return tok


def _report(
    on_step: StepReport,
    step: int,
    done: torch.Tensor,
    tok: torch.Tensor,
    logp: torch.Tensor,
    top: tuple[torch.Tensor, torch.Tensor] | None,
) -> None:
    live = (~done).tolist()
    toks, lps = tok.tolist(), logp.tolist()
    which, values = (top[0].tolist(), top[1].tolist()) if top is not None else (None, None)
    rows = []
    for r, running in enumerate(live):
        if running:
            alts = list(zip(which[r], values[r], strict=True)) if which is not None else []
            rows.append((r, toks[r], lps[r], alts))
    on_step(step, rows)


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
    """A causal LM, its tokenizer and its weight version; all calls on one worker thread.

    `names` are the model names requests may ask for (`name` first; `/v1/models` lists them).
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        name: str,
        seed: int = 0,
        version: int = 0,
        names: Sequence[str] = (),
    ):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.name = name
        self.names = list(dict.fromkeys([name, *names]))
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
        self,
        prompts: list[list[int]],
        max_tokens: list[int],
        sampling: SamplingParams | float,
        *,
        generators: Sequence[torch.Generator | None] | None = None,
        top: int = 0,
        on_step: StepReport | None = None,
    ) -> tuple[int, list[Sample]]:
        """`(version, samples)`: one batch, all by one version (see `sample_batch`);
        `sampling` is the distribution, or a plain temperature."""
        rows = sample_batch(
            self.model,
            prompts,
            max_tokens,
            sampling=_params(sampling),
            eos_id=self.eos_id,
            pad_id=self.pad_id,
            generator=self.generator,
            cache_arg=self.cache_arg,
            generators=generators,
            top=top,
            on_step=on_step,
        )
        return self.version, rows

    def seeded(self, seed: int) -> torch.Generator:
        """A generator of its own for a request's `seed`."""
        return torch.Generator(device=self.model.device).manual_seed(seed)

    def check_version(self, version: int) -> None:
        """Raise `RequestError(409)` unless `version` is the next one (see `load`)."""
        if version != self.version + 1:
            raise RequestError(
                409,
                f"weight_version must be the next version, {self.version + 1} (the server "
                f"holds {self.version}), got {version}; leave it out to take the next one",
            )

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

    def load(self, state: dict[str, torch.Tensor], version: int | None = None) -> int:
        """Swap in checked weights as `version`: the next version (`None`: take it).

        Versions go up by one per update and never jump: no update can set a version that
        its trainer's next update would collide with, so no single request (a stray client,
        a typo) leaves the server refusing its trainer from then on. The operator sets the
        first version when starting the server (`--weight-version`).
        """
        version = self.version + 1 if version is None else version
        self.check_version(version)
        self.check_state(state)
        full = {**state, **{alias: state[source] for alias, source in self._aliases.items()}}
        self.model.load_state_dict(full, strict=True)
        self.version = version
        return version


def vocab_hash(tokenizer: Any) -> str:
    """A short hash of the tokenizer's vocabulary: client and server must share one."""
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1])
    return hashlib.sha256(json.dumps(vocab).encode()).hexdigest()[:16]


def _params(sampling: SamplingParams | float) -> SamplingParams:
    """A distribution from parameters or a plain temperature."""
    if isinstance(sampling, SamplingParams):
        return sampling
    return SamplingParams(temperature=float(sampling))


# -- the server ------------------------------------------------------------------------------


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


class ModelServer:
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
                    loop.call_soon_threadsafe(jobs[j].on_step, (version, items))

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

    def _version_of(self, value: Any) -> int | None:
        if value is None:
            return None
        try:
            version = int(value)
        except (TypeError, ValueError):
            raise RequestError(
                400, f"weight_version must be an integer, got {preview(value)}"
            ) from None
        self.engine.check_version(version)  # early, before a body is read; `load` rechecks
        return version

    async def _apply(self, state: dict[str, torch.Tensor], version: int | None) -> web.Response:
        def load() -> int:
            return self.engine.load(state, version)

        loaded = await self._run(load)
        return web.json_response({"success": True, "weight_version": str(loaded)})

    @contextlib.contextmanager
    def _upload_slot(self) -> Any:
        """One of `max_uploads` slots for a weight upload, or a 429 when all are taken."""
        if self._uploads >= self.limits.max_uploads:
            raise RequestError(
                429,
                f"{self._uploads} weight uploads are already being received (the server's "
                f"cap); send one update at a time",
            )
        self._uploads += 1
        try:
            yield
        finally:
            self._uploads -= 1

    async def _update_weights(self, request: web.Request) -> web.Response:
        from safetensors import SafetensorError
        from safetensors.torch import load as load_bytes

        version = self._version_of(request.query.get("weight_version"))
        with self._upload_slot():
            raw = await read_body(
                request,
                max_body=self.max_upload,
                limit_flag="model: twice its size is the limit of a weight upload",
                timeout=self.limits.upload_timeout_s,
            )
            try:
                state = load_bytes(raw)
            except (SafetensorError, ValueError, RuntimeError):
                raise RequestError(
                    400,
                    "the body is not a safetensors file; send safetensors.torch.save(state_dict)",
                ) from None
            del raw
            return await self._apply(state, version)

    async def _update_from_disk(self, request: web.Request) -> web.Response:
        from safetensors.torch import load_file

        body = await self._json(request, '{"model_path": "DIR", "weight_version": n}')
        unknown = sorted(set(body) - {"model_path", "weight_version"})
        if unknown:
            raise RequestError(
                400, f"unknown field {preview(unknown[0], 40)}; send model_path and weight_version"
            )
        path = body.get("model_path")
        if not isinstance(path, str) or not path:
            raise RequestError(400, "'model_path' must be a folder with model.safetensors")
        version = self._version_of(body.get("weight_version"))
        folder = Path(path)
        files = sorted(folder.glob("*.safetensors")) if folder.is_dir() else []
        if not files:
            raise RequestError(400, f"no *.safetensors files in {preview(path)}")
        size = sum(f.stat().st_size for f in files)
        if size > self.max_upload:
            raise RequestError(
                413,
                f"the weights in {preview(path)} are {size:,} bytes, over twice the model's size",
            )

        def read() -> dict[str, torch.Tensor]:  # off the event loop: files may be large
            state: dict[str, torch.Tensor] = {}
            for f in files:
                state.update(load_file(str(f)))
            for alias in self.engine._aliases:
                state.pop(alias, None)  # a tied tensor saved twice (save_pretrained keeps one)
            return state

        try:
            state = await self._run(read)
        except Exception:  # noqa: BLE001 - a file that is not safetensors, or unreadable
            raise RequestError(
                400, f"the *.safetensors files in {preview(path)} cannot be read as safetensors"
            ) from None
        return await self._apply(state, version)

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
    names: Sequence[str] = (),
    version: int = 0,
) -> ModelEngine:
    """A `ModelEngine` over a local model folder, or over `--tiny ENV`'s tiny random model.

    Requests may name the model by `names` (vLLM's `--served-model-name`; the folder, or
    `tiny:ENV`, when none are given); its weights start as `version`.
    """
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
    if version < 0:
        raise GemkitError(f"--weight-version must be 0 or more, got {version}")
    default = f"tiny:{tiny}" if tiny else str(path)
    names = list(names) or [default]
    return ModelEngine(
        model.to(device), tokenizer, name=names[0], names=names, seed=seed, version=version
    )


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
