"""LLM mode: the model writes the database, the tools, the task, the solution and the verifier.

The model answers with one Python program (in a ```python block) that defines:

- `build_database(conn)`: create tables and insert rows through a `sqlite3` connection;
- tool functions (typed, with a docstring) that read the global `db` connection, listed in
  `TOOLS = [...]`;
- `TASK = {"prompt": ..., "answer_format": ..., "constraints": [...]}`;
- `solution(tools, task)`: may only call `tools.<tool>(...)` and compute;
- `verify(db, answer) -> list[str]`: the violated constraints (empty when the answer passes).

gemkit runs the program in the sandbox (`gemkit.sandbox`): it builds the database, runs the
solution under the restricted runner with only a tools facade, verifies its answer, and feeds
any error back to the model, which repairs the program. Once a level verifies, the model is
asked for a harder version (more constraints, new tools when needed), up to the target level.
The kept record stores the program; its tools and verifier run in the sandbox at play time
(`gemkit.envs.toolworld.program`).

Each request holds the system prompt, the first ask, and the last exchange only (the model's
latest program and what gemkit answered): every reply is a whole program, so the older ones
are superseded, and a conversation of many repairs stays within a small model's window
(the real Qwen2.5-Coder-0.5B sent 300-850-token programs, a llama.cpp slot holds 4,096
tokens). Replies are bounded by `max_tokens`; a reply cut there is answered by asking for a
shorter program. A request the server refuses for its content (HTTP 400: a conversation
that no longer fits the window) ends the task, which is then rejected with that reason: the
run goes on, and a resume does not replay it.
"""

from __future__ import annotations

import ast
import asyncio
import base64
import difflib
import hashlib
import logging
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from gemkit.envs.toolworld.program import make_sandbox, parse_result
from gemkit.records.tasks import Code, TaskRecord, TaskText, ToolSchema
from gemkit.synth.tasks import restrict
from gemkit.synth.tasks.base import TaskGenerator

log = logging.getLogger(__name__)

_CODE = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.S)

SYSTEM = """You build tool-use tasks for training agents, as one Python program.
Category: {category}: {description}

Reply with ONE complete program in a ```python block that defines:
1. build_database(conn): create tables and insert rows with the sqlite3 connection `conn`.
2. Tool functions with type hints and a one-line docstring. They read the global `db`
   (a sqlite3 connection to that database) and return plain data (str, numbers, lists, dicts).
   List them in TOOLS = [tool_a, tool_b, ...].
3. TASK = {{"prompt": "...", "answer_format": "...", "constraints": ["...", ...]}}.
4. solution(tools, task): solves the task using ONLY tools.<tool_name>(...) calls and plain
   computation (no imports, no database, no files, no names starting with '_').
5. verify(db, answer): returns the list of violated constraints (strings naming each
   constraint); an empty list means the answer is correct.
The program may import only sqlite3, json, math, itertools at the top."""

HARDER = """The program works: its solution passes its verifier. Make the task harder (level {level}):
add or tighten constraints, update TASK, solution and verify together, and add tools if the
current ones cannot express what the harder task needs. Reply with the whole new program."""

REPAIR = """Running your program failed:
{error}
{change}Fix it and reply with the whole program in one ```python block."""

CUT = """Your reply was cut off at the {max_tokens}-token limit before the program ended, so it cannot
run. Write a shorter program: fewer rows in build_database (build them in a loop), one-line
docstrings, no comments, no explanation outside the code. Reply with the whole program in one
```python block."""

REPEATED = """This program is the same as your attempt {first}, which {outcome}
Sending it again cannot {goal}: change the program (the part the message above points at) and
reply with the whole program in one ```python block."""

#: identical programs a conversation may send again (each answered by REPEATED) before it ends
MAX_REPEATS = 1

