"""A task category as an episode plays it: tools over a database, and the verifier.

A category names its tools (typed, documented functions over a read-only SQLite `Database`)
and checks an answer against the task's rules (`verify` -> `Verdict`). How tasks of a
category are made (the database, proposals, hardening, counting, the reference solution)
is synthesis, in `gemkit.synth.tasks`, which builds on these classes; an env needs only
this side, so it never imports synth.

Categories are found by name in `gemkit.envs.toolworld.categories`.
"""

from __future__ import annotations

import copy
import json
import re
import sqlite3
import threading
from collections.abc import Callable, Container, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from gemkit.errors import GemkitError
from gemkit.tools.function import FunctionTool, tool

if TYPE_CHECKING:
    from gemkit.records.tasks import TaskRecord


class ToolWorldError(GemkitError):
    """A toolworld env or category used wrongly (no tasks, unknown category, bad index)."""


#: what `submit_result` answers before the verifier's verdict follows
SUBMITTED = "Plan received; it will be checked now."


class Database:
    """A read-only handle on one category database; cheap to copy (reconnects lazily)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        if not self.path.exists():
            raise ToolWorldError(f"database {self.path} does not exist")
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


def task_from_record(record: TaskRecord) -> Task:
    """The `Task` a task record describes (a model-written one has no spec)."""
    return Task(
        category=record.category,
        level=record.level,
        spec=record.task.spec or {},
        prompt=record.task.prompt,
        answer_format=record.task.answer_format,
        constraints=list(record.constraints),
        tools=[t.name for t in record.tools],
    )


class Category:
    """The played side of a task category: its tools over a database, and its verifier.

    Subclasses set `name` and `env_name` and implement `functions` and `verify`. The
    functions are plain typed, documented functions (their signatures become the tools'
    OpenAI schemas); `submit_result` returns `ToolResult.final_answer(answer, ...)`, which
    ends the episode with `answer` for the verifier.
    """

    name: ClassVar[str] = ""
    env_name: ClassVar[str] = ""
    description: ClassVar[str] = ""

    def functions(self, db: Callable[[], Database]) -> dict[str, Callable[..., Any]]:
        """The tool functions (typed, documented, returning plain data) over `db()`.

        `db` is called at each tool call, so an env can point the same tools at a new
        database per episode.
        """
        raise NotImplementedError

    def verify(self, db: Database, task: Task, answer: Any) -> Verdict:
        """Check an answer (JSON text or data) against the database; name each broken rule."""
        raise NotImplementedError

    def verifier_ref(self) -> str:
        """`module:Class.verify` of the verifier that runs, for records and the viewer."""
        fn = type(self).verify
        return f"{fn.__module__}:{fn.__qualname__}"

    def tools(self, db: Callable[[], Database]) -> list[FunctionTool]:
        """The category's gemkit tools (OpenAI schemas from the functions' signatures)."""
        templates = self._templates()
        out = []
        for name, fn in self.functions(db).items():
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
    raise ToolWorldError("schemas only: this tool set has no database")


_TOOLS: dict[str, dict[str, FunctionTool]] = {}

# -- answers --------------------------------------------------------------------------------


def name_key(text: str) -> str:
    """A name as the verifiers compare it: case and runs of whitespace do not count.

    `"krakow"`, `" Krakow "` and `"KRAKOW"` name `Krakow`: a model that wrote a correct plan
    in another case must not lose its reward. Every rule is then checked on the database's
    own spelling, so two spellings of one name are one name (a city visited as "Krakow" and
    again as "krakow" is visited twice).
    """
    return " ".join(text.split()).casefold()


def spelling(names: Iterable[str]) -> dict[str, str]:
    """`name_key(name) -> name` over the names of one table (the database's spelling)."""
    return {name_key(n): n for n in names}


def respell(written: str, names: Container[str], spellings: dict[str, str]) -> str:
    """`written` in the database's spelling: itself when the table holds it exactly (two
    names of a model-written table may differ only in case), else the name it normalises to
    (else itself, which the verifier then reports as unknown)."""
    return written if written in names else spellings.get(name_key(written), written)


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
