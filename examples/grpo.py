"""GRPO for multi-turn LLM agents, in one file: a group of episodes per start state.

For each start state (an env reset with one seed) the env is cloned G times (`env.clone()`), so
the G episodes of a group replay the same task with the same randomness. Each episode's return
(discounted with `--gamma`, default 1: the sum of rewards) is compared with its group:
A_i = (R_i - mean) / std (`gemkit.rl.grpo_advantages`; `--scale none` is Dr. GRPO), and every
turn of the episode gets A_i. The loss covers the model's own tokens only; prompt tokens (task,
environment feedback, tool output) are masked out.

    python examples/grpo.py --tiny --env toy:Copy-v0-single --iterations 40
    python examples/grpo.py --tiny --env game:GuessTheNumber-v0-easy --iterations 3
    python examples/grpo.py --model ./Qwen3-0.6B --env game:GuessTheNumber-v0-easy --lr 1e-6

`--model` is a local Hugging Face folder (nothing is downloaded); `--tiny` builds a small random
model and a word-level tokenizer from the env's own text.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from rich.console import Console
from rich.progress import Progress

import gemkit
from gemkit.errors import GemkitError
from gemkit.rl import batch_returns, grpo_advantages
from gemkit.train.args import parse_args
from gemkit.train.sequences import encode_prompts, sample
from gemkit.train.tiny import load_policy, tiny_policy
from gemkit.train.update import save, update


@dataclass
class Args:
    """GRPO: G cloned episodes per start state, advantages relative to the group."""

    env: str = field(default="game:GuessTheNumber-v0-easy", metadata={"help": "gemkit env id"})
    model: str | None = field(default=None, metadata={"help": "local Hugging Face model folder"})
    tiny: bool = field(default=False, metadata={"help": "build a tiny random model locally"})
    iterations: int = field(default=40, metadata={"help": "rollout + update rounds"})
    num_groups: int = field(default=8, metadata={"help": "start states per iteration"})
    group_size: int = field(default=4, metadata={"help": "episodes per start state (G)"})
    scale: str = field(default="std", metadata={"help": "'std' (GRPO) or 'none' (Dr. GRPO)"})
    gamma: float = field(default=1.0, metadata={"help": "discount of an episode's return"})
    lr: float | None = field(
        default=None, metadata={"help": "learning rate (tiny 3e-3, else 1e-6)"}
    )
    clip: float | None = field(default=None, metadata={"help": "PPO ratio clip, e.g. 0.2"})
    update_epochs: int = field(default=1, metadata={"help": "passes over each batch"})
    minibatch_size: int = field(default=128, metadata={"help": "transitions per gradient step"})
    max_new_tokens: int | None = field(default=None, metadata={"help": "tiny 4, else 256"})
    max_prompt_tokens: int = field(default=1024, metadata={"help": "keep the newest N tokens"})
    max_turns: int = field(default=50, metadata={"help": "cap on turns per episode"})
    temperature: float = field(default=1.0, metadata={"help": "sampling temperature"})
    max_grad_norm: float = field(default=1.0, metadata={"help": "gradient clipping"})
    seed: int = field(default=0, metadata={"help": "seed for torch and the envs"})
    threads: int = field(
        default=0, metadata={"help": "torch CPU threads (0: 1 with --tiny, else torch's default)"}
    )
    out: str = field(default="runs/grpo", metadata={"help": "checkpoints and metrics.jsonl"})
    save_every: int = field(default=0, metadata={"help": "checkpoint every N iterations (0: end)"})
    device: str | None = field(
        default=None, metadata={"help": "cuda or cpu (default: cuda if any)"}
    )
    progress: bool = field(default=True, metadata={"help": "show a progress bar"})


@dataclass
class Transition:
    """One turn: the prompt tokens, the model's response tokens, and the env's reward."""

    prompt: list[int]
    response: list[int]
    reward: float


def start_groups(args: Args, seed: int) -> tuple[list, list]:
    """Reset one env per group with its own seed and clone it G times: the same start state."""
    envs, obs = [], []
    for g in range(args.num_groups):
        base = gemkit.make(args.env)
        first, _ = base.reset(seed=seed + g)
        for _ in range(args.group_size):
            envs.append(base.clone())
            obs.append(first)
        base.close()
    return envs, obs


def rollout(envs, obs, model, tokenizer, args: Args) -> tuple[list[list[Transition]], dict]:
    """Play every env to the end in lockstep; return each episode's transitions and stats."""
    n = len(envs)
    episodes: list[list[Transition]] = [[] for _ in range(n)]
    success = [False] * n
    active = list(range(n))
    model_s = env_s = 0.0
    for _ in range(args.max_turns):
        if not active:
            break
        t0 = time.perf_counter()
        prompts = encode_prompts(tokenizer, [obs[i] for i in active], args.max_prompt_tokens)
        responses = sample(
            model,
            prompts,
            pad_id=tokenizer.pad_token_id,
            eos_id=tokenizer.eos_token_id,
            max_new_tokens=args.max_new_tokens,
            temperature=args.temperature,
        )
        actions = tokenizer.batch_decode(responses, skip_special_tokens=True)
        t1 = time.perf_counter()
        still = []
        for k, i in enumerate(active):
            obs[i], reward, terminated, truncated, info = envs[i].step(actions[k])
            episodes[i].append(Transition(prompts[k], responses[k], float(reward)))
            if terminated or truncated:
                success[i] = bool(info.get("success", False))
            else:
                still.append(i)
        env_s += time.perf_counter() - t1
        model_s += t1 - t0
        active = still
    stats = {
        "return": float(np.mean([sum(t.reward for t in ep) for ep in episodes])),
        "success": float(np.mean(success)),
        "turns": float(np.mean([len(ep) for ep in episodes])),
        "model_s": model_s,
        "env_s": env_s,
    }
    return episodes, stats