#: runs in the sandbox: build the database, run the solution with only the tools, verify
HARNESS = r"""
import base64, json, sqlite3, inspect, traceback
RESTRICT = {restrict!r}
PROGRAM = {program!r}
SOLUTION_LINE = {solution_line!r}
out = {{"ok": False}}
try:
    rns = {{"__name__": "gk_restrict"}}
    exec(compile(RESTRICT, "restrict.py", "exec"), rns)
    ns = {{"__name__": "task_program"}}
    exec(compile(PROGRAM, "program.py", "exec"), ns)
    for name in ("build_database", "TOOLS", "TASK", "solution", "verify"):
        if name not in ns:
            raise NameError("the program does not define " + name)
    if not isinstance(ns["TOOLS"], (list, tuple)):
        raise TypeError("TOOLS must be a list of the tool functions, TOOLS = [tool_a, tool_b], "
                        "not a " + type(ns["TOOLS"]).__name__)
    for i, f in enumerate(ns["TOOLS"], 1):
        if not inspect.isfunction(f):
            raise TypeError("TOOLS must list the tool functions themselves, "
                            "TOOLS = [tool_a, tool_b]; item " + str(i) + " is the "
                            + type(f).__name__ + " " + repr(f)[:60])
    if not isinstance(ns["TASK"], dict):
        raise TypeError('TASK must be a dict {{"prompt": ..., "answer_format": ..., '
                        '"constraints": [...]}}, not a ' + type(ns["TASK"]).__name__)
    conn = sqlite3.connect("task.sqlite")
    ns["build_database"](conn)
    conn.commit()
    ns["db"] = conn
    tools = {{f.__name__: f for f in ns["TOOLS"]}}
    out["tools"] = [
        {{"name": n, "doc": (inspect.getdoc(f) or "").split("\n")[0],
          "params": [[p.name, getattr(p.annotation, "__name__", str(p.annotation))]
                     for p in inspect.signature(f).parameters.values()]}}
        for n, f in tools.items()
    ]
    out["task"] = ns["TASK"]
    solution_src = {solution!r}
    facade = rns["ToolFacade"](tools, max_calls=5000)
    answer = rns["run_solution"](solution_src, facade, dict(ns["TASK"]), entry="solution")
    out["answer"] = answer
    out["violations"] = [str(v) for v in ns["verify"](conn, answer)]
    out["ok"] = not out["violations"]
    conn.close()
    out["database"] = base64.b64encode(open("task.sqlite", "rb").read()).decode()
except BaseException as e:
    out["error"] = type(e).__name__ + ": " + str(e)
    # only the lines of the model's own program: this harness's frames would point it at
    # code it never wrote
    mine = []
    for frame in traceback.extract_tb(e.__traceback__):
        if frame.filename not in ("program.py", "<solution>") or not frame.lineno:
            continue
        line = frame.lineno + (SOLUTION_LINE - 1 if frame.filename == "<solution>" else 0)
        lines = PROGRAM.splitlines()
        text = lines[line - 1].strip() if 0 < line <= len(lines) else ""
        mine.append("  line " + str(line) + ", in " + frame.name + ": " + text)
    if mine:
        out["trace"] = "\n".join(["Where (your program's lines, innermost last):"] + mine[-4:])
print("@@RESULT@@" + json.dumps(out, default=str))
"""


def extract_program(text: str) -> str | None:
    """The last ```python block of a reply (or the whole reply if it parses as Python)."""
    blocks = _CODE.findall(text or "")
    if blocks:
        return blocks[-1]
    return None


def solution_source(program: str) -> str:
    """The source of `solution` alone (the restricted runner checks just that function)."""
    return _solution(program)[0]


def _solution(program: str) -> tuple[str, int]:
    """The source of `solution` and the program line it starts on."""
    tree = ast.parse(program)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "solution":
            return ast.get_source_segment(program, node) or "", node.lineno
    raise ValueError("the program defines no top-level function solution(tools, task)")


#: what the program must define at the top level: name -> (kind, how it reads in a message)
REQUIRED: dict[str, tuple[str, str]] = {
    "build_database": ("function", "def build_database(conn): ..."),
    "TOOLS": ("value", "TOOLS = [tool_a, tool_b, ...]"),
    "TASK": ("value", 'TASK = {"prompt": ..., "answer_format": ..., "constraints": [...]}'),
    "solution": ("function", "def solution(tools, task): ..."),
    "verify": ("function", "def verify(db, answer): ..."),
}


