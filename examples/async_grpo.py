"""Fully asynchronous GRPO for multi-turn LLM agents, in one file (ASearcher-style).

Rollout and training are decoupled. `--in-flight` episodes run against a model server at all
times, each on its own (`gemkit.llm.TokenPolicy`: token-id prompts, the server's sampled ids,
log-probs and policy version recorded per turn); a group of `--group-size` episodes from one
start state (one seed) is ready when its last episode ends. The learner steps as soon as
`--num-groups` informative groups are ready, then sends the new weights to the server, which
swaps them in between requests; episodes still running continue on the new weights, so one
episode may span versions, and every token remembers which version sampled it.

What the learner does with a ready group (`gemkit.train.offpolicy`):

- all rewards equal (no GRPO signal): **filtered** (`--no-filter-equal` keeps them);
- oldest token more than `--max-staleness` versions behind: **dropped**;
- otherwise **importance-corrected**: each model token's gradient is weighted by
  `min(pi_theta / pi_behaviour, --is-cap)`, the behaviour log-prob being the server's.

Advantages are GRPO's (`gemkit.rl.grpo_advantages` over the episodes' returns), one per
episode, on its model tokens only (the loss mask is the token sequence's model mask; env and
tool tokens never enter it).

    python examples/async_grpo.py --tiny --env toy:Copy-v0 --steps 60
    python examples/async_grpo.py --model ./Qwen3-0.6B --env game:GuessTheNumber-v0-easy
    python examples/async_grpo.py --model ./Qwen3-0.6B --server http://gpu:8000/v1 \
        --weight-sync vllm --env game:GuessTheNumber-v0-easy
    python examples/async_grpo.py --model ./Qwen3-0.6B --server http://gpu:30000 \
        --protocol sglang --weight-sync sglang-disk --env game:GuessTheNumber-v0-easy

Without `--server` the script starts `gemkit serve model` (the same model, on this machine)
and stops it at the end. `--model` is a local Hugging Face folder (nothing is downloaded),
loaded with fp32 master weights whatever its checkpoint's dtype (a bfloat16 weight rounds
most small updates away); `--tiny` builds a small random model and a word-level tokenizer
from the env's own text.

The behaviour log-prob of each token is the server's, under the sampling parameters the turn
recorded (`--temperature`, `--top-p`, `--top-k`, `--min-p`, named in full on every request so
no server default applies); the learner recomputes under the same ones. A vLLM server must
report the log-probs of that distribution (`--logprobs-mode processed_logprobs`) unless
sampling is plain (temperature 1, nothing cut): the script asks the server at start and
refuses a run whose ratios would compare two distributions.

`--weight-sync vllm` needs vLLM's development endpoints (`VLLM_SERVER_DEV_MODE=1`): after
each step the weights are saved under `OUT/weights/vN` and the server drains the requests in
flight (`/pause?mode=wait`, which also clears its prefix cache), reloads them in place
(`/collective_rpc` `reload_weights`), labels them (`/update_weight_version`) and resumes.
After every sync the server's log-probs of a probe sequence are compared with the learner's
(`sync_gap` in the metrics).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import aiohttp
import numpy as np
import torch
from rich.console import Console
from rich.progress import Progress

import gemkit
from gemkit.errors import GemkitError
from gemkit.llm import LLMClient, TokenBatcher, TokenPolicy
from gemkit.llm.sampling import SamplingError, SamplingParams, trainable
from gemkit.llm.token_policy import logprobs_kind
from gemkit.rl import batch_returns, grpo_advantages
from gemkit.rollout import Episode, run_episode
from gemkit.serving import auth_headers, resolve_token
from gemkit.train.args import parse_args
from gemkit.train.engine import vocab_hash
from gemkit.train.model_server import ServerLimits
from gemkit.train.offpolicy import (
    KEPT,
    STALE,
    Row,
    admit,
    corrected_loss,
    pack_rows,
    staleness,
)
from gemkit.train.sequences import token_logprobs
from gemkit.train.server_process import ForkedServer, ServerProcess
from gemkit.train.tiny import load_policy, tiny_policy
from gemkit.train.update import save
from gemkit.train.weight_updates import state_bytes
from gemkit.trajectory import TrajectoryError, episode_sequence
from gemkit.vector.aio import new_event_loop

START = time.perf_counter()


@dataclass
class Args:
    """Fully asynchronous GRPO: episodes always in flight, a step whenever a batch is ready."""

    env: str = field(default="game:GuessTheNumber-v0-easy", metadata={"help": "gemkit env id"})
    model: str | None = field(default=None, metadata={"help": "local Hugging Face model folder"})
    tiny: bool = field(default=False, metadata={"help": "build a tiny random model locally"})
    server: str | None = field(
        default=None, metadata={"help": "base URL of a running server (default: start one)"}
    )
    served_model: str | None = field(
        default=None, metadata={"help": "model name to ask the server for (default: its first)"}
    )
    protocol: str = field(
        default="completions", metadata={"help": "'completions' (vLLM, gemkit) or 'sglang'"}
    )
    weight_sync: str = field(
        default="gemkit",
        metadata={"help": "'gemkit' (POST /update_weights), 'vllm', 'sglang-disk', or 'none'"},
    )
    token: str | None = field(default=None, metadata={"help": "the server's bearer token"})
    steps: int = field(default=60, metadata={"help": "learner steps"})
    num_groups: int = field(default=8, metadata={"help": "informative groups per step"})
    group_size: int = field(default=4, metadata={"help": "episodes per start state (G)"})
    in_flight: int = field(default=64, metadata={"help": "episodes running at all times"})
    max_staleness: int = field(default=4, metadata={"help": "drop groups older than this"})
    is_cap: float = field(default=2.0, metadata={"help": "truncation of importance weights"})
    filter_equal: bool = field(
        default=True, metadata={"help": "skip groups whose rewards are all equal"}
    )
    scale: str = field(default="std", metadata={"help": "'std' (GRPO) or 'none' (Dr. GRPO)"})
    gamma: float = field(default=1.0, metadata={"help": "discount of an episode's return"})
    lr: float | None = field(
        default=None, metadata={"help": "learning rate (tiny 3e-3, else 1e-6)"}
    )
    minibatch_size: int = field(default=64, metadata={"help": "sequences per gradient step"})
    max_new_tokens: int | None = field(default=None, metadata={"help": "tiny 4, else 256"})
    max_turns: int = field(default=50, metadata={"help": "cap on turns per episode"})
    temperature: float = field(default=1.0, metadata={"help": "sampling temperature"})
    top_p: float = field(default=1.0, metadata={"help": "nucleus sampling mass (1: off)"})
    top_k: int = field(default=-1, metadata={"help": "sample among the k likeliest (-1: off)"})
    min_p: float = field(default=0.0, metadata={"help": "drop tokens below min_p x the top's"})
    max_grad_norm: float = field(default=1.0, metadata={"help": "gradient clipping"})
    gradient_checkpointing: bool = field(
        default=False,
        metadata={"help": "recompute activations in the backward pass (less memory, more time)"},
    )
    freeze_embeddings: bool = field(
        default=False,
        metadata={"help": "train without the vocabulary matrices (input and output embeddings)"},
    )
    seed: int = field(default=0, metadata={"help": "seed for torch, the model and the envs"})
    threads: int = field(
        default=0, metadata={"help": "torch CPU threads (0: 1 with --tiny, else torch's default)"}
    )
    out: str = field(default="runs/async_grpo", metadata={"help": "checkpoints, metrics.jsonl"})
    device: str | None = field(
        default=None, metadata={"help": "cuda or cpu (default: cuda if any)"}
    )
    progress: bool = field(default=True, metadata={"help": "show a progress bar"})


@dataclass
class Group:
    """The G episodes of one start state, filled as they finish."""

    seed: int
    episodes: list[Episode] = field(default_factory=list)


def check(args: Args) -> SamplingParams:
    """Refuse flag combinations that cannot work, with a one-line message; the sampling."""
    if args.tiny == (args.model is not None):
        raise SystemExit("pass exactly one of --tiny or --model PATH (a local model folder)")
    if args.scale not in ("std", "none"):
        raise SystemExit(f"--scale must be 'std' (GRPO) or 'none' (Dr. GRPO), got {args.scale!r}")
    if args.group_size < 2:
        raise SystemExit(
            f"--group-size must be >= 2 (a group of 1 has no baseline), got {args.group_size}"
        )
    if args.protocol not in ("completions", "sglang"):
        raise SystemExit(f"--protocol must be 'completions' or 'sglang', got {args.protocol!r}")
    if args.weight_sync not in ("gemkit", "vllm", "sglang-disk", "none"):
        raise SystemExit(
            f"--weight-sync must be gemkit, vllm, sglang-disk or none, got {args.weight_sync!r}"
        )
    if args.weight_sync == "vllm" and not args.server:
        raise SystemExit("--weight-sync vllm needs --server, the URL of a running vLLM")
    if args.max_staleness < 0 or args.is_cap <= 0 or args.in_flight < 1:
        raise SystemExit("--max-staleness must be >= 0, --is-cap > 0 and --in-flight >= 1")
    try:
        sampling = trainable(sampling_of(args).to_dict(), "this run")
    except SamplingError as e:
        raise SystemExit(f"error: {e}") from None
    return sampling


def sampling_of(args: Args) -> SamplingParams:
    """The sampling distribution the flags name (a one-line error when out of range)."""
    try:
        return SamplingParams(
            temperature=args.temperature, top_p=args.top_p, top_k=args.top_k, min_p=args.min_p
        )
    except SamplingError as e:
        raise SystemExit(f"error: {e}") from None


# -- the model server --------------------------------------------------------------------------


def start_server(args: Args, model, tokenizer) -> ServerProcess | ForkedServer | None:
    """The model server on the learner's model (None with --server): a fork of this process
    for a CPU model (same weights, nothing to load twice), else `gemkit serve model`."""
    if args.server:
        return None
    log = Path(args.out) / "server.log"
    if model.device.type == "cpu":
        # the server's cap on max_tokens must admit every turn's --max-new-tokens
        limits = ServerLimits(max_tokens=max(ServerLimits().max_tokens, args.max_new_tokens))
        return ForkedServer(
            model, tokenizer, seed=args.seed, limits=limits, token=args.token, log_path=log
        ).start()
    flags = ["--tiny", args.env] if args.tiny else [str(args.model)]
    flags += ["--seed", str(args.seed), "--max-tokens", str(args.max_new_tokens)]
    flags += ["--served-model-name", "policy"]  # the name the client asks for
    if args.token:
        flags += ["--token", args.token]
    return ServerProcess(flags, log_path=log).start()


def snapshot(args: Args, model, out: Path, version: int) -> bytes | Path | None:
    """The learner's weights as the server will take them: safetensors bytes, or a folder."""
    if args.weight_sync == "gemkit":
        return state_bytes(model)
    if args.weight_sync in ("sglang-disk", "vllm"):
        path = out / "weights" / f"v{version}"
        model.save_pretrained(path)
        return path
    return None


