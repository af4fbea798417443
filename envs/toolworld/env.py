"""`toolworld:` envs: synthesized <database, tools, task, verifier> tuples as tool-use episodes.

Each episode is one task record. The tools (the category's, pointed at the task's database)
are exposed through a `ToolEnvWrapper` with OpenAI schemas; the episode ends when the agent
calls `submit_result(...)` or gives a final answer without a tool call. Reward is 1 when the
verifier passes (or the fraction of constraints satisfied with `partial_credit=True`);
`info["violations"]` lists what the answer broke, each naming its constraint.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from gemkit.core import Env, ResetResult, StepResult
from gemkit.envs.math.records import seeded_index
from gemkit.errors import GemkitError
from gemkit.tools.wrapper import ToolEnvWrapper

#: tasks in a built-in set, and the levels they spread over
BUILTIN_TASKS = 24
BUILTIN_MAX_LEVEL = 4
BUILTIN_VERSION = 1
#: pass@k tries of the baseline agent when the set is made
BUILTIN_K = 2


class ToolWorldError(GemkitError):
    """A toolworld env pointed at a folder that holds no usable tasks."""


def cache_root() -> Path:
    """Where built-in task sets are kept (`GEMKIT_CACHE_DIR`, else `~/.cache/gemkit`)."""
    base = os.environ.get("GEMKIT_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "gemkit"
    )
    return Path(base) / "toolworld"


def builtin_dir(category: str, *, n: int = BUILTIN_TASKS, seed: int = 0) -> Path:
    """The folder of a category's built-in task set, generated (seeded) on first use."""
    folder = cache_root() / f"{category}-v{BUILTIN_VERSION}-s{seed}-n{n}"
    if (folder / "tasks.jsonl").exists():
        return folder
    from gemkit.synth.tasks.run import RunConfig, run_synthesis

    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{category}-", dir=folder.parent))
    try:
        config = RunConfig(
            category=category,
            n=n,
            out=tmp,
            min_level=1,
            max_level=BUILTIN_MAX_LEVEL,
            k=BUILTIN_K,
            seed=seed,
            export=False,
        )
        run_synthesis(config)
        try:
            tmp.rename(folder)
        except OSError:  # another process finished first: keep theirs
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return folder


def load_records(path: str | Path) -> list[dict[str, Any]]:
    """The task records of a synthesized folder (or of one `tasks.jsonl` file)."""
    p = Path(path)
    file = p if p.is_file() else p / "tasks.jsonl"
    if not file.exists():
        raise ToolWorldError(
            f"{p} holds no tasks.jsonl; point path= at a folder written by `gemkit synth tasks`"
        )
    records = []
    for line in file.read_text(encoding="utf-8").splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a torn last line of an interrupted run
    if not records:
        raise ToolWorldError(f"{file} holds no complete task record")
    return records


class ToolWorldEnv(Env):
    """The inner env: one task record per episode, its answer checked by the verifier.

    Build it with `category=` (a built-in set), `path=` (a synthesized folder) or `records=`
    plus `root=` (records in memory). `level=` keeps only tasks of that level.
    """

    def __init__(
        self,
        category: str = "trip_planning",
        *,
        path: str | Path | None = None,
        records: list[dict[str, Any]] | None = None,
        root: str | Path | None = None,
        level: int | None = None,
        partial_credit: bool = False,
        builtin_seed: int = 0,
        builtin_n: int = BUILTIN_TASKS,
    ):
        from gemkit.synth.tasks import get_category

        if records is None:
            folder = (
                Path(path)
                if path is not None
                else builtin_dir(category, n=builtin_n, seed=builtin_seed)
            )
            records = load_records(folder)
            root = folder if folder.is_dir() else folder.parent
        if root is None:
            raise ToolWorldError("records= needs root= (the folder their database paths are in)")
        if not records:
            raise ToolWorldError("records= is empty: pass at least one task record")
        if level is not None:
            levels = sorted({r.get("level") for r in records})
            records = [r for r in records if r.get("level") == level]
            if not records:
                raise ToolWorldError(
                    f"no task of level {level} in this set; it has levels {levels}"
                )
        categories = {r["category"] for r in records}
        if len(categories) > 1:
            raise ToolWorldError(f"one category per env, found {sorted(categories)}")
        self.category = get_category(records[0]["category"])
        self.records = records
        self.root = Path(root)
        self.partial_credit = partial_credit
        self.record: dict[str, Any] | None = None
        self.task: Any = None
        self.submitted: Any = None
        self._db: Any = None
        self.runtime: Any = None
        self.done = False

    # -- what the tools see -----------------------------------------------------------------

    def db(self) -> Any:
        """The current episode's database (the tools call this at each call)."""
        if self._db is None:
            raise ToolWorldError("no episode yet: call reset() before using the tools")
        return self._db

    def submit(self, answer: Any) -> str:
        """Store the answer given to `submit_result`; the wrapper ends the episode."""
        self.submitted = answer
        return "Plan received; it will be checked now."

    # -- the episode ------------------------------------------------------------------------

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> ResetResult:
        """Pick a task (`options={"index": i}` or at random) and show its prompt."""
        from gemkit.synth.tasks.base import Database
        from gemkit.synth.tasks.run import task_from_record

        super().reset(seed=seed)
        options = options or {}
        index = options.get("index")
        if index is None:
            n = len(self.records)
            index = seeded_index(seed, n) if seed is not None else int(self.np_random.integers(n))
        if not 0 <= int(index) < len(self.records):
            raise ToolWorldError(f"task index {index} out of range 0..{len(self.records) - 1}")
        self.record = self.records[int(index)]
        if self.runtime is not None:
            self.runtime.close()
            self.runtime = None
        if self.record["verifier"]["kind"] == "code":
            from gemkit.synth.tasks.llm import CodeRuntime, code_task

            # a model-written program: its tools and verifier run in the sandbox
            self.runtime = CodeRuntime(
                self.record, self.root / self.record["database"], self.submit
            )
            self.task = code_task(self.record)
        else:
            self.task = task_from_record(self.record)
        if self._db is not None:
            self._db.close()
        self._db = Database(self.root / self.record["database"])
        self.submitted = None
        self.done = False
        info = {
            "task_id": self.record["id"],
            "level": self.record["level"],
            "constraints": list(self.record["constraints"]),
        }
        return self.task.prompt, info

    def step(self, action: Any) -> StepResult:
        """Check a final answer; the episode ends whatever it holds."""
        if self.task is None:
            raise ToolWorldError("call reset() before step()")
        if self.done:
            return "The episode is over; call reset().", 0.0, True, False, {"success": False}
        return self.finish(action)

    def finish(self, answer: Any) -> StepResult:
        """Verify `answer` and end the episode."""
        if self.runtime is not None:
            verdict = self.runtime.verify(answer)
        else:
            verdict = self.category.verify(self.db(), self.task, answer)
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
            "task_id": self.record["id"] if self.record else None,
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
        new.__dict__ = copy.deepcopy(
            {k: v for k, v in self.__dict__.items() if k not in ("category", "records")}, memo
        )
        new.category, new.records = self.category, self.records
        return new