def program_problems(program: str) -> list[str]:
    """Everything missing or misshapen at the program's top level, all at once (no run).

    A model told one problem at a time fixes one per repair, or none; the whole list, with
    the line of each wrong definition, lets it fix them together.
    """
    try:
        tree = ast.parse(program)
    except SyntaxError as e:
        return [f"SyntaxError at line {e.lineno}: {e.msg}"]
    defined: dict[str, tuple[str, int, str]] = {}
    names: list[str] = []
    tools_line = 0
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            defined[node.name] = ("function", node.lineno, "a function")
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            value = node.value
            what = _value_kind(value)
            for t in targets:
                if isinstance(t, ast.Name):
                    defined[t.id] = ("value", node.lineno, what)
                    if t.id == "TOOLS":
                        tools_line = node.lineno
                        names = _listed_names(value)
    problems = []
    for name, (kind, shape) in REQUIRED.items():
        got = defined.get(name)
        if got is None:
            near = next((n for n in defined if n.lower() == name.lower()), None)
            hint = f" (it defines {near!r}: the name must be {name!r})" if near else ""
            problems.append(f"missing {name}{hint}: write {shape}")
        elif got[0] != kind:
            problems.append(f"{name} (line {got[1]}) is {got[2]}, it must be: {shape}")
    if names:
        listed = ", ".join(names[:4]) + (", ..." if len(names) > 4 else "")
        quoted = ", ".join(repr(n) for n in names[:4]) + (", ..." if len(names) > 4 else "")
        problems.append(
            f"TOOLS (line {tools_line}) lists names as strings ({quoted}): list the tool "
            f"functions themselves, without quotes: TOOLS = [{listed}]"
        )
    return problems


def _listed_names(node: ast.expr | None) -> list[str]:
    """The strings a `TOOLS = ["a", "b"]` lists (empty unless it lists strings)."""
    if not isinstance(node, (ast.List, ast.Tuple)):
        return []
    return [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]


def _value_kind(node: ast.expr | None) -> str:
    kinds = {
        ast.Dict: "a dict",
        ast.List: "a list",
        ast.Lambda: "a lambda",
        ast.Constant: "a constant",
    }
    return next((v for k, v in kinds.items() if isinstance(node, k)), "a value")


def run_program(program: str, sandbox: Any = None) -> dict[str, Any]:
    """Run a model's program in the sandbox: build, solve with only tools, verify.

    A program missing a required definition is refused before the sandbox starts, with
    every such problem listed.
    """
    problems = program_problems(program)
    if problems:
        return {"ok": False, "error": "the program cannot run:\n- " + "\n- ".join(problems)}
    solution, solution_line = _solution(program)
    restrict_src = Path(restrict.__file__).read_text(encoding="utf-8")
    code = HARNESS.format(
        restrict=restrict_src, program=program, solution=solution, solution_line=solution_line
    )
    sb = sandbox or make_sandbox()
    try:
        result = sb.run_sync(code)
    finally:
        if sandbox is None:
            sb.close()
    if result.limit_hit:
        return {"ok": False, "error": f"the program hit the sandbox's {result.limit_hit} limit"}
    return parse_result(result.stdout, result.stderr)


def _feedback(result: dict[str, Any]) -> str:
    if "error" in result:
        return f"{result['error']}\n{result.get('trace', '')}".strip()
    return "The solution's answer fails the verifier: " + "; ".join(result.get("violations", []))


_JSON_TYPES = {"str": "string", "int": "integer", "float": "number", "bool": "boolean"}


