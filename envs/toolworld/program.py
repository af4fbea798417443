"""Model-written tasks at play time: the program's tools and verifier, run in the sandbox.

A task synthesized in LLM mode (`kind: "code"`) keeps the model's whole program. When it is
played, each tool call and the verifier run that program in the sandbox against a copy of
the task's database, so nothing the program does reaches the host; `submit_result` ends the
episode with its argument as the answer.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from gemkit.envs.toolworld.category import (
    SUBMITTED,
    Task,
    ToolWorldError,
    Verdict,
    parse_json_answer,
)
from gemkit.tools.base import Tool, ToolResult

if TYPE_CHECKING:
    from gemkit.records.tasks import TaskRecord

#: runs one tool call or the verifier of a stored program against its database
CALL = r"""
import json, sqlite3
ns = {{"__name__": "task_program"}}
exec(compile({program!r}, "program.py", "exec"), ns)
conn = sqlite3.connect("file:task.sqlite?mode=ro", uri=True)
ns["db"] = conn
out = {{}}
try:
    if {tool!r} is None:
        out["violations"] = [str(v) for v in ns["verify"](conn, json.loads({payload!r}))]
    else:
        fn = {{f.__name__: f for f in ns["TOOLS"]}}[{tool!r}]
        out["result"] = fn(**json.loads({payload!r}))
except Exception as e:
    out["error"] = type(e).__name__ + ": " + str(e)
print("@@RESULT@@" + json.dumps(out, default=str))
"""


def make_sandbox() -> Any:
    """The sandbox a model-written program runs in (tools, verifier, harness)."""
    from gemkit.sandbox import Sandbox

    return Sandbox(timeout=20, memory_mb=512, max_output=8_000_000, workers=2)


def parse_result(stdout: str, stderr: str) -> dict[str, Any]:
    """The JSON a harness printed after its marker, or an error saying why there is none."""
    marker = stdout.rfind("@@RESULT@@")
    if marker < 0:
        return {"ok": False, "error": (stderr or stdout or "no output")[-1500:]}
    try:
        return json.loads(stdout[marker + len("@@RESULT@@") :])
    except json.JSONDecodeError:
        return {"ok": False, "error": "the program's output could not be read back (cut short?)"}


class _AnyArgs(BaseModel):
    model_config = ConfigDict(extra="allow")


class ProgramTool(Tool):
    """One tool of a model-written program, run in the sandbox against the task's database."""

    Args = _AnyArgs

    def __init__(self, runtime: CodeRuntime, schema: dict[str, Any]):
        self.runtime = runtime
        self.name = schema["name"]  # type: ignore[misc]
        self.description = schema["description"]  # type: ignore[misc]
        self.schema = schema["parameters"]

    def json_schema(self) -> dict[str, Any]:
        """The recorded parameter schema."""
        return self.schema

    async def call(self, args: BaseModel) -> ToolResult:
        """Run the tool in the sandbox."""
        payload = args.model_dump()
        if self.name == "submit_result":  # ends the episode; the verifier runs on the answer
            return ToolResult.final_answer(next(iter(payload.values()), None), SUBMITTED)
        out = await asyncio.get_running_loop().run_in_executor(
            None, self.runtime.call, self.name, payload
        )
        if "error" in out:
            return ToolResult(f"Error: {self.name} raised {out['error']}", is_error=True)
        return ToolResult(json.dumps(out.get("result"), ensure_ascii=False, default=str))

    def clone(self) -> ProgramTool:
        """Share the runtime (it holds no live resources of its own)."""
        return self


class CodeRuntime:
    """Tools and verifier of one code record, each call run in the sandbox."""

    def __init__(self, record: TaskRecord, db_path: Path):
        if record.verifier.kind != "code" or not record.verifier.code:
            raise ToolWorldError(f"task {record.id} has no model-written program to run")
        self.record = record
        self.program = record.verifier.code
        self.db_path = db_path
        self._sandbox: Any = None

    def _run(self, tool: str | None, payload: Any) -> dict[str, Any]:
        if self._sandbox is None:
            self._sandbox = make_sandbox()
        code = CALL.format(program=self.program, tool=tool, payload=json.dumps(payload))
        result = self._sandbox.run_sync(code, files={"task.sqlite": self.db_path.read_bytes()})
        return parse_result(result.stdout, result.stderr)

    def call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """Run one tool call."""
        return self._run(name, arguments)

    def tools(self) -> list[Tool]:
        """The record's tools as gemkit tools."""
        return [ProgramTool(self, s.model_dump()) for s in self.record.tools]

    def verify(self, answer: Any) -> Verdict:
        """Run the program's verifier on an answer."""
        data, error = parse_json_answer(answer)
        out = self._run(None, answer if error else data)
        if "error" in out:
            violations = [f"verifier: the verifier raised {out['error']}"]
        else:
            violations = [str(v) for v in out.get("violations", [])]
        return Verdict(not violations, violations, list(self.record.constraints), violations)

    def close(self) -> None:
        """Stop the sandbox."""
        if self._sandbox is not None:
            self._sandbox.close()
            self._sandbox = None


def code_task(record: TaskRecord) -> Task:
    """The `Task` of a code record (its rules live in its program, so it has no spec)."""
    return Task(
        record.category,
        record.level,
        {},
        record.task.prompt,
        record.task.answer_format,
        list(record.constraints),
        [t.name for t in record.tools],
    )
