"""A task-synthesis run: records written as they are made, resumable, filtered by pass@k.

Layout of an output folder (a run-store folder, `gemkit.runstore`):

    DIR/run.json         the settings; a resumed run with other ones is refused, naming them
    DIR/tasks.jsonl      one record per kept task (append + fsync, in id order)
    DIR/rejected.jsonl   ids tried and not kept (no task, or 0 passes in k tries), with why
    DIR/progress.log     one record per event (each model reply in LLM mode, each task
                         settled), to follow a run without a terminal: `tail -f DIR/progress.log`;
                         a record is a timestamped line, and the further lines of a multi-line
                         message (a repair's whole error) follow it indented
    DIR/db/<id>.sqlite   each task's database
    DIR/dataset/         the records as a Hugging Face `datasets` folder (at the end)

Task `i` of a run has the id `<category>-s<seed>-<i:06d>` and its own generator seeded from
`(seed, i)`, so a killed run started again skips what it wrote, drops a torn last line, and
produces the same records it would have produced uninterrupted. A run holds the folder's
lock: a second run on the same folder is refused while the first one writes.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
import time
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from gemkit.envs.toolworld.category import task_from_record
from gemkit.envs.toolworld.env import TASKS_FILE
from gemkit.errors import GemkitError
from gemkit.records.base import RecordError
from gemkit.records.tasks import Code, PassAtK, TaskRecord, TaskStats, TaskText, ToolSchema
from gemkit.runstore import RecordFile, RunStore, RunStoreError, append_log, is_storage_error
from gemkit.runstore import storage_error as _storage_error
from gemkit.synth.tasks.base import Synthesized, TaskGenerator, TaskSynthesisError, synthesize
from gemkit.synth.tasks.generators import get_category

log = logging.getLogger(__name__)

__all__ = [
    "RunConfig",
    "RunSummary",
    "make_record",
    "pass_at_k",
    "run_synthesis",
    "task_from_record",
]

T = TypeVar("T")

REJECTED_FILE = "rejected.jsonl"
PROGRESS_FILE = "progress.log"
DB_DIR = "db"


@dataclass
class RunConfig:
    """What to synthesize: category, how many tasks, levels, pass@k, where, how."""

    category: str = "trip_planning"
    n: int = 10
    out: Path = Path("synth-tasks")
    min_level: int = 1
    max_level: int = 4
    k: int = 4
    seed: int = 0
    workers: int = 1
    executor: str = "process"  # "process", or "ray" to spread the work over a Ray cluster
    ray_address: str | None = None
    export: bool = True
    llm: str | None = None
    model: str | None = None
    max_attempts: int | None = None
    max_repairs: int = 3
    max_tokens: int = 1536  # the longest program reply asked of the model
    timeout: float | None = None  # seconds the model server has per request (LLMClient's)
    #: tries of the random but tool-using baseline per task (0: not run)
    random_k: int = 16

    def __post_init__(self) -> None:
        self.out = Path(self.out)
        if self.n < 0:
            raise TaskSynthesisError(f"-n must be >= 0, got {self.n}")
        if not 1 <= self.min_level <= self.max_level:
            raise TaskSynthesisError(
                f"levels must satisfy 1 <= min-level <= max-level, got {self.min_level}, "
                f"{self.max_level}"
            )
        if self.k < 0:
            raise TaskSynthesisError(f"--k must be >= 0 (0 skips the pass@k filter), got {self.k}")
        if self.random_k < 0:
            raise TaskSynthesisError(
                f"--random-k must be >= 0 (0 skips the random baseline), got {self.random_k}"
            )
        if self.workers < 1:
            raise TaskSynthesisError(f"--workers must be >= 1, got {self.workers}")
        if self.executor not in ("process", "ray"):
            raise TaskSynthesisError(
                f"--executor must be 'process' or 'ray', got {self.executor!r}"
            )
        if self.max_tokens < 1:
            raise TaskSynthesisError(f"--max-tokens must be >= 1, got {self.max_tokens}")
        if self.llm and not self.model:
            raise TaskSynthesisError("--llm needs --model (the model name the server serves)")
        get_category(self.category)  # unknown names fail here, with the known ones listed

    @property
    def attempts(self) -> int:
        """How many task ids may be tried to keep `n` tasks (`max_attempts`, default 3N)."""
        return self.max_attempts if self.max_attempts is not None else 3 * self.n


def task_id(category: str, seed: int, index: int) -> str:
    """The deterministic id of task `index` of a run."""
    return f"{category}-s{seed}-{index:06d}"


def target_level(config: RunConfig, index: int) -> int:
    """The level task `index` is hardened to (uniform over the run's levels)."""
    rng = np.random.default_rng([config.seed, index, 7])
    return int(rng.integers(config.min_level, config.max_level + 1))


def make_record(
    category: TaskGenerator, syn: Synthesized, tid: str, database: str, seed: list[int]
) -> TaskRecord:
    """The record of one synthesized task (its database lives at `database`)."""
    task = syn.task
    return TaskRecord(
        id=tid,
        category=category.name,
        level=task.level,
        database=database,
        tools=[ToolSchema(**t) for t in category.tool_schemas(task.tools)],
        task=TaskText(prompt=task.prompt, answer_format=task.answer_format, spec=task.spec),
        constraints=task.constraints,
        verifier=Code(kind="builtin", ref=category.verifier_ref()),
        solution=Code(kind="builtin", ref=category.solution_ref()),
        reference_answer=syn.reference_answer,
        stats=TaskStats(
            n_valid_solutions=syn.n_valid,
            n_answers=syn.history[-1]["n_answers"],
            valid_fraction=syn.history[-1]["valid_fraction"],
        ),
        history=syn.history,
        seed=seed,
    )


# -- pass@k ---------------------------------------------------------------------------------


def pass_at_k(
    record: TaskRecord,
    root: Path,
    k: int,
    *,
    seed: int = 0,
    policy_factory: Callable[[int], Any] | None = None,
    max_steps: int = 64,
) -> int:
    """Play the task k times through its `toolworld:` env; return how many tries passed.

    The default policy is the category's baseline agent, seeded per try. The tries run on
    their own event loop, so this works from sync code called inside a running loop too
    (a built-in set made when `gemkit run` first makes its env).
    """
    from gemkit.envs.toolworld.baselines import baseline_for
    from gemkit.envs.toolworld.env import make_toolworld
    from gemkit.rollout import run_episode

    env = make_toolworld(records=[record], root=root)

    async def play() -> int:
        passes = 0
        for i in range(k):
            policy = (
                policy_factory(i) if policy_factory else baseline_for(record.category, seed + i)
            )
            episode = await run_episode(env, policy, env_id=record.id, seed=i, max_steps=max_steps)
            if episode.error:
                log.warning("pass@k try %d of %s failed: %s", i, record.id, episode.error)
            passes += int(episode.success)
            closer = getattr(getattr(policy, "client", None), "close", None)
            if closer is not None:  # an LLM policy's HTTP session
                await closer()
        return passes

    try:
        return run_to_end(play())
    finally:
        env.unwrapped.close()


def run_to_end(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to its end from sync code: here, or on a worker thread's own loop when
    the calling thread's loop is running (where `asyncio.run` cannot start a second one)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="gemkit-pass-at-k") as ex:
        return ex.submit(asyncio.run, coro).result()


# -- one task -------------------------------------------------------------------------------


@dataclass
class Outcome:
    """What became of one task id: its record, or why it was not kept."""

    index: int
    id: str
    record: TaskRecord | None = None
    reason: str = ""
    levels: list[int] = field(default_factory=list)


def synthesize_one(config: RunConfig, index: int) -> Outcome:
    """Synthesize, record and filter task `index` (runs in a worker process)."""
    category = get_category(config.category)
    tid = task_id(config.category, config.seed, index)
    rel = f"db/{tid}.sqlite"
    db_path = config.out / rel
    rng = np.random.default_rng([config.seed, index])
    level = target_level(config, index)
    if config.llm:
        from gemkit.synth.tasks.llm import synthesize_with_llm

        def note(line: str) -> None:
            append_progress(config.out, f"{tid} (target level {level}): {line}")

        try:
            record, ended = synthesize_with_llm(
                config, category, tid, db_path, rel, level, rng, note=note
            )
        except GemkitError as e:  # the endpoint failed (down, too slow): stop, resumable
            db_path.unlink(missing_ok=True)
            raise TaskSynthesisError(
                f"task {tid}: the LLM endpoint failed ({e}); the records so far are saved, "
                "run the same command with --resume"
            ) from e
        if record is None:
            db_path.unlink(missing_ok=True)
            return Outcome(index, tid, reason=f"the model's code never verified: {ended}")
    else:
        syn = synthesize(category, db_path, rng, level)
        if syn is None:
            db_path.unlink(missing_ok=True)
            return Outcome(index, tid, reason="no solvable task on this database")
        record = make_record(category, syn, tid, rel, [config.seed, index])
    record.stats.random_baseline = random_baseline(record, config, index)
    if config.k > 0:
        factory = None
        if config.llm:
            factory = _llm_policy_factory(config)
        passes = pass_at_k(
            record,
            config.out,
            config.k,
            seed=config.seed * 1_000_003 + index * 101,
            policy_factory=factory,
        )
        record.stats.pass_at_k = PassAtK(k=config.k, passes=passes)
        if passes == 0:
            db_path.unlink(missing_ok=True)
            return Outcome(index, tid, reason=f"0 passes in {config.k} tries")
    return Outcome(index, tid, record=record)


def random_baseline(record: TaskRecord, config: RunConfig, index: int) -> PassAtK | None:
    """How many of `config.random_k` tries an agent that lists items with the tools and picks
    at random passes (None: not run, or a model-written task, whose tools it cannot read)."""
    from gemkit.envs.toolworld.baselines import random_baseline_for

    seed = config.seed * 1_000_003 + index * 101 + 7
    if config.random_k == 0 or record.verifier.kind != "builtin":
        return None
    if random_baseline_for(record.category, seed) is None:
        return None
    passes = pass_at_k(
        record,
        config.out,
        config.random_k,
        seed=seed,
        policy_factory=lambda i: random_baseline_for(record.category, seed + i),
    )
    return PassAtK(k=config.random_k, passes=passes)


def _llm_policy_factory(config: RunConfig) -> Callable[[int], Any]:
    from gemkit.llm import LLMClient, LLMPolicy

    def factory(i: int) -> Any:
        client = LLMClient(
            base_url=config.llm, model=config.model, seed=config.seed + i, timeout=config.timeout
        )
        return LLMPolicy(client)

    return factory


# -- the files ------------------------------------------------------------------------------


def _check_task(raw: dict[str, Any], where: str) -> None:
    try:
        TaskRecord.parse(raw, where)
    except RecordError as e:
        raise TaskSynthesisError(f"{e}; resume needs a folder this gemkit wrote") from None


def _check_rejection(raw: dict[str, Any], where: str) -> None:
    if not isinstance(raw.get("id"), str):
        raise TaskSynthesisError(f"{where}: not a rejected task id (expected {{id, reason}})")


TASKS = RecordFile(TASKS_FILE, key=lambda r: r["id"], check=_check_task)
REJECTED = RecordFile(REJECTED_FILE, key=lambda r: r["id"], check=_check_rejection)


def settings_of(config: RunConfig) -> dict[str, Any]:
    """The settings that decide a run's records (its manifest; a resume must match them).

    `n`, the attempts, the workers and the endpoint's address do not change what task `i`
    is, so a resumed run may change them.
    """
    return {
        "category": config.category,
        "seed": config.seed,
        "min_level": config.min_level,
        "max_level": config.max_level,
        "k": config.k,
        "llm": bool(config.llm),
        "model": config.model if config.llm else None,
        "max_repairs": config.max_repairs if config.llm else None,
        "max_tokens": config.max_tokens if config.llm else None,
        "random_k": config.random_k,
    }


def append_progress(out: Path, message: str) -> None:
    """Append a timestamped record to the run's progress log (one write: workers may share it).

    A multi-line message is kept whole: its further lines follow, indented by four spaces.
    """
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
    lines = message.strip("\n").splitlines() or [""]
    append_log(
        out / PROGRESS_FILE, "\n".join([f"{stamp} {lines[0]}", *(f"    {x}" for x in lines[1:])])
    )


# -- the run --------------------------------------------------------------------------------


@dataclass
class RunSummary:
    """The outcome of a run: kept records (old and new), rejections, and per-level figures."""

    out: Path
    #: the kept records, each in its JSON form (`TaskRecord.to_json()`)
    records: list[dict[str, Any]]
    rejected: int
    new: int
    resumed: int

    def by_level(self) -> list[dict[str, Any]]:
        """Per level: kept, mean valid answers, mean valid fraction, the pass@k rate of the
        category's baseline, and the pass rate of the random but tool-using baseline (its
        tries passed over its tries: the curve that must fall, from at most 10% at level 1)."""
        rows = []
        for level in sorted({r["level"] for r in self.records}):
            rs = [r for r in self.records if r["level"] == level]
            rows.append(
                {
                    "level": level,
                    "kept": len(rs),
                    "mean_valid": float(np.mean([r["stats"]["n_valid_solutions"] for r in rs])),
                    "mean_fraction": float(np.mean([r["stats"]["valid_fraction"] for r in rs])),
                    "pass_rate": _rate(r["stats"].get("pass_at_k") for r in rs),
                    "random_rate": _rate(r["stats"].get("random_baseline") for r in rs),
                    "random_tries": sum(
                        (r["stats"].get("random_baseline") or {}).get("k", 0) for r in rs
                    ),
                }
            )
        return rows


def _rate(tries: Iterable[dict[str, int] | None]) -> float | None:
    """Passes over tries of the recorded `PassAtK`s (None: none recorded)."""
    runs = [t for t in tries if t]
    total = sum(t["k"] for t in runs)
    return sum(t["passes"] for t in runs) / total if total else None


def run_synthesis(
    config: RunConfig, progress: Callable[[Outcome | None, int, int], None] | None = None
) -> RunSummary:
    """Synthesize until `config.n` tasks are kept (or attempts run out), resuming a folder.

    `progress(outcome, kept, n)` is called once at the start (outcome None) and after each
    task id is settled. A folder made with other settings, or in use by another run, is
    refused before anything in it changes.
    """
    out = config.out
    store = RunStore(
        out,
        "synth tasks",
        settings_of(config),
        [TASKS, REJECTED],
        info={
            "n": config.n,
            "max_attempts": config.max_attempts,
            "workers": config.workers,
            "executor": config.executor,
            "llm_url": config.llm,
            "timeout": config.timeout,
        },
    )
    with store:
        try:
            return _run(config, store, progress)
        except Exception as e:
            if not (is_storage_error(e) or isinstance(e, RunStoreError)):
                raise
            try:  # the database of the task being made when the disk filled up
                _drop_orphans(out, store.records(TASKS_FILE))
            except OSError:
                pass
            if isinstance(e, RunStoreError):
                raise
            raise _storage_error(e, out) from None


def _run(
    config: RunConfig,
    store: RunStore,
    progress: Callable[[Outcome | None, int, int], None] | None,
) -> RunSummary:
    out = config.out
    db = out / DB_DIR
    if db.is_symlink() or (db.exists() and not db.is_dir()):
        raise RunStoreError(f"{db} is not a folder (a link?); remove it or choose another --out")
    db.mkdir(exist_ok=True)
    records = store.records(TASKS_FILE)
    rejected = store.records(REJECTED_FILE)
    done = {r["id"] for r in records} | {r["id"] for r in rejected}
    resumed = len(records)
    kept = len(records)
    append_progress(
        out,
        f"run: {config.category}, keep {config.n} (have {kept}), at most {config.attempts} ids, "
        f"{'model ' + str(config.model) if config.llm else 'offline'}",
    )
    if progress:
        progress(None, kept, config.n)
    todo = [
        i for i in range(config.attempts) if task_id(config.category, config.seed, i) not in done
    ]
    new = 0
    n_rejected = len(rejected)

    def settle(o: Outcome) -> None:
        nonlocal kept, new, n_rejected
        if o.record is not None:
            store.append(TASKS_FILE, o.record.to_json())
            kept += 1
            new += 1
            append_progress(out, f"{o.id}: kept at level {o.record.level} ({kept}/{config.n})")
        else:
            store.append(REJECTED_FILE, {"id": o.id, "reason": o.reason})
            n_rejected += 1
            append_progress(out, f"{o.id}: rejected: {o.reason} ({kept}/{config.n} kept)")
        if progress:
            progress(o, kept, config.n)

    if kept < config.n and todo:
        if config.workers == 1 and config.executor != "ray":
            for i in todo:
                if kept >= config.n:
                    break
                settle(synthesize_one(config, i))
        else:
            _run_parallel(config, todo, settle, lambda: kept >= config.n)
    _drop_orphans(out, records)
    if config.export:
        export_datasets(out, records, store)
    return RunSummary(out, records, n_rejected, new, resumed)


def _drop_orphans(out: Path, records: list[dict[str, Any]]) -> None:
    # databases of tasks finished after the run was full, or torn by a kill, have no record
    keep = {(out / r["database"]).resolve() for r in records}
    for path in (out / "db").glob("*.sqlite*"):
        if path.resolve() not in keep:
            path.unlink(missing_ok=True)


def _run_parallel(
    config: RunConfig, todo: list[int], settle: Callable[[Outcome], None], full: Callable[[], bool]
) -> None:
    # results are committed in id order, so the kept set is the same as a 1-worker run's
    from gemkit.executor import get_executor

    work = functools.partial(synthesize_one, config)
    with get_executor(config.executor, config.workers, address=config.ray_address) as ex:
        for outcome in ex.map(work, todo):
            if full():
                break
            settle(outcome)


def export_datasets(
    out: Path,
    records: list[dict[str, Any]],
    store: RunStore | None = None,
    root: Path | None = None,
) -> Path | None:
    """Save the records as a Hugging Face `datasets` folder at `out/dataset`.

    The columns are `TaskRecord`'s fields, nested as in `tasks.jsonl`; only its free-form
    JSON fields (tool parameter schemas, the spec, the reference answer) are JSON text. Each
    row also carries its task's SQLite file (`database_sqlite`, read from `root`, by default
    `out`), so the folder alone, a copy of it or its `push_to_hub` upload, plays anywhere
    (`gemkit.make("toolworld:...", path=folder)`, or `records=` a loaded dataset). Within a
    run (`store`), the folder is written aside and renamed over the old one, so a failed
    export leaves the last one whole and no partial folder behind.
    """
    try:
        import datasets  # noqa: F401
    except ImportError:
        log.warning("`datasets` is not installed: skipping the export (pip install datasets)")
        return None
    from gemkit.records.export import save_dataset

    typed = [TaskRecord.parse(r) for r in records]
    where = Path(root) if root is not None else Path(out)
    files = {"database_sqlite": [_database_file(where, r) for r in typed]}
    if store is None:
        return save_dataset(typed, TaskRecord, Path(out) / "dataset", files)
    with store.replacing("dataset") as tmp:
        save_dataset(typed, TaskRecord, tmp, files)
    return Path(out) / "dataset"


def _database_file(root: Path, record: TaskRecord) -> bytes:
    path = root / record.database
    try:
        return path.read_bytes()
    except OSError as e:
        raise TaskSynthesisError(
            f"cannot export task {record.id}: its database {path} cannot be read "
            f"({e.strerror or e}); export from the folder that holds its db/"
        ) from None