class ToolWorldWrapper(ToolEnvWrapper):
    """A `ToolEnvWrapper` that offers each episode its task's tools and ends on `submit_result`.

    The wrapper holds the category's whole tool catalog; at each reset it exposes the tools
    the task's record lists (a harder task lists more), or, for a model-written task, the
    program's own tools.
    """

    def __init__(self, env: ToolWorldEnv, tools: list[Any], **kwargs: Any):
        super().__init__(env, tools, **kwargs)
        self._catalog = list(self.tools)

    def _episode_tools(self) -> list[Any]:
        inner: ToolWorldEnv = self.env.unwrapped  # type: ignore[assignment]
        if inner.runtime is not None:
            return inner.runtime.tools()
        by_name = {t.name: t for t in self._catalog}
        names = [t["name"] for t in inner.record["tools"]] if inner.record else []
        return [by_name[n] for n in names if n in by_name] or list(self._catalog)

    async def areset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> ResetResult:
        """Reset; swap in the task's tools before the prompt lists them."""
        obs, info = await super().areset(seed=seed, options=options)
        inner: ToolWorldEnv = self.env.unwrapped  # type: ignore[assignment]
        tools = self._episode_tools()
        if [t.name for t in tools] != [t.name for t in self.tools] or inner.runtime is not None:
            self.tools, self._by_name = [], {}
            self._add_tools(tools)
            obs = inner.task.prompt
            if self.instructions:
                obs = f"{obs}\n\n{self.instructions_text()}"
            info = {**info, "tools": self.schemas()}
        return obs, info

    async def astep(self, action: Any) -> StepResult:
        """Run tool calls; when one of them submitted an answer, verify it and end."""
        inner: ToolWorldEnv = self.env.unwrapped  # type: ignore[assignment]
        if inner.done:  # a finished episode runs no more tools and takes no second answer
            return inner.step(action)
        obs, reward, terminated, truncated, info = await super().astep(action)
        if inner.submitted is not None and not inner.done:
            fobs, freward, fterm, ftrunc, finfo = inner.finish(inner.submitted)
            return f"{obs}\n\n{fobs}", reward + freward, fterm, ftrunc, {**info, **finfo}
        return obs, reward, terminated, truncated, info

    def clone(self) -> ToolWorldWrapper:
        """A copy whose tools point at the copy's own inner env."""
        new = super().clone()
        inner = new.env.unwrapped
        new._catalog = inner.category.tools(inner.db, inner.submit)
        new.tools, new._by_name = [], {}
        new._add_tools(new._episode_tools())
        return new


def make_toolworld(
    category: str = "trip_planning",
    *,
    path: str | Path | None = None,
    records: list[dict[str, Any]] | None = None,
    root: str | Path | None = None,
    level: int | None = None,
    partial_credit: bool = False,
    max_tool_uses: int | None = 400,
    builtin_seed: int = 0,
    builtin_n: int = BUILTIN_TASKS,
    **wrapper_kwargs: Any,
) -> ToolWorldWrapper:
    """A toolworld env: the task env wrapped with its category's tools."""
    inner = ToolWorldEnv(
        category,
        path=path,
        records=records,
        root=root,
        level=level,
        partial_credit=partial_credit,
        builtin_seed=builtin_seed,
        builtin_n=builtin_n,
    )
    tools = inner.category.tools(inner.db, inner.submit)
    return ToolWorldWrapper(inner, tools, max_tool_uses=max_tool_uses, **wrapper_kwargs)


def make_baseline(category: str = "trip_planning", seed: int | None = None, **_: Any) -> Any:
    """The category's baseline agent (the registry's `expert` slot for these envs)."""
    from gemkit.synth.tasks.baselines import baseline_for

    return baseline_for(category, seed=seed)
