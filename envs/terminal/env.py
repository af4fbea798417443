"""`terminal:` envs: shell tasks solved through a `bash` tool, graded by tests in the sandbox.

`make_terminal` returns a `TerminalWrapper` (a `ToolEnvWrapper` holding the `bash` tool)
around a `TerminalEnv`. Each `reset` starts a fresh terminal (a Docker container, or a
bubblewrap sandbox) holding the task's files; each `bash` call runs one command there. The
episode ends when the agent answers without a tool call (its submission) or when its turns
run out; then the terminal is sealed (every agent process killed, /work reduced to regular
files and folders, read-only) and the task's tests run there as a grader user. Reward is 1
when every test passes (the pass fraction with `partial_credit=True`); `info` holds
`pass_fraction`, each test, and the paths sealing deleted (`dropped`).
"""

from __future__ import annotations

import asyncio
import copy
import logging
import re
from collections.abc import Sequence
from typing import Any, cast

from pydantic import BaseModel, Field

from gemkit.core import Env, ResetResult, StepResult
from gemkit.envs.terminal.backends import open_terminal
from gemkit.envs.terminal.task import Task, TaskError, TaskTest, builtin_tasks, get_task
from gemkit.envs.terminal.terminal import CommandResult, Limits, Terminal, TerminalError
from gemkit.policy import SyncPolicy
from gemkit.tools.base import Tool, ToolResult
from gemkit.tools.wrapper import ToolEnvWrapper

log = logging.getLogger(__name__)

#: seconds each test may run
TEST_TIMEOUT = 20.0
#: characters of a failing test's output kept in `info`
TEST_OUTPUT_CHARS = 2_000
#: deleted paths named in the observation (all are in `info["dropped"]`)
DROPPED_SHOWN = 5
TASK_HEADER = "# Terminal task: {name}"
GUIDE = """\
You work in a Linux terminal through the `bash` tool: each call runs one command line with
`sh` (POSIX shell; BusyBox or GNU tools) in /work, a fresh shell each time (`cd` does not
carry over: chain commands with `&&`). /work and /tmp are writable, the rest is read-only,
and there is no network. Commands are stopped after {timeout:g} seconds and long output is cut.
You have {turns} turns. When the task is done, reply without a tool call (for example
`submit`): the task's tests then run."""