async def send_weights(
    session: aiohttp.ClientSession,
    args: Args,
    root: str,
    weights: bytes | Path | None,
    version: int,
) -> None:
    """Hand a snapshot to the server as `version` (it swaps them in between requests)."""
    if weights is None:
        return
    if args.weight_sync == "vllm":
        assert isinstance(weights, Path)
        await vllm_reload(session, root, weights, version, auth_headers(args.token))
    elif isinstance(weights, bytes):
        url = f"{root}/update_weights?weight_version={version}"
        await _post(session, url, auth_headers(args.token), data=weights)
    else:
        payload = {"model_path": str(weights.resolve()), "weight_version": str(version)}
        await _post(
            session, f"{root}/update_weights_from_disk", auth_headers(args.token), json=payload
        )
    if isinstance(weights, Path):  # the server holds these now: the older folder can go
        shutil.rmtree(weights.parent / f"v{version - 1}", ignore_errors=True)


async def vllm_reload(
    session: aiohttp.ClientSession, root: str, folder: Path, version: int, headers: dict
) -> None:
    """Swap a folder of weights into a running vLLM in place (its development endpoints).

    The server drains the requests in flight and clears its prefix cache (`/pause?mode=wait`:
    no completion mixes two versions, and no cached prefix of the old weights is reused),
    reloads the weights (`reload_weights`), records the version and resumes; it resumes
    whatever failed.
    """
    await _post(session, f"{root}/pause?mode=wait&clear_cache=true", headers)
    try:
        rpc = {"method": "reload_weights", "kwargs": {"weights_path": str(folder.resolve())}}
        await _post(session, f"{root}/collective_rpc", headers, json=rpc)
        await _post(
            session, f"{root}/update_weight_version", headers, json={"new_version": str(version)}
        )
    finally:
        await _post(session, f"{root}/resume", headers)


