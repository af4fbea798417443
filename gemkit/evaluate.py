"""Evaluation runs: many episodes of many env ids, saved in order as they finish, resumable.

A run is a run-store folder (`gemkit.runstore`):

    DIR/run.json        the settings (env ids, policy, model, sampling, seed, ...)
    DIR/episodes.jsonl  finished episodes, one `EpisodeRecord` per line, in (id, k) order
    DIR/errors.jsonl    episodes that ended in an error (run again on resume)
    DIR/summary.json    the per-id figures, written at the end

Episode k of an id is played with seed `seed + k` by a policy made for that episode (a
built-in policy seeded with the same seed; its stream shares no draws with the env's), so
what an episode holds depends on (seed, k) only: not on the concurrency, the order episodes
finish in, or where a run was interrupted. Episodes are committed in k order, so a killed
run resumed writes the same bytes an uninterrupted run writes.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from gemkit.policy import Policy
from gemkit.records.episodes import EpisodeRecord
from gemkit.rollout import Episode, play_in_order, summarize
from gemkit.runstore import MAX_FAILURES, RecordFile, RunStore

EPISODES_FILE = "episodes.jsonl"
ERRORS_FILE = "errors.jsonl"
SUMMARY_FILE = "summary.json"
#: an episode starts only within this many concurrency slots of the oldest unsaved one, so
#: a slow episode holds back at most this many finished ones (lost if the run is killed)
WINDOW = 4


def episode_key(env_id: str, k: int) -> str:
    """The resume key of episode `k` of `env_id`."""
    return f"{env_id}#{k}"


def _check_episode(raw: dict[str, Any], where: str) -> None:
    EpisodeRecord.parse(raw, where)


EPISODES = RecordFile(EPISODES_FILE, key=lambda r: r["key"], check=_check_episode)
ERRORS = RecordFile(ERRORS_FILE, key=lambda r: r["key"], check=_check_episode, settles=False)


async def play(
    env_id: str,
    indices: Sequence[int],
    new_policy: Callable[[int], Policy],
    *,
    concurrency: int = 16,
    **options: Any,
) -> None:
    """`rollout.play_in_order` (same arguments) that holds back at most `WINDOW` x
    `concurrency` finished episodes behind a slow early one."""
    await play_in_order(
        env_id, indices, new_policy, concurrency=concurrency, window=WINDOW * concurrency, **options
    )


def run_summary(
    env_ids: Sequence[str], n: int, done: Mapping[str, dict[str, Any]], failed: set[str]
) -> dict[str, dict[str, float]]:
    """Per id: the figures of its finished episodes, those missing, and those that failed."""
    summary = {}
    for env_id in env_ids:
        keys = [episode_key(env_id, k) for k in range(n)]
        rows = [done[key] for key in keys if key in done]
        figures = summarize([Episode.from_dict(r) for r in rows])
        figures["missing"] = n - len(rows)
        # episodes whose last try failed (kept in errors.jsonl, run again on resume)
        figures["errors"] = sum(key in failed and key not in done for key in keys)
        summary[env_id] = figures
    return summary


async def evaluate(
    env_ids: Sequence[str],
    policy_factory: Callable[[str, int], Policy],
    n: int,
    out_dir: str | Path,
    *,
    seed: int = 0,
    concurrency: int = 16,
    resume: bool = False,
    make_kwargs: Callable[[str], dict[str, Any]] | None = None,
    on_episode: Callable[[str, int, Episode], None] | None = None,
    on_start: Callable[[Mapping[str, dict[str, Any]]], None] | None = None,
    policy_info: Callable[[int], Mapping[str, Any]] | None = None,
    settings: Mapping[str, Any] | None = None,
    info: Mapping[str, Any] | None = None,
    kind: str = "eval",
    max_failures: int = MAX_FAILURES,
) -> dict[str, dict[str, float]]:
    """Run `n` episodes of each id (episode k: seed `seed + k`, `policy_factory(id, seed + k)`).

    Each finished episode is saved, in k order, to `out_dir/episodes.jsonl` with
    `policy_info(seed + k)` (who played it) as its `policy`. `settings` (what changes the
    results: the policy, model, sampling, ...) go into the run's manifest with the ids and the
    seed; `resume=True` continues a run made with the same ones, skipping its finished
    episodes, and refuses one made with others, naming them. Episodes that ended in an error
    go to `errors.jsonl` and run again on resume; `max_failures` in a row stop the run
    (`RunStopped`). `on_start(done)` is called with the finished episodes found on disk.
    Returns the per-id summary, also saved as `summary.json`.
    """
    store = RunStore(
        out_dir,
        kind,
        {"env_ids": list(env_ids), "seed": seed, **(settings or {})},
        [EPISODES, ERRORS],
        resume=resume,
        info={"episodes": n, "concurrency": concurrency, **(info or {})},
        failures=ERRORS_FILE,
        max_failures=max_failures,
        resume_hint="run the same command with --resume",
    )
    with store:
        done = {r["key"]: r for r in store.records(EPISODES_FILE)}
        if on_start is not None:
            on_start(done)
        for env_id in env_ids:

            def commit(k: int, ep: Episode, env_id: str = env_id) -> None:
                if policy_info is not None:
                    ep.policy = dict(policy_info(seed + k))
                row = ep.to_record(key=episode_key(env_id, k), index=k).to_json()
                if ep.error:
                    store.fail(row, f"{env_id} episode {k}: {ep.error}")
                else:
                    store.append(EPISODES_FILE, row)
                    done[row["key"]] = row
                if on_episode is not None:
                    on_episode(env_id, k, ep)

            await play(
                env_id,
                [k for k in range(n) if episode_key(env_id, k) not in done],
                functools.partial(policy_factory, env_id),
                seed=seed,
                concurrency=concurrency,
                make_kwargs=make_kwargs(env_id) if make_kwargs else None,
                commit=commit,
            )
        failed = {r["key"] for r in store.records(ERRORS_FILE)}
        summary = run_summary(env_ids, n, done, failed)
        store.write_json(SUMMARY_FILE, summary)
    return summary
