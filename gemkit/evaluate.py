"""Evaluation runs: many episodes of many env ids, saved as they finish, resumable."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from gemkit.errors import GemkitError
from gemkit.policy import Policy
from gemkit.rollout import Episode, arun_episodes, summarize

EPISODES_FILE = "episodes.jsonl"
ERRORS_FILE = "errors.jsonl"
SUMMARY_FILE = "summary.json"


def episode_key(env_id: str, k: int) -> str:
    """The resume key of episode `k` of `env_id`."""
    return f"{env_id}#{k}"


def read_done(path: Path) -> dict[str, dict[str, Any]]:
    """Finished episodes in a results file by key; a torn last line (a killed run) is dropped."""
    done: dict[str, dict[str, Any]] = {}
    if not path.exists():
        return done
    raw = path.read_bytes()
    good_end = 0
    for line in raw.splitlines(keepends=True):
        if not line.endswith(b"\n"):
            break
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            break
        done[record["key"]] = record
        good_end += len(line)
    if good_end != len(raw):  # cut the torn tail so appends start on a clean line
        with path.open("r+b") as f:
            f.truncate(good_end)
    return done


class ResultsWriter:
    """Appends one JSON line per finished episode, flushed and fsynced (a kill loses nothing)."""

    def __init__(self, path: Path):
        self.path = path
        self._f = path.open("a")

    def write(self, record: dict[str, Any]) -> None:
        """Append and sync one record (a record's JSON form, `EpisodeRecord.to_json()`)."""
        self._f.write(json.dumps(record, default=str) + "\n")
        self._f.flush()
        os.fsync(self._f.fileno())

    def close(self) -> None:
        """Close the file."""
        self._f.close()


async def evaluate(
    env_ids: Sequence[str],
    policy_factory: Callable[[str], Policy],
    n: int,
    out_dir: str | Path,
    *,
    seed: int = 0,
    concurrency: int = 16,
    resume: bool = False,
    make_kwargs: Callable[[str], dict[str, Any]] | None = None,
    on_episode: Callable[[str, int, Episode], None] | None = None,
) -> dict[str, dict[str, float]]:
    """Run `n` episodes of each id (episode k with seed `seed + k`), saving each as it ends.

    With `resume=True`, episodes already in `out_dir/episodes.jsonl` are skipped, so a killed
    run finishes where it stopped with no episode lost or repeated. Episodes that ended in an
    error (for example the model server gave up) go to `errors.jsonl` and run again on resume.
    Returns the per-id summary, also saved as `summary.json`.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    results = out / EPISODES_FILE
    done = read_done(results)
    if done and not resume:
        raise GemkitError(
            f"{out} already holds {len(done)} finished episodes; pass --resume to continue "
            "that run, or choose another --out"
        )
    writer, errors = ResultsWriter(results), ResultsWriter(out / ERRORS_FILE)
    try:
        for env_id in env_ids:
            skip = [k for k in range(n) if episode_key(env_id, k) in done]

            def record(k: int, ep: Episode, env_id: str = env_id) -> None:
                row = ep.to_record(key=episode_key(env_id, k), index=k).to_json()
                (errors if ep.error else writer).write(row)
                if not ep.error:
                    done[row["key"]] = row
                if on_episode is not None:
                    on_episode(env_id, k, ep)

            await arun_episodes(
                env_id,
                lambda env_id=env_id: policy_factory(env_id),
                n,
                seed=seed,
                concurrency=concurrency,
                make_kwargs=make_kwargs(env_id) if make_kwargs else None,
                on_episode=record,
                skip=skip,
            )
    finally:
        writer.close()
        errors.close()
    summary = {}
    for env_id in env_ids:
        rows = [done[k] for k in (episode_key(env_id, i) for i in range(n)) if k in done]
        summary[env_id] = summarize([Episode.from_dict(r) for r in rows])
        summary[env_id]["missing"] = n - len(rows)
    (out / SUMMARY_FILE).write_text(json.dumps(summary, indent=2))
    return summary