async def _post(session: aiohttp.ClientSession, url: str, headers: dict, **kwargs) -> None:
    async with session.post(url, headers=headers, **kwargs) as resp:
        if resp.status == 404 and "/v1" not in url:
            raise GemkitError(
                f"the server has no {url.rsplit('/', 1)[-1].split('?')[0]} endpoint (HTTP 404): "
                "start vLLM with VLLM_SERVER_DEV_MODE=1 for --weight-sync vllm"
            )
        if resp.status != 200:
            raise GemkitError(f"the server refused the weights: {(await resp.text())[:300]}")


async def resolve_server(
    session: aiohttp.ClientSession, server: str, headers: dict
) -> tuple[str, list[str]]:
    """`(base URL ending in /v1, served model names)` of an OpenAI-protocol server.

    A URL given without `/v1` is tried with it; a server that answers neither says so.
    """
    base = server.rstrip("/")
    tried = [base] if base.endswith("/v1") else [base, base + "/v1"]
    for url in tried:
        try:
            async with session.get(f"{url}/models", headers=headers) as resp:
                if resp.status == 404:
                    continue
                if resp.status != 200:
                    raise GemkitError(
                        f"GET {url}/models answered HTTP {resp.status}: {(await resp.text())[:200]}"
                    )
                data = await resp.json(content_type=None)
        except aiohttp.ClientError as e:
            raise GemkitError(f"cannot reach the server at {server}: {e}") from None
        names = [m.get("id") for m in (data or {}).get("data", []) if isinstance(m, dict)]
        if names:
            return url, [n for n in names if isinstance(n, str)]
    raise GemkitError(
        f"no OpenAI-protocol server at {server}: GET /models answered 404 at "
        f"{' and '.join(t + '/models' for t in tried)}; pass its base URL, e.g. "
        "http://host:8000/v1"
    )


