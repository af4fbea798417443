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
    python examples/async_grpo.py --model ./Qwen3-0.6B --server http://gpu:30000 \
        --protocol sglang --weight-sync sglang-disk --env game:GuessTheNumber-v0-easy

Without `--server` the script starts `gemkit serve model` (the same model, on this machine)
and stops it at the end. `--model` is a local Hugging Face folder (nothing is downloaded);
`--tiny` builds a small random model and a word-level tokenizer from the env's own text.
"""

from __future__ import annotations

import asyncio
import itertools
import json
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
from gemkit.rl import batch_returns, grpo_advantages
from gemkit.rollout import Episode, run_episode
from gemkit.serving import auth_headers, resolve_token
from gemkit.train.args import parse_args
from gemkit.train.model_server import (
    ForkedServer,
    ServerLimits,
    ServerProcess,
    state_bytes,
    vocab_hash,
)
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
from gemkit.train.tiny import load_policy, tiny_policy
from gemkit.train.update import save
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
    protocol: str = field(
        default="completions", metadata={"help": "'completions' (vLLM, gemkit) or 'sglang'"}
    )
    weight_sync: str = field(
        default="gemkit",
        metadata={"help": "'gemkit' (POST /update_weights), 'sglang-disk', or 'none'"},
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
    max_grad_norm: float = field(default=1.0, metadata={"help": "gradient clipping"})
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


def check(args: Args) -> None:
    """Refuse flag combinations that cannot work, with a one-line message."""
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
    if args.weight_sync not in ("gemkit", "sglang-disk", "none"):
        raise SystemExit(
            f"--weight-sync must be gemkit, sglang-disk or none, got {args.weight_sync!r}"
        )
    if args.max_staleness < 0 or args.is_cap <= 0 or args.in_flight < 1:
        raise SystemExit("--max-staleness must be >= 0, --is-cap > 0 and --in-flight >= 1")


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
    if args.weight_sync == "sglang-disk":
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
    headers = auth_headers(args.token)
    if weights is None:
        return
    if isinstance(weights, bytes):
        url, kwargs = f"{root}/update_weights?weight_version={version}", {"data": weights}
    else:
        payload = {"model_path": str(weights.resolve()), "weight_version": str(version)}
        url, kwargs = f"{root}/update_weights_from_disk", {"json": payload}
    async with session.post(url, headers=headers, **kwargs) as resp:
        if resp.status != 200:
            raise GemkitError(f"the server refused the weights: {await resp.text()}")


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


async def check_tokenizer(session: aiohttp.ClientSession, root: str, tokenizer) -> None:
    """A gemkit server must use the learner's vocabulary, or every id would mean another token."""
    async with session.get(f"{root}/health") as resp:
        try:
            data = await resp.json(content_type=None)
        except ValueError:
            return  # not a gemkit server (SGLang's /health has no body)
    served = data.get("tokenizer_hash") if isinstance(data, dict) else None
    if served and served != vocab_hash(tokenizer):
        raise GemkitError("the server's tokenizer is not the learner's; serve the same model")


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
        rows.append(Row(seq.prompt_ids, seq.response_ids, seq.mask, seq.logprobs, float(adv)))
    return rows


def learn(model, optimizer, tokenizer, rows: list[Row], args: Args) -> dict[str, float]:
    """One pass of importance-corrected policy-gradient steps over the rows."""
    model.train()
    stats: dict[str, list[float]] = {}
    for start in range(0, len(rows), args.minibatch_size):
        part = rows[start : start + args.minibatch_size]
        ids, attn, mask, behaviour = pack_rows(part, tokenizer.pad_token_id, model.device)
        adv = torch.tensor([r.advantage for r in part], dtype=torch.float32, device=model.device)
        logp = token_logprobs(model, ids, attn, args.temperature)
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


async def train(args: Args, model, tokenizer, server) -> list[dict]:
    """The rollout workers and the learner, on one event loop until `--steps` steps."""
    out = Path(args.out)
    base = server.wait() if server else args.server.rstrip("/")
    root = base[: -len("/v1")] if base.endswith("/v1") else base
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    client = LLMClient(
        base_url=base, model="policy", api_key=args.token, max_concurrency=args.in_flight
    )
    version = 0  # the learner's policy version: the server holds these weights
    ready: asyncio.Queue[Group] = asyncio.Queue()
    seeds = itertools.count(args.seed * 1_000_003)
    slots = itertools.chain.from_iterable(
        itertools.repeat(Group(seed), args.group_size) for seed in seeds
    )
    counts = {"episodes": 0, "errors": 0, "filtered": 0, "stale": 0, "tokens": 0}

    # the turns of episodes that are ready together share one HTTP request (vLLM, gemkit)
    sampler = TokenBatcher(client) if args.protocol == "completions" else client

    async def worker() -> None:
        env = gemkit.make(args.env)
        policy = TokenPolicy(
            sampler,
            tokenizer,
            max_tokens=args.max_new_tokens,
            temperature=args.temperature,
            protocol=args.protocol,
            version=lambda: version,  # for servers that do not report it (vLLM)
        )
        while True:
            group = next(slots)
            episode = await run_episode(
                env, policy, env_id=args.env, seed=group.seed, max_steps=args.max_turns
            )
            counts["episodes"] += 1
            counts["tokens"] += sum(len(t.tokens.completion_ids) for t in episode.turns if t.tokens)
            if episode.error is not None:
                counts["errors"] += 1
                if counts["errors"] >= 8 and counts["errors"] > counts["episodes"] / 2:
                    raise GemkitError(f"most episodes fail; the last one: {episode.error}")
            group.episodes.append(episode)
            if len(group.episodes) == args.group_size:
                await ready.put(group)

    history: list[dict] = []
    console = Console(stderr=True)
    async with aiohttp.ClientSession() as session:
        await check_tokenizer(session, root, tokenizer)
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
                    weights = await asyncio.to_thread(snapshot, args, model, out, version)
                    if pushing is not None:  # versions reach the server in order
                        await pushing
                    # the learner does not wait for the server, which swaps between batches
                    pushing = asyncio.create_task(
                        send_weights(session, args, root, weights, version)
                    )
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
    check(args)
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
    server = start_server(args, model, tokenizer)  # before any thread or event loop starts
    # The learner thread and the rollout loop share the GIL: a short switch interval hands it
    # back to the learner's many small torch calls quickly (about 25% faster on --tiny).
    sys.setswitchinterval(2e-4)
    loop = new_event_loop()  # uvloop when installed: less overhead per request
    try:
        history = loop.run_until_complete(train(args, model, tokenizer, server))
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