def main(argv: list[str] | None = None) -> list[dict]:
    """Train; return the per-iteration metrics (also written to `OUT/metrics.jsonl`)."""
    args = parse_args(Args, argv, __doc__.splitlines()[0])
    if args.tiny == (args.model is not None):
        raise SystemExit("pass exactly one of --tiny or --model PATH (a local model folder)")
    if args.threads or args.tiny:  # a tiny model runs fastest on one thread
        torch.set_num_threads(args.threads or 1)
    torch.manual_seed(args.seed)
    args.lr = args.lr if args.lr is not None else (3e-3 if args.tiny else 1e-6)
    args.max_new_tokens = args.max_new_tokens or (4 if args.tiny else 256)

    # -- environment and policy --------------------------------------------------------------
    if args.scale not in ("std", "none"):
        raise SystemExit(f"--scale must be 'std' (GRPO) or 'none' (Dr. GRPO), got {args.scale!r}")
    if args.group_size < 2:
        raise SystemExit(
            f"--group-size must be >= 2 (a group of 1 has no baseline), got {args.group_size}"
        )
    try:  # a wrong id or model path is the user's to fix: a message, not a traceback
        gemkit.spec(args.env)
        model, tokenizer = (
            tiny_policy(args.env, seed=args.seed) if args.tiny else load_policy(args.model)
        )
    except (GemkitError, OSError) as e:
        raise SystemExit(f"error: {e}") from None
    model.to(args.device or ("cuda" if torch.cuda.is_available() else "cpu")).eval()
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "args.json").write_text(json.dumps(asdict(args), indent=2))
    console = Console(stderr=True)
    history: list[dict] = []

    with (
        Progress(console=console, disable=not args.progress, transient=True) as progress,
        (out / "metrics.jsonl").open("w") as log,
    ):
        task = progress.add_task("GRPO", total=args.iterations)
        for it in range(1, args.iterations + 1):
            # -- rollout: G clones of each start state, played to the end -------------------
            t0 = time.perf_counter()
            envs, obs = start_groups(args, args.seed + it * args.num_groups)
            episodes, stats = rollout(envs, obs, model, tokenizer, args)
            for env in envs:
                env.close()
            rollout_s = time.perf_counter() - t0

            # -- advantages: each episode's return against its group (gemkit.rl) -------------
            rewards = [[t.reward for t in ep] for ep in episodes]
            returns = [float(g[0]) for g in batch_returns(rewards, args.gamma)]
            groups = np.array(returns).reshape(args.num_groups, args.group_size)
            advantages = grpo_advantages(groups, scale=args.scale).reshape(-1)
            batch = [(t, float(a)) for ep, a in zip(episodes, advantages, strict=True) for t in ep]
            # minibatches mix episodes (seeded, so a run repeats exactly)
            order = np.random.default_rng(args.seed + it).permutation(len(batch))
            batch = [batch[k] for k in order]

            # -- update ---------------------------------------------------------------------
            t1 = time.perf_counter()
            stats.update(update(model, optimizer, tokenizer, batch, args))
            stats.update(
                iteration=it,
                transitions=len(batch),
                rollout_s=rollout_s,
                update_s=time.perf_counter() - t1,
            )
            history.append(stats)
            log.write(json.dumps(stats) + "\n")
            log.flush()
            console.print(
                f"iter {it:4d}  return {stats['return']:6.3f}  success {stats['success']:5.2f}  "
                f"turns {stats['turns']:5.2f}  loss {stats['loss']:+.4f}  "
                f"kl {stats['approx_kl']:.4f}  {rollout_s + stats['update_s']:5.1f}s",
                soft_wrap=True,
            )
            if args.save_every and it % args.save_every == 0:
                save(model, tokenizer, out / f"iter_{it:05d}")
            progress.advance(task)
    save(model, tokenizer, out / "final")
    return history


if __name__ == "__main__":
    main()