async def server_load(session: aiohttp.ClientSession, root: str) -> tuple[float, int, int] | None:
    """`(seconds generating, batches, rows)` so far, from a gemkit server; else None."""
    async with session.get(f"{root}/health") as resp:
        try:
            data = await resp.json(content_type=None)
        except ValueError:
            return None
    if not isinstance(data, dict) or "busy_s" not in data:
        return None
    return float(data["busy_s"]), int(data["batches"]), int(data["rows"])


async def check_tokenizer(
    session: aiohttp.ClientSession, root: str, tokenizer, model_name: str, headers: dict
) -> None:
    """The server must use the learner's vocabulary, or every id would mean another token:
    a gemkit server's vocabulary hash, or a vLLM server's `/tokenize` of a probe text."""
    async with session.get(f"{root}/health", headers=headers) as resp:
        try:
            data = await resp.json(content_type=None)
        except ValueError:
            data = None  # not a gemkit server (vLLM's and SGLang's /health have no body)
    served = data.get("tokenizer_hash") if isinstance(data, dict) else None
    if served:
        if served != vocab_hash(tokenizer):
            raise GemkitError("the server's tokenizer is not the learner's; serve the same model")
        return
    probe = "Guess the number: 17 is too low.\n<tool_call>"
    body = {"model": model_name, "prompt": probe, "add_special_tokens": False}
    async with session.post(f"{root}/tokenize", json=body, headers=headers) as resp:
        if resp.status != 200:
            return  # a server without vLLM's /tokenize
        data = await resp.json(content_type=None)
    ids = list(tokenizer(probe, add_special_tokens=False)["input_ids"])
    if isinstance(data, dict) and data.get("tokens") != ids:
        raise GemkitError(
            "the server tokenizes text differently from the learner's tokenizer; serve the "
            "same model folder as --model"
        )


