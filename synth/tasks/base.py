"""The category plugin contract and the propose → solve → verify → harden loop.

A `Category` builds a seeded SQLite database, exposes tools over it, proposes a level-1 task,
and knows how to harden a task (returning candidate next-level tasks). Its reference solution
is a source file run by `restrict.run_solution` with only a tools facade; its verifier and
its solution counter read the database directly (they are the trusted side).
"""

from __future__ import annotations

import copy
import importlib.util
import json
import re
import sqlite3
import threading
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from gemkit.errors import GemkitError
from gemkit.synth.tasks.restrict import ToolFacade, check_source, run_solution
from gemkit.tools.function import FunctionTool, tool


class TaskSynthesisError(GemkitError):
    """Task synthesis used wrongly (unknown category, bad level, unreadable folder)."""


class Database:
    """A read-only handle on one category database; cheap to copy (reconnects lazily)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        if not self.path.exists():
            raise TaskSynthesisError(f"database {self.path} does not exist")
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()
        self._cache: dict[str, Any] = {}

    def _connect(self) -> sqlite3.Connection:
        if self._conn is None:
            uri = f"file:{self.path.resolve()}?mode=ro"
            self._conn = sqlite3.connect(uri, uri=True, check_same_thread=False)
            self._conn.row_factory = sqlite3.Row
        return self._conn

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        """Run one read-only query; rows come back as plain dicts."""
        with self._lock:
            rows = self._connect().execute(sql, tuple(params)).fetchall()
        return [dict(r) for r in rows]

    def cached(self, key: str, build: Callable[[], Any]) -> Any:
        """A value computed once per handle (the verifier's in-memory snapshot)."""
        if key not in self._cache:
            self._cache[key] = build()
        return self._cache[key]

    def close(self) -> None:
        """Close the connection (a later query reopens it)."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["path"])  # type: ignore[misc]

    def __deepcopy__(self, memo: dict[int, Any]) -> Database:
        return Database(self.path)


#: constraint ids that say the answer as a whole is unusable (not the asked shape, or names
#: things the database lacks); the others are then vacuously "met", so they earn no credit
STRUCTURE = ("format", "unknown_item")


@dataclass
class Verdict:
    """A verifier's answer: pass/fail, the violation messages, and which constraints failed.

    Each message starts with the id of the constraint it breaks (`no_repeat: ...`). `gates`
    are the ids whose failure zeroes partial credit: an empty plan breaks no rule about its
    days, so the rules it "meets" are not work done.
    """

    passed: bool
    violations: list[str]
    constraints: list[str]
    failed: list[str] = field(default_factory=list)
    gates: list[str] = field(default_factory=lambda: list(STRUCTURE))

    @property
    def score(self) -> float:
        """Fraction of constraints satisfied (partial credit); 0 when a gate failed."""
        if self.passed:
            return 1.0
        failed = {f.split(":", 1)[0] for f in self.failed}
        if not self.constraints or failed & set(self.gates):
            return 0.0
        return max(0.0, 1.0 - len(failed) / len(self.constraints))

    @classmethod
    def from_violations(
        cls, violations: list[str], constraints: list[str], gates: Sequence[str] = STRUCTURE
    ) -> Verdict:
        """A verdict whose failed ids are the prefixes of the messages."""
        failed = sorted({v.split(":", 1)[0] for v in violations})
        return cls(not violations, violations, list(constraints), failed, list(gates))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form, with the score."""
        return {**asdict(self), "score": self.score}


@dataclass
class Task:
    """One task: its level, its machine spec, the prompt, the constraints and the tools it needs."""

    category: str
    level: int
    spec: dict[str, Any]
    prompt: str
    answer_format: str
    constraints: list[str]
    tools: list[str]
    added: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(self)


class Category:
    """A task category: database, tools, proposal, hardening, solution, verifier, counter.

    Subclasses set `name`, `env_name`, `solution_file` (a module written for the restricted
    runner, defining `solve(tools, task)`: a bare name is a module of this package, a dotted
    name any importable module), and implement the methods below.
    """

    name: ClassVar[str] = ""
    env_name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    solution_file: ClassVar[str] = ""
    #: tool calls the reference solution may make
    max_solution_calls: ClassVar[int] = 5_000

    # -- to implement ---------------------------------------------------------------------

    def build_database(self, path: Path, rng: np.random.Generator) -> None:
        """Write a fresh seeded SQLite database at `path`."""
        raise NotImplementedError

    def functions(
        self, db: Callable[[], Database], submit: Callable[[Any], str] | None = None
    ) -> dict[str, Callable[..., Any]]:
        """The tool functions (typed, documented, returning plain data) over `db()`.

        `db` is called at each tool call, so an env can point the same tools at a new
        database per episode; `submit` receives the argument of `submit_result`.
        """
        raise NotImplementedError

    def propose(self, db: Database, rng: np.random.Generator) -> Task:
        """A level-1 task on this database."""
        raise NotImplementedError

    def harden(self, db: Database, task: Task, rng: np.random.Generator) -> list[Task]:
        """Candidate tasks one level harder, best first (the loop keeps the first that works)."""
        raise NotImplementedError

    def verify(self, db: Database, task: Task, answer: Any) -> Verdict:
        """Check an answer (JSON text or data) against the database; name each broken rule."""
        raise NotImplementedError

    def count_solutions(self, db: Database, task: Task) -> int:
        """The exact number of answers that pass `verify`."""
        raise NotImplementedError

    def count_space(self, db: Database, task: Task) -> int:
        """The number of well-formed answers (the denominator of the valid fraction)."""
        raise NotImplementedError

    # -- shared machinery -----------------------------------------------------------------

    def solution_source(self) -> str:
        """The reference solution's source (the restricted runner executes it)."""
        return _source_of(self.solution_file)

    def solution_ref(self) -> str:
        """`module:function` of the reference solution, for records."""
        return f"{_module_name(self.solution_file)}:solve"

    def verifier_ref(self) -> str:
        """`module:Class.verify` of the verifier, for records."""
        return f"{type(self).__module__}:{type(self).__name__}.verify"

    def tools(
        self, db: Callable[[], Database], submit: Callable[[Any], str] | None = None
    ) -> list[FunctionTool]:
        """The category's gemkit tools (OpenAI schemas from the functions' signatures)."""
        templates = self._templates()
        out = []
        for name, fn in self.functions(db, submit).items():
            # building a tool's argument model is slow; same signature, so reuse it
            t = copy.copy(templates[name])
            t.fn = fn
            out.append(t)
        return out

    def _templates(self) -> dict[str, FunctionTool]:
        key = f"{type(self).__module__}.{type(self).__qualname__}"
        if key not in _TOOLS:
            _TOOLS[key] = {n: tool(fn, thread=False) for n, fn in self.functions(_no_db).items()}
        return _TOOLS[key]

    def facade(self, db: Database, task: Task | None = None) -> ToolFacade:
        """A tools-only facade over `db` (the task's tools, or all of them; never submit)."""
        allowed = set(task.tools) if task is not None else None
        fns = {
            name: fn
            for name, fn in self.functions(lambda: db).items()
            if name != "submit_result" and (allowed is None or name in allowed)
        }
        return ToolFacade(fns, max_calls=self.max_solution_calls)

    def solve(self, db: Database, task: Task) -> Any:
        """Run the reference solution with only the task's tools; its answer, or None."""
        return run_solution(
            self.solution_source(),
            self.facade(db, task),
            {"spec": task.spec, "prompt": task.prompt},  # the runner hands over a copy
            filename=f"{self.solution_file}.py",
        )

    def tool_schemas(self, names: Sequence[str] | None = None) -> list[dict[str, Any]]:
        """`[{name, description, parameters}]` of the tools (all, or the named ones in order)."""
        by_name = self._templates()
        chosen = list(by_name) if names is None else [n for n in names if n in by_name]
        return [
            {
                "name": n,
                "description": by_name[n].description,
                "parameters": by_name[n].json_schema(),
            }
            for n in chosen
        ]


def _no_db() -> Database:
    raise TaskSynthesisError("schemas only: this tool set has no database")


_SOURCES: dict[str, str] = {}
_TOOLS: dict[str, dict[str, FunctionTool]] = {}


def _module_name(solution_file: str) -> str:
    # a bare name is a module of this package; a dotted one is any importable module
    return solution_file if "." in solution_file else f"gemkit.synth.tasks.{solution_file}"


def _source_of(module: str) -> str:
    if module not in _SOURCES:
        spec = importlib.util.find_spec(_module_name(module))
        if spec is None or spec.origin is None:
            raise TaskSynthesisError(f"solution module {module!r} not found")
        text = Path(spec.origin).read_text(encoding="utf-8")
        check_source(text, filename=f"{module}.py")
        _SOURCES[module] = text
    return _SOURCES[module]


# -- the synthesis loop ---------------------------------------------------------------------


@dataclass
class Synthesized:
    """The outcome of one synthesis: the final task, its reference answer and its history."""

    task: Task
    reference_answer: Any
    n_valid: int
    history: list[dict[str, Any]]


def level_entry(
    task: Task, n_valid: int, n_space: int, tools_before: Sequence[str]
) -> dict[str, Any]:
    """One history entry: level, what was added, new tools, valid answers, the spec."""
    return {
        "level": task.level,
        "added": list(task.added),
        "tools_added": [t for t in task.tools if t not in tools_before],
        "n_valid_solutions": n_valid,
        "n_answers": n_space,
        "valid_fraction": n_valid / n_space if n_space else 0.0,
        "spec": copy.deepcopy(task.spec),
    }


def check_task(category: Category, db: Database, task: Task) -> tuple[Any, Verdict | None]:
    """Run the reference solution and verify it; `(answer, verdict)` (verdict None: no answer)."""
    answer = category.solve(db, task)
    if answer is None:
        return None, None
    return answer, category.verify(db, task, answer)


def synthesize(
    category: Category,
    db_path: Path,
    rng: np.random.Generator,
    target_level: int,
    *,
    proposals: int = 4,
) -> Synthesized | None:
    """Build a database, propose a task and harden it up to `target_level`.

    A hardened candidate is kept only when the reference solution still finds an answer,
    the answer verifies, and the fraction of well-formed answers that are valid falls (with
    the answer space unchanged, that is the number of valid answers falling; a step that adds
    a day grows the space, so its count may rise while the fraction falls). Returns None when
    no level-1 task could be solved on this database.
    """
    if target_level < 1:
        raise TaskSynthesisError(f"level must be >= 1, got {target_level}")
    category.build_database(db_path, rng)
    db = Database(db_path)
    try:
        task = answer = None
        n_valid = n_space = 0
        for _ in range(proposals):
            candidate = category.propose(db, rng)
            got, verdict = check_task(category, db, candidate)
            if verdict is not None and verdict.passed:
                task, answer = candidate, got
                n_valid = category.count_solutions(db, candidate)
                n_space = category.count_space(db, candidate)
                break
        if task is None:
            return None
        history = [level_entry(task, n_valid, n_space, [])]
        while task.level < target_level:
            for candidate in category.harden(db, task, rng):
                space = category.count_space(db, candidate)
                n = category.count_solutions(db, candidate)
                # n / space < n_valid / n_space, without floats
                if n == 0 or n * n_space >= n_valid * space:
                    continue
                got, verdict = check_task(category, db, candidate)
                if verdict is None or not verdict.passed:
                    raise TaskSynthesisError(
                        f"{category.name}: the reference solution found no valid answer to a "
                        f"task with {n} valid answers: "
                        + ("no answer" if verdict is None else "; ".join(verdict.violations))
                    )
                history.append(level_entry(candidate, n, space, task.tools))
                task, answer, n_valid, n_space = candidate, got, n, space
                break
            else:
                break
        return Synthesized(task, answer, n_valid, history)
    finally:
        db.close()


# -- answers --------------------------------------------------------------------------------

_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.S)


def parse_json_answer(answer: Any) -> tuple[Any, str | None]:
    """JSON data from an answer (data, JSON text, fenced JSON, or JSON inside prose).

    Returns `(data, None)` or `(None, message saying what is wrong)`.
    """
    if not isinstance(answer, str):
        return answer, None
    text = answer.strip()
    candidates = [text, *(m.group(1).strip() for m in _FENCE.finditer(text))]
    for opener, closer in (("[", "]"), ("{", "}")):
        start, end = text.find(opener), text.rfind(closer)
        if 0 <= start < end:
            candidates.append(text[start : end + 1])
    for c in candidates:
        try:
            return json.loads(c), None
        except (json.JSONDecodeError, ValueError):
            continue
    return None, "the answer is not valid JSON; submit a JSON list with one object per day"
