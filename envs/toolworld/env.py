"""`toolworld:` envs: synthesized <database, tools, task, verifier> tuples as tool-use episodes.

Each episode is one task record (`gemkit.records.tasks.TaskRecord`). The tools (the
category's, pointed at the task's database) are exposed through a `ToolEnvWrapper` with
OpenAI schemas; the episode ends when the agent calls `submit_result(...)` (a tool result
that is the episode's final answer) or gives a final answer without a tool call. Reward is
1 when the verifier passes (or the fraction of constraints satisfied with
`partial_credit=True`); `info["violations"]` lists what the answer broke, each naming its
constraint.

This module plays records; it makes none. The built-in sets behind the registered ids are
built by `gemkit.synth.tasks.builtin_sets`, which registers those ids.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

from gemkit.core import Env, ResetResult, StepResult
from gemkit.envs.toolworld.categories import played_category
from gemkit.envs.toolworld.category import Database, ToolWorldError, task_from_record
from gemkit.items import pick_index
from gemkit.records.base import RecordError, per_file
from gemkit.records.tasks import TaskRecord
from gemkit.runstore import RunStoreError, read_lines
from gemkit.tools.base import Tool
from gemkit.tools.wrapper import ToolEnvWrapper

TASKS_FILE = "tasks.jsonl"

__all__ = [
    "TASKS_FILE",
    "ToolWorldEnv",
    "ToolWorldError",
    "ToolWorldWrapper",
    "load_records",
    "make_baseline",
    "make_toolworld",
]


def load_records(path: str | Path) -> list[TaskRecord]:
    """The task records of a synthesized folder (or of one `tasks.jsonl` file).

    A torn last line (a run killed mid-write) is skipped; any other line that is not a task
    record of this schema version is an error naming the file and line. Each version of the
    file is read once per process; the records are shared, read-only.
    """
    p = Path(path)
    file = p if p.is_file() else p / TASKS_FILE
    if not file.exists():
        raise ToolWorldError(
            f"{p} holds no {TASKS_FILE}; point path= at a folder written by `gemkit synth tasks`"
        )
    return list(per_file(file, _read_records))


def _read_records(file: Path) -> list[TaskRecord]:
    try:
        records = [TaskRecord.parse(raw, f"{file}, line {n}") for n, raw in read_lines(file)]
    except (RecordError, RunStoreError) as e:
        raise ToolWorldError(str(e)) from None
    if not records:
        raise ToolWorldError(f"{file} holds no complete task record")
    return records


def as_records(records: Sequence[TaskRecord | dict[str, Any]]) -> list[TaskRecord]:
    """Records given in memory, as models (dicts are checked against the schema)."""
    out = []
    for i, r in enumerate(records):
        if isinstance(r, TaskRecord):
            out.append(r)
            continue
        try:
            out.append(TaskRecord.parse(r, f"records[{i}]"))
        except RecordError as e:
            raise ToolWorldError(str(e)) from None
    return out


def is_dataset_folder(path: Path) -> bool:
    """Whether `path` is a folder `datasets` saved (`save_to_disk`), not a synthesis folder."""
    return path.is_dir() and (
        (path / "dataset_info.json").is_file() or (path / "dataset_dict.json").is_file()
    )


def _is_dataset(value: Any) -> bool:
    return hasattr(value, "features") and hasattr(value, "column_names")


def records_of_dataset(dataset: Any) -> tuple[list[TaskRecord], Path]:
    """The task records of a `datasets` export (loaded from disk, a copy of it, or the Hub)
    and the folder their databases are in: each row's `database_sqlite` is written once into
    gemkit's cache, named by its SHA-256, and the record pointed at it."""
    import hashlib

    from gemkit.cache import cache_dir
    from gemkit.records.export import from_row

    if isinstance(getattr(dataset, "column_names", None), dict):  # a DatasetDict
        splits = list(dataset)
        if len(splits) != 1:
            raise ToolWorldError(
                f"this dataset has the splits {splits}; pass one of them, e.g. records=ds[{splits[0]!r}]"
            )
        dataset = dataset[splits[0]]
    if "database_sqlite" not in dataset.column_names:
        raise ToolWorldError(
            "this dataset carries no databases (no database_sqlite column): export it with "
            "`gemkit synth tasks` of this gemkit, or play its folder with path="
        )
    root = cache_dir("toolworld-databases")
    root.mkdir(parents=True, exist_ok=True)
    out = []
    for i, row in enumerate(dataset):
        data = row.get("database_sqlite")
        if not data:
            raise ToolWorldError(f"row {i} of the dataset has no database_sqlite")
        try:
            record = from_row(TaskRecord, row, f"row {i}")
        except RecordError as e:
            raise ToolWorldError(str(e)) from None
        name = hashlib.sha256(data).hexdigest() + ".sqlite"
        target = root / name
        if not target.exists():  # written aside and renamed: a reader never sees half a file
            tmp = root / f".{name}.{os.getpid()}.tmp"
            tmp.write_bytes(data)
            os.replace(tmp, target)
        out.append(record.model_copy(update={"database": name}))
    return out, root