def probe_ids(args: Args, tokenizer) -> list[int]:
    """A fixed token sequence of the env (its seed-0 prompt) for checking a weight sync."""
    from gemkit.llm.episode_tokens import prompt_ids

    env = gemkit.make(args.env)
    try:
        obs, _ = env.reset(seed=args.seed)
    finally:
        env.close()
    return prompt_ids(tokenizer, obs)[:256]


@torch.no_grad()
def learner_probe(model, ids: list[int]) -> list[float]:
    """The learner's raw log-prob (temperature 1) of each probe token after the first."""
    x = torch.tensor([ids], device=model.device)
    return token_logprobs(model, x, torch.ones_like(x))[0, 1:].tolist()


async def served_probe(client: LLMClient, ids: list[int]) -> list[float] | None:
    """The server's raw log-prob of each probe token after the first (vLLM's
    `prompt_logprobs`), or None when the server does not report them."""
    body = {"model": client.model, "prompt": ids, "max_tokens": 1, "prompt_logprobs": 0}
    try:
        data = await client.post_json("/completions", body)
    except GemkitError:
        return None
    rows = ((data.get("choices") or [{}])[0]).get("prompt_logprobs")
    if not isinstance(rows, list) or len(rows) != len(ids):
        return None
    out = []
    for token, row in zip(ids[1:], rows[1:], strict=True):
        entry = (row or {}).get(str(token)) if isinstance(row, dict) else None
        if not isinstance(entry, dict):
            return None
        out.append(float(entry["logprob"]))
    return out


# -- the learner ------------------------------------------------------------------------------


def rows_of(groups: list[Group], args: Args) -> list[Row]:
    """One row per episode: its token sequence and its GRPO advantage."""
    rewards = [[t.reward for t in ep.turns] for g in groups for ep in g.episodes]
    returns = [float(r[0]) if len(r) else 0.0 for r in batch_returns(rewards, args.gamma)]
    shaped = np.array(returns).reshape(len(groups), args.group_size)
    advantages = grpo_advantages(shaped, scale=args.scale).reshape(-1)
    rows = []
    episodes = [ep for g in groups for ep in g.episodes]
    for ep, adv in zip(episodes, advantages, strict=True):
        seq = episode_sequence(ep)
        # the distribution the tokens were drawn from, as recorded, is what the learner uses
        sampling = trainable(seq.sampling, f"episode {ep.seed}")
        rows.append(
            Row(seq.prompt_ids, seq.response_ids, seq.mask, seq.logprobs, float(adv), sampling)
        )
    return rows