def tool_schemas(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`[{name, description, parameters}]` from the harness's view of the tool functions."""
    out = []
    for t in tools:
        props = {}
        for name, annotation in t["params"]:
            kind = _JSON_TYPES.get(annotation)
            if kind is None and annotation.startswith(("list", "List")):
                kind = "array"
            props[name] = {"type": kind} if kind else {}
        out.append(
            {
                "name": t["name"],
                "description": t["doc"],
                "parameters": {
                    "type": "object",
                    "properties": props,
                    "required": list(props),
                },
            }
        )
    if not any(t["name"] == "submit_result" for t in out):
        out.append(
            {
                "name": "submit_result",
                "description": "Submit the final answer; this ends the task.",
                "parameters": {
                    "type": "object",
                    "properties": {"answer": {}},
                    "required": ["answer"],
                },
            }
        )
    return out


async def _chat(client: Any, messages: list[dict[str, str]], max_tokens: int) -> tuple[str, bool]:
    """The model's reply and whether it was cut at `max_tokens` (`finish_reason` length)."""
    response = await client.chat(messages, max_tokens=max_tokens)
    return response.content or "", response.finish_reason == "length"


#: HTTP statuses that refuse a request for its content (an over-window conversation: 400),
#: so the task ends there; any other failure of the server stops the run (resumable)
CONTENT_REFUSALS = (400, 413, 422)


def normalized(program: str) -> str:
    """A program without trailing blanks and blank lines: two sends differing only there match."""
    return "\n".join(line.rstrip() for line in program.splitlines() if line.strip())


def change_summary(before: str, after: str) -> str:
    """How a program changed, in words: 'changed 3 lines (+2, -1)' or 'no change'."""
    diff = list(difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0))
    added = sum(d.startswith("+") and not d.startswith("+++") for d in diff)
    removed = sum(d.startswith("-") and not d.startswith("---") for d in diff)
    if not added and not removed:
        return "no change"
    return f"changed {max(added, removed)} lines (+{added}, -{removed})"


class Attempts:
    """The programs one conversation sent: what each gave, and what the next message says.

    A weak model re-sends nearly the same program after each repair message; telling it
    what changed (and that the same error came back) and refusing to run a program it
    already sent keeps a conversation from looping on one failure.
    """

    def __init__(self) -> None:
        self.count = 0
        self.repeats = 0
        self._tried: dict[str, tuple[int, str]] = {}  # program key -> (attempt, outcome)
        self._last: tuple[str, str] | None = None  # (program, feedback) of the last failure

    @staticmethod
    def key(program: str) -> str:
        """The identity of a program (its normalized text, hashed)."""
        return hashlib.sha256(normalized(program).encode()).hexdigest()

    def repeated(self, program: str, level: int) -> str | None:
        """The message for a program sent before, or None for a new one."""
        seen = self._tried.get(self.key(program))
        if seen is None:
            return None
        self.repeats += 1
        first, outcome = seen
        goal = "pass" if "failed" in outcome else f"make the task harder (level {level})"
        return REPEATED.format(first=first, outcome=outcome, goal=goal)

    def failed(self, program: str | None, feedback: str) -> str:
        """Record a failed attempt; the repair message, with what changed since the last one."""
        change = ""
        if program is not None and self._last is not None:
            before, last_feedback = self._last
            change = f"Compared with your previous program you {change_summary(before, program)}"
            change += (
                "; the error is the same, so that change did not fix it.\n"
                if feedback == last_feedback
                else ".\n"
            )
        if program is not None:
            self._tried[self.key(program)] = (self.count, f"failed with:\n{feedback}")
            self._last = (program, feedback)
        return REPAIR.format(error=feedback, change=change)

    def passed(self, program: str, level: int) -> None:
        """Record a program that verified at `level` (sending it again asks for no harder task)."""
        self._tried[self.key(program)] = (self.count, f"verified at level {level}.")
        self._last = None