class TerminalEnv(Env):
    """The inner env: one task per episode in a fresh terminal; a final answer runs the tests.

    Give `task=` (a name or a `Task`) for a single task, or `tasks=` (names; all shipped
    tasks when neither is given) to draw one per episode with `self.np_random`;
    `reset(options={"task": NAME})` picks one.
    """

    def __init__(
        self,
        task: str | Task | None = None,
        *,
        tasks: Sequence[str | Task] | None = None,
        backend: str = "auto",
        max_turns: int | None = None,
        command_timeout: float | None = None,
        memory_mb: int = 256,
        cpus: float = 1.0,
        pids: int = 64,
        disk_mb: int = 64,
        max_output: int = 10_000,
        max_files: int = 20_000,
        partial_credit: bool = False,
    ):
        if task is not None:
            pool = [task]
        elif tasks:
            pool = list(tasks)
        else:
            pool = list(builtin_tasks().values())
        self.tasks: dict[str, Task] = {}
        for t in pool:
            resolved = get_task(t) if isinstance(t, str) else t
            self.tasks[resolved.name] = resolved
        self.backend = backend
        self.max_turns = max_turns
        self.command_timeout = command_timeout
        self.limits = Limits(
            memory_mb=memory_mb,
            cpus=cpus,
            pids=pids,
            disk_mb=disk_mb,
            max_output=max_output,
            max_files=max_files,
        )
        self.partial_credit = partial_credit
        self.task: Task | None = None
        self.terminal: Terminal | None = None
        self._image = ""
        self.done = False
        self.turns = 0

    # -- limits of the current task ------------------------------------------------------

    def turn_limit(self) -> int:
        """Agent messages allowed this episode."""
        return self.max_turns or (self.task.max_turns if self.task else 20)

    def time_limit(self) -> float:
        """Seconds one command may run."""
        return self.command_timeout or (self.task.command_timeout if self.task else 20.0)

    # -- what the wrapper calls -------------------------------------------------------------

    def count_turn(self) -> None:
        """Count one agent message of this episode (the wrapper calls it for each action)."""
        if self.task is None:
            raise TerminalError("call reset() before step()")
        self.turns += 1

    def turns_left_over(self, truncated: bool = False) -> bool:
        """Whether the episode is still open though its turns are spent (or it was truncated)."""
        return not self.done and (truncated or self.turns >= self.turn_limit())

    # -- what the bash tool calls ------------------------------------------------------------

    def run_command(self, command: str) -> CommandResult:
        """Run one shell command in this episode's terminal."""
        if self.terminal is None or not self.terminal.running or self.task is None:
            raise TerminalError("no episode is running: call reset() first")
        if self.done:
            return CommandResult("The episode is over: the tests have run.", 1)
        return self.terminal.run(command, timeout=self.time_limit())

    # -- the episode -------------------------------------------------------------------------

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> ResetResult:
        """Start a fresh terminal with a task's files and set-up; show the task."""
        super().reset(seed=seed)
        options = options or {}
        name = options.get("task")
        names = list(self.tasks)
        if name is None:
            name = names[int(self.np_random.integers(len(names)))]
        if name not in self.tasks:
            raise TaskError(f"task {name!r} is not in this env; choose from {names}")
        self.task = self.tasks[name]
        if self.terminal is not None and self._image != self.task.image:
            self.terminal.close()
            self.terminal = None
        if self.terminal is None:
            self.terminal = open_terminal(self.backend, self.limits, image=self.task.image)
            self._image = self.task.image
        self.terminal.start(dict(self.task.files))  # a terminal takes text or bytes
        if self.task.setup.strip():
            result = self.terminal.run(self.task.setup, timeout=60)
            if result.exit_code != 0:
                raise TaskError(
                    f"task {name}: its set-up script failed ({result.exit_code}): {result.output}"
                )
        self.done = False
        self.turns = 0
        guide = GUIDE.format(timeout=self.time_limit(), turns=self.turn_limit())
        obs = f"{TASK_HEADER.format(name=name)}\n\n{self.task.instruction}\n\n{guide}"
        info = {
            "task": name,
            "backend": self.terminal.backend,
            "max_turns": self.turn_limit(),
            "tests": len(self.task.tests),
        }
        return obs, info

    def step(self, action: Any) -> StepResult:
        """A final answer (any text without a tool call): run the tests and end the episode."""
        if self.task is None or self.terminal is None:
            raise TerminalError("call reset() before step()")
        if self.done:
            return "The episode is over; call reset().", 0.0, True, False, {"success": False}
        return self.finish()

    def finish(self, *, truncated: bool = False) -> StepResult:
        """Seal the terminal, run every test there as the grader, score the episode, end it."""
        assert self.task is not None and self.terminal is not None
        broken = ""  # why the terminal cannot grade: then every test left fails
        dropped: list[str] = []
        try:
            dropped = self.terminal.seal()
        except TerminalError as e:
            broken = str(e)
        results = []
        for test in self.task.tests:
            entry: dict[str, Any] = {"name": test.name, "passed": False}
            if broken:
                entry.update(exit_code=-1, output=broken)
                results.append(entry)
                continue
            try:
                r = self.terminal.run_test(test.run, TEST_TIMEOUT, output_limit(test))
            except TerminalError as e:
                broken = str(e)
                entry.update(exit_code=-1, output=broken)
                results.append(entry)
                continue
            entry["passed"] = passes(test, r)
            if not entry["passed"]:
                entry["exit_code"] = r.exit_code
                entry["output"] = r.output[:TEST_OUTPUT_CHARS]
            results.append(entry)
        self.done = True
        passed = sum(r["passed"] for r in results)
        fraction = passed / len(results) if results else 0.0
        success = passed == len(results)
        reward = fraction if self.partial_credit else float(success)
        lines = [f"{'PASS' if r['passed'] else 'FAIL'} {r['name']}" for r in results]
        notes = ["Turns used up: the tests ran on the terminal as it is."] if truncated else []
        if dropped:
            shown = ", ".join(dropped[:DROPPED_SHOWN]) + (
                ", ..." if len(dropped) > DROPPED_SHOWN else ""
            )
            notes.append(
                f"Graded without {len(dropped)} entries of /work that are not regular files "
                f"or folders (links, FIFOs, ...): {shown}"
            )
        obs = "\n".join([*notes, f"Tests: {passed}/{len(results)} passed.", *lines])
        info = {
            "success": success,
            "pass_fraction": fraction,
            "test_results": results,
            "task": self.task.name,
            "dropped": dropped,
        }
        return obs, float(reward), not truncated, truncated, info

    async def areset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> ResetResult:
        """`reset` in a worker thread: starting a container blocks."""
        return await asyncio.to_thread(self.reset, seed=seed, options=options)

    async def astep(self, action: Any) -> StepResult:
        """`step` in a worker thread: the tests run in the terminal."""
        return await asyncio.to_thread(self.step, action)

    def close(self) -> None:
        """Remove the terminal (container or sandbox folder)."""
        if self.terminal is not None:
            self.terminal.close()
            self.terminal = None

    def __deepcopy__(self, memo: dict[int, Any]) -> TerminalEnv:
        if self.terminal is not None and self.terminal.running:
            raise TerminalError(
                "a terminal env in an episode holds a live container and cannot be cloned; "
                "make a new env and reset it with the same seed and task instead"
            )
        new = copy.copy(self)
        memo[id(self)] = new
        new.np_random = copy.deepcopy(self.np_random, memo)
        new.terminal = None
        return new


def output_limit(test: TaskTest) -> int:
    """Bytes of a test's output to bring back: enough to tell `expect` from anything longer."""
    return max(TEST_OUTPUT_CHARS, len(test.expect.encode()) + 1 if test.expect else 0)


