"""`TaskRecord`: one `<database, tools, task, verifier>` tuple (`gemkit synth tasks`).

Written by `gemkit.synth.tasks` (offline, or from a model's program in LLM mode) and played
by the `toolworld:` envs. The database lives next to the records (`database`, relative to
the folder); `verifier` and `solution` say where their code is: `kind: "builtin"` names the
category's own (shown, never imported: the env runs the registered category's verifier),
`kind: "code"` carries a model-written program that runs in the sandbox.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from gemkit.records.base import Json, Part, Record


class ToolSchema(Part):
    """A tool the task offers: its name, description and JSON schema of arguments."""

    name: str
    description: str
    parameters: Json


class TaskText(Part):
    """What the agent is told, and the category's machine form of the task (`spec`)."""

    prompt: str
    answer_format: str
    spec: Json = None


class Code(Part):
    """Where a verifier or solution is: a builtin `ref`, or model-written `code` + `entry`."""

    kind: Literal["builtin", "code"]
    ref: str | None = None
    code: str | None = None
    entry: str | None = None


class PassAtK(Part):
    """How many of `k` baseline (or model) tries passed the verifier."""

    k: int
    passes: int


class TaskStats(Part):
    """Exact counts of valid and well-formed answers (None when unknown), pass@k of the
    category's baseline, and the tries a random but tool-using agent passed."""

    n_valid_solutions: int | None = None
    n_answers: int | None = None
    valid_fraction: float | None = None
    pass_at_k: PassAtK | None = None
    #: an agent that lists the items with the tools and picks at random (None: not run)
    random_baseline: PassAtK | None = None


class LevelStep(Part):
    """One level of the hardening history: what it added and what it left valid."""

    level: int
    added: list[str] = []
    tools_added: list[str] = []
    n_valid_solutions: int | None = None
    n_answers: int | None = None
    valid_fraction: float | None = None
    spec: Json = None
    repairs: int | None = None


class TaskRecord(Record):
    """A synthesized task: its database, tools, prompt, rules, verifier and evidence."""

    KIND = "task"
    #: 2 added the random baseline's passes (`stats.random_baseline`); version 1 still reads
    VERSION = 2
    READS: ClassVar[tuple[int, ...]] = (1,)

    #: a `datasets` export carries each task's SQLite file, so the dataset stands alone
    ATTACHMENTS: ClassVar[tuple[str, ...]] = ("database_sqlite",)

    schema_version: int = 2

    id: str
    category: str
    level: int
    #: the task's SQLite file, relative to the folder of the records
    database: str
    tools: list[ToolSchema]
    task: TaskText
    constraints: list[str]
    verifier: Code
    solution: Code
    reference_answer: Json = None
    stats: TaskStats = TaskStats()
    history: list[LevelStep] = []
    seed: list[int] = []
    #: the model that wrote the program (LLM mode)
    model: str | None = None