class ToolWorldEnv(Env):
    """The inner env: one task record per episode, its answer checked by the verifier.

    Build it with `path=` (a synthesized folder, or its `datasets` export), or `records=`
    plus `root=` (records in memory; their database paths are relative to `root`), or
    `records=` a loaded `datasets` export, which carries its databases. `level=` keeps only tasks of
    that level. The env owns the episode's tools (`episode_tools`): the category's, pointed
    at the task's database, or a model-written program's.
    """

    def __init__(
        self,
        category: str | None = None,
        *,
        path: str | Path | None = None,
        records: Sequence[TaskRecord | dict[str, Any]] | None = None,
        root: str | Path | None = None,
        level: int | None = None,
        partial_credit: bool = False,
    ):
        if records is None:
            if path is None:
                raise ToolWorldError(
                    "a toolworld env needs path= (a folder written by `gemkit synth tasks`) "
                    "or records= and root=; the built-in sets come with the registered ids, "
                    "e.g. gemkit.make('toolworld:TripPlanning-v0')"
                )
            folder = Path(path)
            if is_dataset_folder(folder):
                import datasets

                loaded, root = records_of_dataset(datasets.load_from_disk(str(folder)))
            else:
                loaded = load_records(folder)
                root = folder if folder.is_dir() else folder.parent
        elif _is_dataset(records):
            loaded, root = records_of_dataset(records)
        else:
            loaded = as_records(records)
        if root is None:
            raise ToolWorldError("records= needs root= (the folder their database paths are in)")
        if not loaded:
            raise ToolWorldError("records= is empty: pass at least one task record")
        if level is not None:
            levels = sorted({r.level for r in loaded})
            loaded = [r for r in loaded if r.level == level]
            if not loaded:
                raise ToolWorldError(
                    f"no task of level {level} in this set; it has levels {levels}"
                )
        categories = {r.category for r in loaded}
        if len(categories) > 1:
            raise ToolWorldError(f"one category per env, found {sorted(categories)}")
        if category is not None and categories != {category}:
            raise ToolWorldError(
                f"these are {sorted(categories)[0]} tasks, not {category} tasks; "
                "pass the folder of that category, or leave category out"
            )
        self.category = played_category(loaded[0].category)
        self.records = loaded
        self.root = Path(root)
        self.partial_credit = partial_credit
        self.record: TaskRecord | None = None
        self.task: Any = None
        self._db: Database | None = None
        self.runtime: Any = None
        self.done = False
        self._catalog = self.category.tools(self.db)

    # -- what the tools see -----------------------------------------------------------------

    def db(self) -> Database:
        """The current episode's database (the tools call this at each call)."""
        if self._db is None:
            raise ToolWorldError("no episode yet: call reset() before using the tools")
        return self._db

    def episode_tools(self) -> list[Tool]:
        """The tools of the current task: those its record lists (a harder task lists more),
        every tool of the category before the first reset, or a model-written program's."""
        if self.runtime is not None:
            return self.runtime.tools()
        by_name = {t.name: t for t in self._catalog}
        names = [t.name for t in self.record.tools] if self.record else []
        return [by_name[n] for n in names if n in by_name] or list(self._catalog)

    # -- the episode ------------------------------------------------------------------------

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> ResetResult:
        """Pick a task (`options={"index": i}` or at random) and show its prompt."""
        super().reset(seed=seed)
        options = options or {}
        try:
            index = pick_index(options, len(self.records), self.np_random, seed)
        except IndexError as e:
            raise ToolWorldError(f"task {e}") from None
        self.record = self.records[index]
        if self.runtime is not None:
            self.runtime.close()
            self.runtime = None
        if self.record.verifier.kind == "code":
            from gemkit.envs.toolworld.program import CodeRuntime, code_task

            # a model-written program: its tools and verifier run in the sandbox
            self.runtime = CodeRuntime(self.record, self.root / self.record.database)
            self.task = code_task(self.record)
        else:
            self.task = task_from_record(self.record)
        path = self.root / self.record.database
        if self._db is None or self._db.path != path:  # the next task of the same database
            if self._db is not None:  # keeps its read-only connection and the verifier's cache
                self._db.close()
            self._db = Database(path)
        self.done = False
        info = {
            "task_id": self.record.id,
            "level": self.record.level,
            "constraints": list(self.record.constraints),
        }
        return self.task.prompt, info

    def step(self, action: Any) -> StepResult:
        """Check a final answer (text, or the data `submit_result` was given); the episode ends."""
        if self.task is None:
            raise ToolWorldError("call reset() before step()")
        if self.done:
            return "The episode is over; call reset().", 0.0, True, False, {"success": False}
        if self.runtime is not None:
            verdict = self.runtime.verify(action)
        else:
            verdict = self.category.verify(self.db(), self.task, action)
        self.done = True
        reward = 1.0 if verdict.passed else (verdict.score if self.partial_credit else 0.0)
        if verdict.passed:
            obs = "Correct: the answer satisfies every constraint."
        else:
            obs = "Not accepted. Violated constraints:\n" + "\n".join(
                f"- {v}" for v in verdict.violations
            )
        info = {
            "success": verdict.passed,
            "violations": verdict.violations,
            "failed_constraints": verdict.failed,
            "score": verdict.score,
            "task_id": self.record.id if self.record else None,
        }
        return obs, float(reward), True, False, info

    def close(self) -> None:
        """Close the database (and a code record's sandbox)."""
        if self._db is not None:
            self._db.close()
        if self.runtime is not None:
            self.runtime.close()

    def __deepcopy__(self, memo: dict[int, Any]) -> ToolWorldEnv:
        new = copy.copy(self)
        memo[id(self)] = new
        shared = ("category", "records", "_catalog")
        new.__dict__ = copy.deepcopy(
            {k: v for k, v in self.__dict__.items() if k not in shared}, memo
        )
        new.category, new.records = self.category, self.records
        new._catalog = new.category.tools(new.db)  # the copy's tools read the copy's database
        return new