def passes(test: TaskTest, result: CommandResult) -> bool:
    """A test passes when it exited 0 in time and printed exactly its `expect`, if it has one."""
    if result.exit_code != 0 or result.timed_out:
        return False
    if test.expect is None:
        return True
    want = test.expect.encode()
    return result.output_bytes == len(want) and result.raw == want


class BashArgs(BaseModel):
    """Arguments of the bash tool."""

    command: str = Field(description="A shell command line, run with sh in /work.")


class BashTool(Tool):
    """Runs a command in the episode's terminal and returns its output and exit status."""

    name = "bash"
    description = (
        "Run a shell command line in the task's Linux terminal (working directory /work, "
        "no network) and return its output (stdout and stderr) and exit status."
    )
    Args = BashArgs
    parallel_safe = False  # commands of one terminal run in order

    def __init__(self, env: TerminalEnv):
        self.env = env

    async def call(self, args: BaseModel) -> ToolResult:
        """Run `args.command`; a non-zero exit status is reported as an error result."""
        command = getattr(args, "command", "")
        if not isinstance(command, str) or not command.strip():
            return ToolResult("no command given: pass a shell command, e.g. ls -la", True)
        result = await asyncio.to_thread(self.env.run_command, command)
        return format_command_result(result, self.env.time_limit())

    def clone(self) -> BashTool:
        """A tool bound to the same env (the wrapper rebinds it to a cloned env)."""
        return BashTool(self.env)


def format_command_result(result: CommandResult, timeout: float) -> ToolResult:
    """The text the agent sees for one command."""
    text = result.output.rstrip("\n")
    if result.timed_out:
        note = f"[stopped: the command ran past the {timeout:g} s limit]"
    else:
        note = f"[exit status {result.exit_code}]"
    text = f"{text}\n{note}" if text else note
    return ToolResult(
        text,
        is_error=result.exit_code != 0 or result.timed_out,
        metadata={
            "exit_code": result.exit_code,
            "timed_out": result.timed_out,
            "truncated": result.truncated,
            "duration": result.duration,
        },
    )


class TerminalWrapper(ToolEnvWrapper):
    """The `bash` tool loop around a `TerminalEnv`; the tests also run when turns run out."""

    async def astep(self, action: Any) -> StepResult:
        """Run the bash calls, or take a final answer; end with the tests at the turn limit."""
        inner: TerminalEnv = self.env.unwrapped  # type: ignore[assignment]
        inner.count_turn()
        obs, reward, terminated, truncated, info = await super().astep(action)
        if inner.turns_left_over(truncated):
            fobs, freward, _, _, finfo = await asyncio.to_thread(inner.finish, truncated=True)
            return f"{obs}\n\n{fobs}", reward + freward, False, True, {**info, **finfo}
        return obs, reward, terminated, truncated, info

    def clone(self) -> TerminalWrapper:
        """A copy whose bash tool runs in the copy's own env (only between episodes)."""
        new = cast(TerminalWrapper, super().clone())  # a deep copy of this wrapper
        new.replace_tools([BashTool(cast(TerminalEnv, new.env.unwrapped))])
        return new


def make_terminal(
    task: str | Task | None = None,
    *,
    tasks: Sequence[str | Task] | None = None,
    backend: str = "auto",
    max_turns: int | None = None,
    command_timeout: float | None = None,
    partial_credit: bool = False,
    memory_mb: int = 256,
    cpus: float = 1.0,
    pids: int = 64,
    disk_mb: int = 64,
    max_output: int = 10_000,
    max_files: int = 20_000,
    **wrapper_kwargs: Any,
) -> TerminalWrapper:
    """A terminal env: the task env wrapped with its `bash` tool."""
    inner = TerminalEnv(
        task,
        tasks=tasks,
        backend=backend,
        max_turns=max_turns,
        command_timeout=command_timeout,
        partial_credit=partial_credit,
        memory_mb=memory_mb,
        cpus=cpus,
        pids=pids,
        disk_mb=disk_mb,
        max_output=max_output,
        max_files=max_files,
    )
    wrapper_kwargs.setdefault("max_tool_uses", None)  # the turn limit bounds the episode
    wrapper_kwargs.setdefault("call_timeout", None)  # each command has its own time limit
    return TerminalWrapper(inner, [BashTool(inner)], **wrapper_kwargs)


_HEADER_RE = re.compile(r"^# Terminal task: (\w+)", re.MULTILINE)


class TerminalExpert(SyncPolicy):
    """Plays a task's reference solution in one `bash` call, then submits."""

    def __init__(self, task: str | Task | None = None, **_: Any):
        self.task = get_task(task) if isinstance(task, str) else task
        self.reset()

    def reset(self) -> None:
        """Start over: the next action is the solution."""
        self._sent = False

    def choose(self, observation: str) -> str:
        """The solution as a tag call on the first turn, `submit` after."""
        match = _HEADER_RE.search(observation)
        if match is not None:  # a new episode: the suite may have drawn any task
            self.task = get_task(match.group(1))
            self._sent = False
        if self._sent or self.task is None:
            return "submit"
        self._sent = True
        return f"<bash>{self.task.solution}</bash>"
