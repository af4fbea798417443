"""Rollouts: run a policy on an env for many episodes and keep every transition."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gemkit.core import areset_of, astep_of
from gemkit.policy import Policy
from gemkit.trajectory import TurnTokens

if TYPE_CHECKING:
    from gemkit.records.episodes import EpisodeRecord


@dataclass
class Turn:
    """One transition: what the policy saw, what it did, and what the env answered.

    `observation` is what the policy was given: text, or the chat messages the model saw
    (with `ChatHistory` and context wrappers). `usage` holds the model's token counts for
    this turn when the policy reports them (`prompt_tokens`, `completion_tokens`).
    `tokens` holds the token ids the model was fed and sampled, their log-probs and policy
    version, when the policy reports them (`TokenPolicy`; see `gemkit.trajectory`).
    `finish_reason` is why the model's reply ended, when the policy reports it: `stop`,
    `tool_calls`, or `length` for a reply cut at its token limit (`max_tokens`, or the end of
    the model's context window) and graded as it was cut.
    """

    observation: Any
    action: Any
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any] = field(default_factory=dict)
    usage: dict[str, int] = field(default_factory=dict)
    tokens: TurnTokens | None = None
    finish_reason: str | None = None


@dataclass
class Episode:
    """A whole episode of one env id and seed (`policy`: who played it, when known).

    `context_overflow` holds the model server's refusal when the episode ended because its
    chat no longer fit the model's context window (`gemkit.llm.client.ContextWindowError`):
    an outcome of the episode, not an error of the run (playing it again would end there too).
    """

    env_id: str
    seed: int | None
    turns: list[Turn] = field(default_factory=list)
    error: str | None = None
    policy: dict[str, Any] | None = None
    context_overflow: str | None = None

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

    @property
    def tool_calls(self) -> int:
        """Tool calls made during the episode (as `ToolEnvWrapper` reports them)."""
        return int(sum(t.info.get("tool_calls", 0) or 0 for t in self.turns))

    @property
    def token_sources(self) -> dict[str, dict[str, int]]:
        """Tokens and model calls by who made the call: the policy, or context summaries."""
        policy = _token_totals(t.usage for t in self.turns if t.usage)
        edits = [e for t in self.turns for e in t.info.get("context_edits") or ()]
        summary = _token_totals(e["usage"] for e in edits if isinstance(e.get("usage"), dict))
        return {"policy": policy, "summary": summary}

    @property
    def tokens(self) -> dict[str, int]:
        """Prompt and completion tokens of every model call: the policy's and the summaries'."""
        sources = self.token_sources.values()
        return {
            "prompt_tokens": sum(s["prompt_tokens"] for s in sources),
            "completion_tokens": sum(s["completion_tokens"] for s in sources),
        }

    @property
    def context_warnings(self) -> int:
        """Steps at which a context strategy left the chat over its budget."""
        return sum(bool(t.info.get("context_warnings")) for t in self.turns)

    @property
    def replies_cut(self) -> int:
        """Model replies cut at their token limit (`finish_reason` `length`)."""
        return sum(t.finish_reason == "length" for t in self.turns)

    @property
    def replies_cut_at_window(self) -> int:
        """Replies cut before their `max_tokens` (the policy's): at the end of the model's
        context window, which the chat had nearly filled."""
        limit = (self.policy or {}).get("max_tokens")
        if not isinstance(limit, int):
            return 0
        return sum(
            t.finish_reason == "length" and 0 < t.usage.get("completion_tokens", limit) < limit
            for t in self.turns
        )

    @property
    def summaries_truncated(self) -> int:
        """Context summaries cut at their token budget."""
        edits = [e for t in self.turns for e in t.info.get("context_edits") or ()]
        return sum(bool(e.get("summary_truncated")) for e in edits)

    def returns(self, gamma: float = 1.0) -> list[float]:
        """Discounted return from each turn: G_t = r_t + gamma * G_{t+1}."""
        from gemkit.rl import discounted_returns

        return [float(g) for g in discounted_returns([t.reward for t in self.turns], gamma)]

    def to_record(self, *, key: str | None = None, index: int | None = None) -> EpisodeRecord:
        """The episode as a typed record, with the summary figures next to the turns.

        The record's turns hold the episode's own observation, action and info objects.
        """
        from gemkit.records.episodes import EpisodeRecord

        return EpisodeRecord(
            key=key,
            index=index,
            env_id=self.env_id,
            seed=self.seed,
            policy=self.policy,
            # the turns' values as they are (no deep copy): `to_json` writes fresh JSON anyway
            turns=[
                {
                    "observation": t.observation,
                    "action": t.action,
                    "reward": t.reward,
                    "terminated": t.terminated,
                    "truncated": t.truncated,
                    "info": t.info,
                    "usage": t.usage,
                    "tokens": asdict(t.tokens) if t.tokens is not None else None,
                    "finish_reason": t.finish_reason,
                }
                for t in self.turns
            ],
            error=self.error,
            context_overflow=self.context_overflow,
            total_reward=self.total_reward,
            success=self.success,
            num_turns=self.num_turns,
            tool_calls=self.tool_calls,
            tokens=self.tokens,
            token_sources=self.token_sources,
        )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of the episode's record (`EpisodeRecord`), as a JSONL line holds it."""
        return self.to_record().to_json()

    @classmethod
    def from_record(cls, record: EpisodeRecord) -> Episode:
        """The in-memory episode of a record."""
        turns = [
            Turn(
                t.observation,
                t.action,
                t.reward,
                t.terminated,
                t.truncated,
                t.info if t.info is not None else {},
                t.usage.model_dump(exclude_none=True),
                TurnTokens(**t.tokens.model_dump()) if t.tokens is not None else None,
                t.finish_reason,
            )
            for t in record.turns
        ]
        policy = record.policy.model_dump() if record.policy is not None else None
        return cls(record.env_id, record.seed, turns, record.error, policy, record.context_overflow)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Episode:
        """Rebuild an episode from `to_dict` output (for example a JSONL line)."""
        from gemkit.records.episodes import EpisodeRecord

        return cls.from_record(EpisodeRecord.parse(d))


_TOKEN_KEYS = ("prompt_tokens", "completion_tokens", "cached_tokens")


def _token_totals(usages: Iterable[dict[str, int]]) -> dict[str, int]:
    totals = dict.fromkeys(_TOKEN_KEYS, 0) | {"calls": 0}
    for u in usages:
        totals["calls"] += 1
        for key in _TOKEN_KEYS:
            totals[key] += int(u.get(key, 0) or 0)
    return totals


def _finish_of(policy: Any) -> str | None:
    """Why the policy's last reply ended (`last_finish_reason`, or its response's), if known."""
    reason = getattr(policy, "last_finish_reason", None)
    if reason is None:
        reason = getattr(getattr(policy, "last_response", None), "finish_reason", None)
    return reason if isinstance(reason, str) else None


def _over_window(e: Exception) -> bool:
    # the client module is loaded whenever one of its errors exists: no import here
    client = sys.modules.get("gemkit.llm.client")
    return client is not None and isinstance(e, client.ContextWindowError)


def _usage_of(policy: Any) -> dict[str, int]:
    response = getattr(policy, "last_response", None)
    usage = getattr(response, "usage", None)
    if usage is None:
        return {}
    out = {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens}
    if getattr(usage, "cached_tokens", 0):
        out["cached_tokens"] = usage.cached_tokens
    return out


#: the return at which an episode of an env that reports no `info["success"]` counts as solved,
#: when its spec has no `reward_threshold` (gemkit's convention: a solved task pays 1)
SUCCESS_RETURN = 1.0


def with_success(env: Any, info: dict[str, Any], total: float) -> dict[str, Any]:
    """The last step's info with `success`: the env's own, else the return against a bar.

    A third-party env (a plain gymnasium env, one from another library) that says nothing
    of success is counted solved when the episode's return reaches its spec's
    `reward_threshold` (gymnasium's "considered solved"), or `SUCCESS_RETURN` without one;
    `info["success_from"]` then says which rule decided.
    """
    if "success" in info:
        return info
    spec = getattr(env, "spec", None) or getattr(getattr(env, "unwrapped", None), "spec", None)
    threshold = getattr(spec, "reward_threshold", None)
    bar = SUCCESS_RETURN if threshold is None else float(threshold)
    rule = f"spec.reward_threshold {bar:g}" if threshold is not None else f"return >= {bar:g}"
    return {**info, "success": total >= bar, "success_from": rule}


async def run_episode(
    env: Any, policy: Policy, *, env_id: str = "", seed: int | None = None, max_steps: int = 10_000
) -> Episode:
    """Play one episode of `env` with `policy`; an env or policy error ends it, recorded.

    A model server refusing a request whose chat outgrew the model's context window ends the
    episode as an outcome (`context_overflow`), not an error. A policy with an
    `on_reset(info)` method gets the reset's info before its first action.
    """
    episode = Episode(env_id=env_id, seed=seed)
    try:
        policy.reset()
        obs, info = await areset_of(env, seed=seed)
        on_reset = getattr(policy, "on_reset", None)
        if on_reset is not None:  # e.g. an LLM policy offering the env's tools natively
            on_reset(info)
        for _ in range(max_steps):
            action = await policy.act(obs)
            # read now: a summary by the same policy during the step replaces last_response
            usage = _usage_of(policy)
            tokens = getattr(policy, "last_tokens", None)
            finish = _finish_of(policy)
            next_obs, reward, terminated, truncated, info = await astep_of(env, action)
            if terminated or truncated:
                info = with_success(env, info, episode.total_reward + float(reward))
            turn = Turn(
                obs, action, float(reward), terminated, truncated, info, usage, tokens, finish
            )
            episode.turns.append(turn)
            obs = next_obs
            if terminated or truncated:
                break
    except Exception as e:  # noqa: BLE001 - one failing episode must not sink the run
        if _over_window(e):
            episode.context_overflow = str(e)
        else:
            episode.error = f"{type(e).__name__}: {e}"
    return episode


async def play_in_order(
    env_id: str,
    indices: Sequence[int],
    new_policy: Callable[[int], Policy],
    *,
    seed: int = 0,
    concurrency: int = 16,
    make_kwargs: Mapping[str, Any] | None = None,
    commit: Callable[[int, Episode], None],
    window: int | None = None,
    on_finish: Callable[[int, Episode], None] | None = None,
) -> None:
    """Play episodes `indices` of `env_id` (episode k: seed `seed + k`, `new_policy(seed + k)`).

    Up to `concurrency` play at once on pooled envs (made as needed, closed at the end);
    `on_finish(k, episode)` is called as each finishes and `commit(k, episode)` in the order
    of `indices`. An episode starts only within `window` of the oldest uncommitted one (no
    limit if None). If a callback raises, the episodes in flight are cancelled and the error
    propagates.
    """
    from gemkit.registry import make

    order = list(indices)
    window = len(order) if window is None else window
    idle: list[Any] = []
    made: list[Any] = []
    finished: dict[int, Episode] = {}
    running: set[asyncio.Task] = set()
    started = committed = 0

    async def one(k: int, env: Any) -> tuple[int, Any, Episode]:
        policy = new_policy(seed + k)
        return k, env, await run_episode(env, policy, env_id=env_id, seed=seed + k)

    try:
        while committed < len(order):
            while (
                len(running) < concurrency and started < len(order) and started < committed + window
            ):
                if not idle:
                    made.append(make(env_id, **(make_kwargs or {})))
                    idle.append(made[-1])
                running.add(asyncio.create_task(one(order[started], idle.pop())))
                started += 1
            done, running = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
            for task in done:  # read every failure, so none is left "never retrieved"
                if not task.cancelled():
                    task.exception()
            for task in done:
                k, env, episode = task.result()
                idle.append(env)
                finished[k] = episode
                if on_finish is not None:
                    on_finish(k, episode)
            while committed < len(order) and order[committed] in finished:
                k = order[committed]
                commit(k, finished.pop(k))
                committed += 1
    finally:
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
        for env in made:
            closer = getattr(env, "aclose", None)
            if closer is not None:
                await closer()
            else:
                env.close()


async def arun_episodes(
    env_id: str,
    policy_factory: Callable[[], Policy],
    n: int,
    *,
    seed: int = 0,
    concurrency: int = 64,
    make_kwargs: dict[str, Any] | None = None,
    on_episode: Callable[[int, Episode], None] | None = None,
) -> list[Episode]:
    """Run `n` episodes (episode k uses seed `seed + k`) with up to `concurrency` at once.

    Envs and policies are pooled and reused across episodes; results come back in episode
    order whatever the concurrency, and `on_episode(k, episode)` is called as each finishes.
    """
    idle: list[Policy] = []
    playing: dict[int, Policy] = {}
    results: list[Episode] = []

    def new_policy(episode_seed: int) -> Policy:
        policy = idle.pop() if idle else policy_factory()
        playing[episode_seed - seed] = policy
        return policy

    def on_finish(k: int, episode: Episode) -> None:
        idle.append(playing.pop(k))
        if on_episode is not None:
            on_episode(k, episode)

    await play_in_order(
        env_id,
        range(n),
        new_policy,
        seed=seed,
        concurrency=max(1, concurrency),
        make_kwargs=make_kwargs,
        commit=lambda k, episode: results.append(episode),
        on_finish=on_finish,
    )
    return results


def run_episodes(
    env_id: str, policy_factory: Callable[[], Policy], n: int, **kwargs: Any
) -> list[Episode]:
    """Blocking `arun_episodes`."""
    return asyncio.run(arun_episodes(env_id, policy_factory, n, **kwargs))


def summarize(episodes: Sequence[Episode]) -> dict[str, float]:
    """Success rate, mean return, turns, tool calls and tokens, and errors of episodes.

    `mean_tokens` counts every model call (the policy's and context summaries');
    `mean_summary_tokens` is the summaries' share. `context_warnings` counts episodes in
    which a context strategy left the chat over its budget, `context_overflows` episodes
    that ended when the model server refused a chat over its window, `replies_cut` model
    replies cut at their token limit, and `replies_cut_at_window` those of them cut before
    their `max_tokens`, at the end of the model's window. `native_tool_calls` and
    `text_tool_calls` count the calls that came as the server's `tool_calls` and those read
    from the reply's text (a model that wrote its calls as JSON in the content).
    """
    n = len(episodes)
    keys = (
        "success_rate",
        "mean_return",
        "mean_turns",
        "mean_tool_calls",
        "mean_tokens",
        "mean_summary_tokens",
    )
    if n == 0:
        zeros = {
            "errors": 0,
            "context_warnings": 0,
            "summaries_truncated": 0,
            "native_tool_calls": 0,
            "text_tool_calls": 0,
            "context_overflows": 0,
            "replies_cut": 0,
            "replies_cut_at_window": 0,
        }
        return {"episodes": 0, **dict.fromkeys(keys, 0.0), **zeros}
    summary_tokens = [e.token_sources["summary"] for e in episodes]
    formats = [
        call.get("format")
        for e in episodes
        for t in e.turns
        for call in (t.info.get("parsed_calls") or [] if isinstance(t.info, dict) else [])
        if isinstance(call, dict)
    ]
    return {
        "episodes": n,
        "success_rate": sum(e.success for e in episodes) / n,
        "mean_return": sum(e.total_reward for e in episodes) / n,
        "mean_turns": sum(e.num_turns for e in episodes) / n,
        "mean_tool_calls": sum(e.tool_calls for e in episodes) / n,
        "mean_tokens": sum(sum(e.tokens.values()) for e in episodes) / n,
        "mean_summary_tokens": sum(
            s["prompt_tokens"] + s["completion_tokens"] for s in summary_tokens
        )
        / n,
        "errors": sum(e.error is not None for e in episodes),
        "context_warnings": sum(e.context_warnings > 0 for e in episodes),
        "summaries_truncated": sum(e.summaries_truncated for e in episodes),
        "native_tool_calls": sum(f == "openai" for f in formats),
        "text_tool_calls": sum(f != "openai" for f in formats),
        "context_overflows": sum(e.context_overflow is not None for e in episodes),
        "replies_cut": sum(e.replies_cut for e in episodes),
        "replies_cut_at_window": sum(e.replies_cut_at_window for e in episodes),
    }


def save_jsonl(episodes: Iterable[Episode], path: str | Path) -> Path:
    """Write one episode per JSON line."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for ep in episodes:
            f.write(json.dumps(ep.to_dict(), default=str) + "\n")
    return path


def load_jsonl(path: str | Path) -> list[Episode]:
    """Read episodes written by `save_jsonl` or `gemkit eval` (a torn last line is skipped).

    Every other line must be an episode record of this schema version: a damaged line is a
    `RunStoreError`, a line of another kind a `RecordError`, each naming the file and line.
    """
    from gemkit.records.episodes import EpisodeRecord
    from gemkit.runstore import read_lines

    return [
        Episode.from_record(EpisodeRecord.parse(raw, f"{path}, line {n}"))
        for n, raw in read_lines(path)
    ]


def to_dataset(episodes: Sequence[Episode], *, per: str = "turn", gamma: float = 1.0) -> Any:
    """A `datasets.Dataset` with one row per turn (default) or per episode.

    Turn rows hold `env_id, seed, episode, turn, observation, action, reward, return,
    terminated, truncated, prompt_tokens, completion_tokens, info`, for trainers; chat
    observations and infos are JSON strings so every row has the same schema. Episode rows
    are `EpisodeRecord`s, the JSONL's schema (each turn's observation, action and info, the
    env's and policy's own JSON, as JSON text).
    """
    import datasets

    def text(x: Any) -> str:
        return x if isinstance(x, str) else json.dumps(x, default=str)

    if per == "episode":
        from gemkit.records.episodes import EpisodeRecord
        from gemkit.records.export import features, to_row

        rows = [to_row(e.to_record()) for e in episodes]
        return datasets.Dataset.from_list(rows, features=features(EpisodeRecord))
    if per != "turn":
        raise ValueError(f"per must be 'turn' or 'episode', got {per!r}")
    rows = []
    for k, e in enumerate(episodes):
        for i, (t, g) in enumerate(zip(e.turns, e.returns(gamma), strict=True)):
            rows.append(
                {
                    "env_id": e.env_id,
                    "seed": e.seed,
                    "episode": k,
                    "turn": i,
                    "observation": text(t.observation),
                    "action": text(t.action),
                    "reward": t.reward,
                    "return": g,
                    "terminated": t.terminated,
                    "truncated": t.truncated,
                    "prompt_tokens": t.usage.get("prompt_tokens", 0),
                    "completion_tokens": t.usage.get("completion_tokens", 0),
                    "info": json.dumps(t.info, default=str),
                }
            )
    return datasets.Dataset.from_list(rows)
