"""Rollouts: run a policy on an env for many episodes and keep every transition."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gemkit.policy import Policy


@dataclass
class Turn:
    """One transition: what the policy saw, what it did, and what the env answered."""

    observation: Any
    action: str
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class Episode:
    """A whole episode of one env id and seed."""

    env_id: str
    seed: int | None
    turns: list[Turn] = field(default_factory=list)
    error: str | None = None

    @property
    def total_reward(self) -> float:
        """Undiscounted sum of rewards."""
        return float(sum(t.reward for t in self.turns))

    @property
    def success(self) -> bool:
        """Whether the final step reported `info["success"]`."""
        return bool(self.turns and self.turns[-1].info.get("success", False))

    @property
    def num_turns(self) -> int:
        """Number of steps taken."""
        return len(self.turns)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict with the summary figures next to the turns."""
        d = asdict(self)
        d.update(total_reward=self.total_reward, success=self.success, num_turns=self.num_turns)
        return d


async def run_episode(
    env: Any, policy: Policy, *, env_id: str = "", seed: int | None = None, max_steps: int = 10_000
) -> Episode:
    """Play one episode of `env` with `policy`; an env or policy error ends it, recorded."""
    episode = Episode(env_id=env_id, seed=seed)
    try:
        policy.reset()
        obs, _ = await env.areset(seed=seed)
        for _ in range(max_steps):
            action = await policy.act(obs)
            next_obs, reward, terminated, truncated, info = await env.astep(action)
            episode.turns.append(Turn(obs, action, float(reward), terminated, truncated, info))
            obs = next_obs
            if terminated or truncated:
                break
    except Exception as e:  # noqa: BLE001 - one failing episode must not sink the run
        episode.error = f"{type(e).__name__}: {e}"
    return episode


async def arun_episodes(
    env_id: str,
    policy_factory: Callable[[], Policy],
    n: int,
    *,
    seed: int = 0,
    concurrency: int = 64,
    make_kwargs: dict[str, Any] | None = None,
    on_episode: Callable[[int, Episode], None] | None = None,
    skip: Iterable[int] = (),
) -> list[Episode]:
    """Run `n` episodes (episode k uses seed `seed + k`) with up to `concurrency` at once.

    Envs and policies are pooled and reused across episodes; results come back in episode
    order whatever the concurrency, and `on_episode(k, episode)` is called as each finishes.
    """
    from gemkit.registry import make

    todo = [k for k in range(n) if k not in set(skip)]
    pool: asyncio.Queue = asyncio.Queue()
    for _ in range(max(1, min(concurrency, len(todo)))):
        pool.put_nowait((make(env_id, **(make_kwargs or {})), policy_factory()))
    results: dict[int, Episode] = {}

    async def one(k: int) -> None:
        env, policy = await pool.get()
        try:
            ep = await run_episode(env, policy, env_id=env_id, seed=seed + k)
            results[k] = ep
            if on_episode is not None:
                on_episode(k, ep)
        finally:
            pool.put_nowait((env, policy))

    await asyncio.gather(*(one(k) for k in todo))
    while not pool.empty():
        env, _ = pool.get_nowait()
        env.close()
    return [results[k] for k in todo]


def run_episodes(env_id: str, policy_factory: Callable[[], Policy], n: int, **kwargs: Any) -> list[Episode]:
    """Blocking `arun_episodes`."""
    return asyncio.run(arun_episodes(env_id, policy_factory, n, **kwargs))


def summarize(episodes: Sequence[Episode]) -> dict[str, float]:
    """Success rate, mean return, mean turns and error count of a list of episodes."""
    n = len(episodes)
    if n == 0:
        return {"episodes": 0, "success_rate": 0.0, "mean_return": 0.0, "mean_turns": 0.0, "errors": 0}
    return {
        "episodes": n,
        "success_rate": sum(e.success for e in episodes) / n,
        "mean_return": sum(e.total_reward for e in episodes) / n,
        "mean_turns": sum(e.num_turns for e in episodes) / n,
        "errors": sum(e.error is not None for e in episodes),
    }


def save_jsonl(episodes: Iterable[Episode], path: str | Path) -> Path:
    """Write one episode per JSON line."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for ep in episodes:
            f.write(json.dumps(ep.to_dict(), default=str) + "\n")
    return path
