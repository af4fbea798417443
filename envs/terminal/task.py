"""A terminal task: an instruction, an image, files, a set-up script, tests and a reference solution.

Tasks are YAML files in `envs/terminal/tasks/` (see `docs/terminal.md` for the format); each
loads into a `Task`. Tests are shell scripts run in the sealed terminal after the episode, as
a grader user; a test passes when it exits 0 and, when it has an `expect`, printed exactly
that text. The expected text stays with the grader: it never enters the terminal.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gemkit.errors import GemkitError

TASKS_DIR = Path(__file__).with_name("tasks")
NAME_RE = re.compile(r"^[A-Z][A-Za-z0-9]*$")
FIELDS = {
    "name",
    "description",
    "instruction",
    "tags",
    "image",
    "files",
    "setup",
    "tests",
    "solution",
    "wrong",
    "max_turns",
    "command_timeout",
}
TEST_FIELDS = {"name", "run", "expect"}


class TaskError(GemkitError):
    """A task file that does not follow the task format."""


@dataclass(frozen=True)
class TaskTest:
    """One check run after the episode: passes when `run` (a shell script) exits 0 and, when
    `expect` is set, its output (stdout and stderr) is exactly `expect`."""

    name: str
    run: str
    expect: str | None = None


@dataclass(frozen=True)
class Task:
    """Everything that defines a terminal task."""

    name: str
    description: str
    instruction: str
    tests: tuple[TaskTest, ...]
    solution: str
    image: str = "busybox"
    tags: tuple[str, ...] = ()
    files: dict[str, str] = field(default_factory=dict)
    setup: str = ""
    wrong: str = ""
    max_turns: int = 20
    command_timeout: float = 20.0

    @classmethod
    def from_dict(cls, data: Any, source: str = "<task>") -> Task:
        """Validate a parsed task file; the error names the file and the field at fault."""

        def fail(msg: str) -> TaskError:
            return TaskError(f"{source}: {msg}")

        if not isinstance(data, dict):
            raise fail("a task file must hold a mapping of fields")
        unknown = sorted(set(data) - FIELDS)
        if unknown:
            raise fail(f"unknown fields {unknown}; allowed: {sorted(FIELDS)}")
        for key in ("name", "description", "instruction", "tests", "solution"):
            if not data.get(key):
                raise fail(f"missing required field {key!r}")
        for key in ("name", "description", "instruction", "solution", "setup", "wrong", "image"):
            if key in data and not isinstance(data[key], str):
                raise fail(f"{key!r} must be a string")
        if not NAME_RE.match(data["name"]):
            raise fail(f"name {data['name']!r} must be CamelCase letters and digits")
        files = data.get("files") or {}
        if not isinstance(files, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in files.items()
        ):
            raise fail("'files' must map relative paths to file contents (strings)")
        tests = data["tests"]
        if not isinstance(tests, list):
            raise fail("'tests' must be a list of {name, run} entries")
        parsed = []
        for i, t in enumerate(tests):
            if not (isinstance(t, dict) and isinstance(t.get("run"), str) and t.get("name")):
                raise fail(f"test {i} must have a 'name' and a 'run' shell script")
            unknown = sorted(set(t) - TEST_FIELDS)
            if unknown:
                raise fail(f"test {i}: unknown fields {unknown}; allowed: {sorted(TEST_FIELDS)}")
            if "expect" in t and not isinstance(t["expect"], str):
                raise fail(f"test {i}: 'expect' must be the exact text the test prints")
            parsed.append(TaskTest(str(t["name"]), t["run"], t.get("expect")))
        tags = data.get("tags") or []
        if not isinstance(tags, list):
            raise fail("'tags' must be a list of strings")
        return cls(
            name=data["name"],
            description=data["description"].strip(),
            instruction=data["instruction"].strip(),
            tests=tuple(parsed),
            solution=data["solution"],
            image=data.get("image", "busybox"),
            tags=tuple(str(t) for t in tags),
            files=dict(files),
            setup=data.get("setup") or "",
            wrong=data.get("wrong") or "",
            max_turns=int(data.get("max_turns", 20)),
            command_timeout=float(data.get("command_timeout", 20.0)),
        )


def load_task(path: str | Path) -> Task:
    """Load and validate one task file."""
    import yaml

    p = Path(path)
    try:
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the C loader is 10x faster
        data = yaml.load(p.read_text(encoding="utf-8"), Loader=loader)
    except yaml.YAMLError as e:
        raise TaskError(f"{p}: not valid YAML: {e}") from e
    return Task.from_dict(data, str(p))


@functools.cache
def builtin_tasks() -> dict[str, Task]:
    """The shipped tasks by name, in file-name order."""
    tasks: dict[str, Task] = {}
    for path in sorted(TASKS_DIR.glob("*.yaml")):
        task = load_task(path)
        if task.name in tasks:
            raise TaskError(f"{path}: task name {task.name!r} is used twice")
        tasks[task.name] = task
    return tasks


def get_task(name: str) -> Task:
    """A shipped task by name, or an error listing the names."""
    tasks = builtin_tasks()
    if name not in tasks:
        raise TaskError(f"no terminal task {name!r}; tasks: {', '.join(tasks)}")
    return tasks[name]
