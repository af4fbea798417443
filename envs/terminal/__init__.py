"""Terminal tasks (`terminal:` family): shell work in a sandbox through a `bash` tool.

`terminal:<Task>-v0` is one shipped task (files, text processing, scripting, repairing small
programs); `terminal:Suite-v0` draws one per episode. Commands run in a Docker container
(`backend="docker"`) or, without an engine, a bubblewrap sandbox (`backend="bwrap"`); the
default `auto` takes Docker when it answers. See `docs/terminal.md`.
"""

from __future__ import annotations

from gemkit.envs.terminal.task import builtin_tasks
from gemkit.registry import register

ENTRY = "gemkit.envs.terminal.env:make_terminal"
EXPERT = "gemkit.envs.terminal.env:TerminalExpert"

for _task in builtin_tasks().values():
    register(
        f"terminal:{_task.name}-v0",
        ENTRY,
        kwargs={"task": _task.name},
        description=_task.description,
        tags=("terminal", "tools", *_task.tags),
        expert=EXPERT,
    )

register(
    "terminal:Suite-v0",
    ENTRY,
    kwargs={},
    description=f"One of the {len(builtin_tasks())} shipped terminal tasks per episode.",
    tags=("terminal", "tools", "suite"),
    expert=EXPERT,
)
