"""Task generators and the propose -> solve -> verify -> harden loop.

A `TaskGenerator` is a played category (`gemkit.envs.toolworld.category.Category`: its tools
and verifier) that can also make tasks: it builds a seeded SQLite database, proposes a
level-1 task, and hardens a task (returning candidate next-level tasks). Its reference
solution is a source file run by `restrict.run_solution` with only a tools facade; its
verifier and its solution counter read the database directly (they are the trusted side).
"""

from __future__ import annotations

import copy
import dataclasses
import importlib.util
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from gemkit.envs.toolworld.category import Category, Database, Task, Verdict
from gemkit.errors import GemkitError
from gemkit.synth.tasks.restrict import ToolFacade, check_source, run_solution


class TaskSynthesisError(GemkitError):
    """Task synthesis used wrongly (unknown category, bad level, unreadable folder)."""


class TaskGenerator(Category):
    """A category that makes tasks: database, proposal, hardening, solution, counter.

    Subclasses (with the played category as a second base) set `solution_file`: a module
    written for the restricted runner, defining `solve(tools, task)` (a bare name is a
    module of `gemkit.envs.toolworld`, a dotted name any importable module), and implement
    the methods below.
    """

    solution_file: ClassVar[str] = ""
    #: tool calls the reference solution may make
    max_solution_calls: ClassVar[int] = 5_000

    # -- to implement ---------------------------------------------------------------------

    def build_database(self, path: Path, rng: np.random.Generator) -> None:
        """Write a fresh seeded SQLite database at `path`."""
        raise NotImplementedError

    def propose(self, db: Database, rng: np.random.Generator) -> Task:
        """A level-1 task on this database."""
        raise NotImplementedError

    def harden(self, db: Database, task: Task, rng: np.random.Generator) -> list[Task]:
        """Candidate tasks one level harder, best first (the loop keeps the first that works)."""
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
            filename=f"{self.solution_file.rpartition('.')[2]}.py",
        )


_SOURCES: dict[str, str] = {}


def _module_name(solution_file: str) -> str:
    # a bare name is a module of the played categories; a dotted one is any importable module
    return solution_file if "." in solution_file else f"gemkit.envs.toolworld.{solution_file}"


def _source_of(module: str) -> str:
    if module not in _SOURCES:
        spec = importlib.util.find_spec(_module_name(module))
        if spec is None or spec.origin is None:
            raise TaskSynthesisError(f"solution module {module!r} not found")
        text = Path(spec.origin).read_text(encoding="utf-8")
        check_source(text, filename=f"{module.rpartition('.')[2]}.py")
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


def check_task(category: TaskGenerator, db: Database, task: Task) -> tuple[Any, Verdict | None]:
    """Run the reference solution and verify it; `(answer, verdict)` (verdict None: no answer)."""
    answer = category.solve(db, task)
    if answer is None:
        return None, None
    return answer, category.verify(db, task, answer)


#: the most a random well-formed answer may pass a level-1 task: a policy that lists the
#: items with the tools and picks at random must fail almost always, or level 1 rewards luck
MAX_FIRST_FRACTION = 0.05
#: hardening steps a level-1 proposal may take to get there
MAX_FIRST_STEPS = 8
#: rounds of hardening candidates drawn for a level before the task stays where it is
HARDEN_ROUNDS = 3
#: each level leaves at most this share (3/5) of the valid fraction of the level below, so a
#: random answer passes a level clearly less often than the one before it
HARDER = (3, 5)


def first_task(
    category: TaskGenerator, db: Database, proposal: Task, rng: np.random.Generator
) -> tuple[Task, int, int] | None:
    """The proposal tightened, still at level 1, until at most `MAX_FIRST_FRACTION` of its
    well-formed answers are valid: `(task, valid answers, well-formed answers)`, or None.

    Each step is a hardening candidate (the rules of the level above) that leaves some valid
    answer; the steps are kept in the level's `added`.
    """
    task = proposal
    n_valid = category.count_solutions(db, task)
    n_space = category.count_space(db, task)
    for _ in range(MAX_FIRST_STEPS):
        if 0 < n_valid <= MAX_FIRST_FRACTION * n_space:
            return task, n_valid, n_space
        for candidate in category.harden(db, task, rng):
            n = category.count_solutions(db, candidate)
            space = category.count_space(db, candidate)
            if 0 < n and n * n_space < n_valid * space:  # a smaller valid fraction
                task = dataclasses.replace(
                    candidate, level=1, added=[*task.added, *candidate.added]
                )
                n_valid, n_space = n, space
                break
        else:
            return None
    return (task, n_valid, n_space) if 0 < n_valid <= MAX_FIRST_FRACTION * n_space else None


def synthesize(
    category: TaskGenerator,
    db_path: Path,
    rng: np.random.Generator,
    target_level: int,
    *,
    proposals: int = 4,
) -> Synthesized | None:
    """Build a database, propose a task and harden it up to `target_level`.

    A level-1 task is a proposal tightened until a random well-formed answer passes it at
    most `MAX_FIRST_FRACTION` of the time (`first_task`), and its reference solution
    verifies. A hardened candidate is kept only when the reference solution still finds an
    answer, the answer verifies, and the fraction of well-formed answers that are valid
    falls to at most `HARDER` of the level below's (with the answer space unchanged, that is
    the number of valid answers falling; a step that adds a day grows the space, so its
    count may rise while the fraction falls).
    Returns None when no level-1 task could be made and solved on this database.
    """
    if target_level < 1:
        raise TaskSynthesisError(f"level must be >= 1, got {target_level}")
    category.build_database(db_path, rng)
    db = Database(db_path)
    try:
        task = answer = None
        n_valid = n_space = 0
        for _ in range(proposals):
            first = first_task(category, db, category.propose(db, rng), rng)
            if first is None:
                continue
            candidate, n_valid, n_space = first
            got, verdict = check_task(category, db, candidate)
            if verdict is not None and verdict.passed:
                task, answer = candidate, got
                break
        if task is None:
            return None
        history = [level_entry(task, n_valid, n_space, [])]
        while task.level < target_level:
            # a few rounds: the candidates' limits are drawn, a later draw may cut deeper
            rounds = (c for _ in range(HARDEN_ROUNDS) for c in category.harden(db, task, rng))
            for candidate in rounds:
                space = category.count_space(db, candidate)
                n = category.count_solutions(db, candidate)
                # n / space <= HARDER * n_valid / n_space, without floats
                if n == 0 or n * n_space * HARDER[1] > n_valid * space * HARDER[0]:
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