def synthesize_with_llm(
    config: Any,
    category: TaskGenerator,
    tid: str,
    db_path: Path,
    rel: str,
    level: int,
    rng: np.random.Generator,
    note: Callable[[str], None] | None = None,
) -> tuple[TaskRecord | None, str]:
    """Ask the model for a program, repair it until it verifies, harden it up to `level`.

    Returns the record (None when no level verified) and how the conversation ended;
    `note(line)` is told each attempt's outcome (the run writes it to its progress log).
    """
    from gemkit.llm import LLMClient

    say = note or (lambda line: None)

    async def converse() -> tuple[TaskRecord | None, str]:
        from gemkit.llm.client import LLMError

        client = LLMClient(
            base_url=config.llm,
            model=config.model,
            seed=int(rng.integers(2**31)),
            timeout=config.timeout,
        )
        max_tokens = config.max_tokens
        sandbox = make_sandbox()
        start = [
            {
                "role": "system",
                "content": SYSTEM.format(category=category.name, description=category.description),
            },
            {"role": "user", "content": f"Write the level-1 program for a {category.name} task."},
        ]
        last: list[dict[str, str]] = []  # the latest program and what gemkit said about it
        good: dict[str, Any] | None = None
        history: list[dict[str, Any]] = []
        tries = Attempts()
        ended = ""
        try:
            current = 1
            repairs = 0
            while True:
                try:
                    reply, cut = await _chat(client, start + last, max_tokens)
                except LLMError as e:
                    if e.status not in CONTENT_REFUSALS:
                        raise
                    ended = f"the model server refused the conversation: {e}"
                    say(f"level {current} attempt {tries.count + 1}: {ended}")
                    break
                tries.count += 1
                program = extract_program(reply)
                answer: str | None = None
                again = tries.repeated(program, current) if program else None
                if again is not None:
                    say(f"level {current} attempt {tries.count}: the same program as before")
                    if tries.repeats > MAX_REPEATS:
                        ended = "the model sent a program it had already sent, again"
                        break
                    answer = again
                elif program is None and cut:
                    say(f"level {current} attempt {tries.count}: cut at {max_tokens} tokens")
                    answer = CUT.format(max_tokens=max_tokens)
                if answer is not None:
                    repairs += 1
                    if repairs > config.max_repairs:
                        ended = f"no level-{current} program verified in {repairs} repairs"
                        break
                    last = [
                        {"role": "assistant", "content": reply},
                        {"role": "user", "content": answer},
                    ]
                    continue
                result: dict[str, Any] = (
                    run_program(program, sandbox)
                    if program
                    else {"ok": False, "error": "no ```python block in the reply"}
                )
                if result.get("ok"):
                    assert program is not None
                    tries.passed(program, current)
                    say(f"level {current} attempt {tries.count}: verified")
                    good = {"program": program, "result": result, "level": current}
                    history.append(
                        {
                            "level": current,
                            "added": list(result["task"].get("constraints", [])),
                            "tools_added": [t["name"] for t in result["tools"]],
                            "n_valid_solutions": None,
                            "repairs": repairs,
                        }
                    )
                    if current >= level:
                        ended = f"level {current} verified"
                        break
                    current += 1
                    repairs = 0
                    last = [
                        {"role": "assistant", "content": reply},
                        {"role": "user", "content": HARDER.format(level=current)},
                    ]
                    continue
                feedback = _feedback(result)
                say(f"level {current} attempt {tries.count}: failed: {feedback}")
                repairs += 1
                if repairs > config.max_repairs:
                    ended = f"no level-{current} program verified in {config.max_repairs} repairs"
                    break
                last = [
                    {"role": "assistant", "content": reply},
                    {"role": "user", "content": tries.failed(program, feedback)},
                ]
        finally:
            sandbox.close()
            await client.close()
        say(f"ended after {tries.count} model replies: {ended}")
        if good is None:
            return None, ended
        return _record(good, history, category, tid, db_path, rel, config), ended

    return asyncio.run(converse())


def _record(
    good: dict[str, Any],
    history: list[dict[str, Any]],
    category: TaskGenerator,
    tid: str,
    db_path: Path,
    rel: str,
    config: Any,
) -> TaskRecord:
    result, program = good["result"], good["program"]
    db_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = db_path.with_name(db_path.name + ".tmp")
    tmp.write_bytes(base64.b64decode(result["database"]))
    tmp.replace(db_path)
    task = result["task"]
    return TaskRecord(
        id=tid,
        category=category.name,
        level=good["level"],
        database=rel,
        tools=[ToolSchema(**t) for t in tool_schemas(result["tools"])],
        task=TaskText(
            prompt=str(task.get("prompt", "")), answer_format=str(task.get("answer_format", ""))
        ),
        constraints=[str(c) for c in task.get("constraints", [])],
        verifier=Code(kind="code", code=program, entry="verify"),
        solution=Code(kind="code", code=solution_source(program), entry="solution"),
        reference_answer=result.get("answer"),
        history=history,
        seed=[config.seed],
        model=config.model,
    )


__all__ = [
    "extract_program",
    "run_program",
    "synthesize_with_llm",
    "tool_schemas",
]