class ToolWorldWrapper(ToolEnvWrapper):
    """A `ToolEnvWrapper` that offers each episode the tools of its task.

    The tools come from the inner `ToolWorldEnv` at each reset (`episode_tools`); a
    `submit_result` call ends the episode through the tool contract's final answer, and a
    finished episode runs no more tools and takes no second answer.
    """

    closed_after_end = True

    def episode_tools(self, info: dict[str, Any]) -> list[Tool]:
        """The task's own tools (a harder task lists more; a model's program has its own)."""
        return self._world.episode_tools()

    @property
    def _world(self) -> ToolWorldEnv:
        world = self.env.unwrapped
        if not isinstance(world, ToolWorldEnv):
            raise ToolWorldError("ToolWorldWrapper wraps a ToolWorldEnv")
        return world

    def clone(self) -> ToolWorldWrapper:
        """A copy whose tools point at the copy's own inner env."""
        new = cast(ToolWorldWrapper, super().clone())  # a deep copy of this wrapper
        new.tools, new._by_name = [], {}
        new._add_tools(new._world.episode_tools())
        return new


def make_toolworld(
    category: str | None = None,
    *,
    path: str | Path | None = None,
    records: Sequence[TaskRecord | dict[str, Any]] | None = None,
    root: str | Path | None = None,
    level: int | None = None,
    partial_credit: bool = False,
    max_tool_uses: int | None = 400,
    **wrapper_kwargs: Any,
) -> ToolWorldWrapper:
    """A toolworld env: the task env wrapped with its tools (a folder, or records + root).

    `category`, when given, must be the records' category.
    """
    inner = ToolWorldEnv(
        category, path=path, records=records, root=root, level=level, partial_credit=partial_credit
    )
    return ToolWorldWrapper(
        inner, inner.episode_tools(), max_tool_uses=max_tool_uses, **wrapper_kwargs
    )


def make_baseline(category: str = "trip_planning", seed: int | None = None, **_: Any) -> Any:
    """The category's baseline agent (the registry's `expert` slot for these envs)."""
    from gemkit.envs.toolworld.baselines import baseline_for

    return baseline_for(category, seed=seed)