def prepare_learner(model, args: Args) -> None:
    """What the memory flags change: recomputed activations, frozen vocabulary matrices.

    On a CPU a learner step of a 0.5B model holds its fp32 weights (2 GB), their gradients (2
    GB), AdamW's two moments (4 GB) and the activations (about 3 GB for 1,000 tokens).
    Checkpointing keeps only each layer's input; freezing the embeddings drops their share of
    the gradients and moments (for Qwen2.5-0.5B, whose two vocabulary matrices are 55% of its
    parameters, 3.3 GB). Neither changes a log-prob: the server's weights stay the learner's.
    """
    if args.gradient_checkpointing:
        kwargs = {"use_reentrant": False}
        if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5.2's name
            model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    if args.freeze_embeddings:
        for layer in (model.get_input_embeddings(), model.get_output_embeddings()):
            if layer is not None:
                layer.weight.requires_grad_(False)


def learn(model, optimizer, tokenizer, rows: list[Row], args: Args) -> dict[str, float]:
    """One pass of importance-corrected policy-gradient steps over the rows."""
    model.train()
    stats: dict[str, list[float]] = {}
    by_sampling: dict[SamplingParams | None, list[Row]] = {}
    for row in rows:  # a minibatch is recomputed under one sampling distribution
        by_sampling.setdefault(row.sampling, []).append(row)
    parts = [
        (sampling, same[start : start + args.minibatch_size])
        for sampling, same in by_sampling.items()
        for start in range(0, len(same), args.minibatch_size)
    ]
    for sampling, part in parts:
        ids, attn, mask, behaviour = pack_rows(part, tokenizer.pad_token_id, model.device)
        adv = torch.tensor([r.advantage for r in part], dtype=torch.float32, device=model.device)
        logp = token_logprobs(model, ids, attn, sampling=sampling, mask=mask)
        loss, info = corrected_loss(logp, behaviour, adv, mask, args.is_cap)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)
        optimizer.step()
        for key, value in {"loss": float(loss.detach()), **info}.items():
            stats.setdefault(key, []).append(value)
    model.eval()
    return {k: float(np.mean(v)) for k, v in stats.items()}


async def next_group(ready: asyncio.Queue, workers: list[asyncio.Task]) -> Group:
    """The next finished group; a worker that stopped (its episodes kept failing) raises."""
    get = asyncio.ensure_future(ready.get())
    await asyncio.wait([get, *workers], return_when=asyncio.FIRST_COMPLETED)
    if get.done():
        return get.result()
    get.cancel()
    failed = next(w for w in workers if w.done())
    raise failed.exception() or GemkitError("a rollout worker stopped")


def group_return(g: Group) -> float:
    """Mean return of a group's episodes."""
    return float(np.mean([ep.total_reward for ep in g.episodes]))


async def train(args: Args, model, tokenizer, server, sampling: SamplingParams) -> list[dict]:
    """The rollout workers and the learner, on one event loop until `--steps` steps."""
    out = Path(args.out)
    headers = auth_headers(args.token)
    # foreach=False: no temporary copy of every parameter at once (2 GB for a 0.5B model)
    trained = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trained, lr=args.lr, weight_decay=0.0, foreach=False)
    version = 0  # the learner's policy version: the server holds these weights
    ready: asyncio.Queue[Group] = asyncio.Queue()
    seeds = itertools.count(args.seed * 1_000_003)
    slots = itertools.chain.from_iterable(
        itertools.repeat(Group(seed), args.group_size) for seed in seeds
    )
    counts = {"episodes": 0, "errors": 0, "filtered": 0, "stale": 0, "tokens": 0}
    history: list[dict] = []
    console = Console(stderr=True)
    async with aiohttp.ClientSession() as session:
        base, names = await resolve_server(
            session, server.wait() if server else args.server, headers
        )
        root = base[: -len("/v1")]
        model_name = args.served_model or names[0]
        if model_name not in names:
            raise GemkitError(f"the server serves {names}, not --served-model {model_name!r}")
        await check_tokenizer(session, root, tokenizer, model_name, headers)
        client = LLMClient(
            base_url=root if args.protocol == "sglang" else base,
            model=model_name,
            api_key=args.token,
            max_concurrency=args.in_flight,
        )
        probe = probe_ids(args, tokenizer)
        kind = await logprobs_kind(client, protocol=args.protocol, prompt=probe)
        trainable({**sampling.to_dict(), "logprobs": kind}, "this run")
        # the server's log-probs of a fixed sequence, against the learner's of each version
        expected = {version: learner_probe(model, probe)}
        gaps: dict[int, float] = {}

        async def sync_gap(v: int) -> None:
            served = await served_probe(client, probe)
            if served is not None:
                gaps[v] = max(abs(a - b) for a, b in zip(served, expected.pop(v), strict=True))

        await sync_gap(version)
        # the turns of episodes that are ready together share one HTTP request (vLLM, gemkit)
        sampler = TokenBatcher(client) if args.protocol == "completions" else client

        async def push(weights: bytes | Path | None, v: int) -> None:
            await send_weights(session, args, root, weights, v)
            if weights is not None:
                await sync_gap(v)

        async def worker() -> None:
            env = gemkit.make(args.env)
            policy = TokenPolicy(
                sampler,
                tokenizer,
                max_tokens=args.max_new_tokens,
                sampling=sampling,
                protocol=args.protocol,
                logprobs=kind,
                version=lambda: version,  # for servers that do not report it (vLLM)
            )
            while True:
                group = next(slots)
                episode = await run_episode(
                    env, policy, env_id=args.env, seed=group.seed, max_steps=args.max_turns
                )
                counts["episodes"] += 1
                counts["tokens"] += sum(
                    len(t.tokens.completion_ids) for t in episode.turns if t.tokens
                )
                if episode.error is not None:
                    counts["errors"] += 1
                    if counts["errors"] >= 8 and counts["errors"] > counts["episodes"] / 2:
                        raise GemkitError(f"most episodes fail; the last one: {episode.error}")
                group.episodes.append(episode)
                if len(group.episodes) == args.group_size:
                    await ready.put(group)

        load0, t_start = await server_load(session, root), time.perf_counter()
        pushing: asyncio.Task | None = None
        workers = [asyncio.create_task(worker()) for _ in range(args.in_flight)]
        try:
            with (
                Progress(console=console, disable=not args.progress, transient=True) as progress,
                (out / "metrics.jsonl").open("w") as log,
            ):
                task = progress.add_task("async GRPO", total=args.steps)
                for step in range(1, args.steps + 1):
                    t0 = time.perf_counter()
                    batch: list[Group] = []
                    seen: list[Group] = []
                    lags: list[int] = []
                    while len(batch) < args.num_groups:
                        group = await next_group(ready, workers)
                        seen.append(group)
                        if any(ep.error for ep in group.episodes):
                            continue
                        versions = [
                            t.tokens.version
                            for ep in group.episodes
                            for t in ep.turns
                            if t.tokens and t.tokens.version is not None
                        ]
                        rewards = [ep.total_reward for ep in group.episodes]
                        verdict = admit(
                            rewards, versions, version,
                            max_staleness=args.max_staleness, filter_equal=args.filter_equal,
                        )  # fmt: skip
                        if verdict != KEPT:
                            counts["stale" if verdict == STALE else "filtered"] += 1
                            continue
                        batch.append(group)
                        lags.append(staleness(version, versions))
                    wait_s = time.perf_counter() - t0
                    rows = rows_of(batch, args)
                    t1 = time.perf_counter()
                    stats = await asyncio.to_thread(learn, model, optimizer, tokenizer, rows, args)
                    version += 1
                    expected[version] = await asyncio.to_thread(learner_probe, model, probe)
                    weights = await asyncio.to_thread(snapshot, args, model, out, version)
                    if pushing is not None:  # versions reach the server in order
                        await pushing
                    # the learner does not wait for the server, which swaps between batches
                    pushing = asyncio.create_task(push(weights, version))
                    stats.update(
                        step=step,
                        version=version,
                        # every group that finished, informative or not: how the policy does
                        **{"return": float(np.mean([group_return(g) for g in seen]))},
                        return_trained=float(np.mean([group_return(g) for g in batch])),
                        success=float(np.mean([ep.success for g in seen for ep in g.episodes])),
                        staleness_mean=float(np.mean(lags)),
                        staleness_max=int(max(lags)),
                        wait_s=wait_s,
                        update_s=time.perf_counter() - t1,
                        elapsed_s=time.perf_counter() - START,
                        **counts,
                    )
                    if gaps:  # the latest checked sync: server and learner on the same weights
                        synced = max(gaps)
                        stats.update(sync_version=synced, sync_gap=gaps[synced])
                    history.append(stats)
                    log.write(json.dumps(stats) + "\n")
                    log.flush()
                    console.print(
                        f"step {step:4d}  return {stats['return']:6.3f}  "
                        f"trained {stats['return_trained']:6.3f}  stale {stats['staleness_mean']:4.2f}  "
                        f"filtered {counts['filtered']:4d}  dropped {counts['stale']:3d}  "
                        f"is {stats['is_weight']:5.3f}  {stats['elapsed_s']:6.1f}s",
                        soft_wrap=True,
                    )
                    progress.advance(task)
            if pushing is not None:
                await pushing
            if history:
                history[-1]["sync_gaps"] = {str(v): g for v, g in sorted(gaps.items())}
            load = await server_load(session, root)
            if load is not None and load0 is not None and history:
                busy, batches, rows = (a - b for a, b in zip(load, load0, strict=True))
                share = busy / (time.perf_counter() - t_start)
                history[-1].update(generator_busy=share, rows_per_batch=rows / max(batches, 1))
                console.print(
                    f"the model server was generating {share:.0%} of the run, "
                    f"{rows / max(batches, 1):.1f} rows per batch"
                )
        finally:
            for w in workers:
                w.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
            if isinstance(sampler, TokenBatcher):  # no batched request left pending at exit
                await sampler.aclose()
            await client.close()
    return history


def main(argv: list[str] | None = None) -> list[dict]:
    """Train; return the per-step metrics (also written to `OUT/metrics.jsonl`)."""
    args = parse_args(Args, argv, __doc__.splitlines()[0])
    sampling = check(args)
    args.lr = args.lr if args.lr is not None else (3e-3 if args.tiny else 1e-6)
    args.max_new_tokens = args.max_new_tokens or (4 if args.tiny else 256)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "args.json").write_text(json.dumps(asdict(args), indent=2))
    # the servers' default: $GEMKIT_SERVE_TOKEN (for the server started here and the client)
    args.token = resolve_token(args.token)
    if args.threads or args.tiny:  # a tiny model runs fastest on one thread
        torch.set_num_threads(args.threads or 1)
    torch.manual_seed(args.seed)
    try:  # a wrong id or model path is the user's to fix: a message, not a traceback
        gemkit.spec(args.env)
        model, tokenizer = (
            tiny_policy(args.env, seed=args.seed) if args.tiny else load_policy(args.model)
        )
    except (GemkitError, OSError) as e:
        raise SystemExit(f"error: {e}") from None
    model.to(args.device or ("cuda" if torch.cuda.is_available() else "cpu")).eval()
    prepare_learner(model, args)
    server = start_server(args, model, tokenizer)  # before any thread or event loop starts
    # The learner thread and the rollout loop share the GIL: a short switch interval hands it
    # back to the learner's many small torch calls quickly (about 25% faster on --tiny).
    sys.setswitchinterval(2e-4)
    loop = new_event_loop()  # uvloop when installed: less overhead per request
    try:
        history = loop.run_until_complete(train(args, model, tokenizer, server, sampling))
    except (GemkitError, TrajectoryError, aiohttp.ClientError) as e:
        raise SystemExit(f"error: {e}") from None
    finally:
        loop.close()
        if server is not None:
            server.stop()
    save(model, tokenizer, out / "final")
    return history


if __name__ == "__main__":
    main()
