"""The sandboxed Python tool: runs the model's code and returns what it printed.

Stateless by default (each call in a fresh interpreter state, calls may run in parallel);
`stateful=True` keeps one session per tool instance (an episode), so variables survive between
calls until `reset()`.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from gemkit.sandbox import ExecResult, Sandbox, Session, shared_sandbox
from gemkit.tools.base import Tool, ToolResult


class PythonArgs(BaseModel):
    """Arguments of the python tool."""

    code: str = Field(description="Python source to run; print() what you want to see.")


def format_result(result: ExecResult) -> ToolResult:
    """Turn an `ExecResult` into the text the model sees."""
    parts: list[str] = []
    if result.stdout:
        parts.append(result.stdout.rstrip("\n"))
    failed = not result.ok
    if failed:
        tail = _traceback_tail(result.stderr) if result.limit_hit is None else ""
        if tail:
            parts.append(tail)
        elif result.exception:
            parts.append(result.exception)
        elif result.exit_code != 0:
            parts.append(f"SystemExit: the code exited with status {result.exit_code}")
    elif result.stderr.strip():
        parts.append(result.stderr.rstrip("\n"))
    if result.session_lost:
        parts.append("(the Python session was restarted: earlier variables are gone)")
    text = "\n".join(parts) if parts else "(no output; use print() to show values)"
    return ToolResult(
        text=text,
        is_error=failed,
        metadata={
            "exit_code": result.exit_code,
            "timed_out": result.timed_out,
            "limit_hit": result.limit_hit,
            "duration": result.duration,
        },
    )


def _traceback_tail(stderr: str, max_lines: int = 8) -> str:
    """The end of a traceback: the frames nearest the error and the exception line."""
    lines = stderr.rstrip("\n").splitlines()
    if not lines:
        return ""
    if len(lines) > max_lines:
        lines = ["Traceback (most recent call last, trimmed):", *lines[-(max_lines - 1) :]]
    return "\n".join(lines)


class PythonTool(Tool):
    """Runs Python in a sandbox (no network, no host files, CPU/memory/time limits)."""

    name = "python"
    description = (
        "Run Python 3 code in a sandbox and return its printed output (stdout) and any error. "
        "No network access. Use print() to see values."
    )
    Args = PythonArgs

    def __init__(
        self,
        *,
        stateful: bool = False,
        timeout: float = 10,
        memory_mb: int = 512,
        max_output: int = 10_000,
        backend: str = "auto",
        workers: int = 8,
    ):
        self.stateful = stateful
        # several stateless calls may run at once; a session runs one call at a time
        self.parallel_safe = not stateful  # type: ignore[misc]
        self.options: dict[str, Any] = {
            "timeout": timeout,
            "memory_mb": memory_mb,
            "max_output": max_output,
            "backend": backend,
            "workers": workers,
        }
        self._sandbox: Sandbox | None = None
        self._session: Session | None = None
        # fail here, with the install hint, rather than at the model's first call; no sandbox
        # process starts until then
        _ = self.sandbox

    @property
    def sandbox(self) -> Sandbox:
        """The sandbox this tool runs code in (started on first use)."""
        if self._sandbox is None:
            if self.stateful:
                self._sandbox = Sandbox(**{**self.options, "workers": 1})
            else:
                self._sandbox = shared_sandbox(**self.options)
        return self._sandbox

    async def call(self, args: BaseModel) -> ToolResult:
        """Run `args.code` and return its output (errors as `is_error=True`)."""
        code = args.code if isinstance(args, PythonArgs) else str(getattr(args, "code", ""))
        if not code.strip():
            return ToolResult("no code given: pass Python source, e.g. print(1 + 1)", is_error=True)
        if self.stateful:
            if self._session is None:
                self._session = self.sandbox.session()
            result = await self._session.run(code)
        else:
            result = await self.sandbox.run(code)
        return format_result(result)

    async def reset(self) -> None:
        """Start a new episode: a stateful session loses its variables and files."""
        if self._session is not None:
            await self._session.reset()

    async def close(self) -> None:
        """Stop this tool's session; the shared stateless pool stays up for other tools."""
        if self._session is not None:
            self._session.close()
            self._session = None
        if self.stateful and self._sandbox is not None:
            self._sandbox.close()
            self._sandbox = None

    def clone(self) -> PythonTool:
        """An unstarted tool with the same options (a clone never shares a session)."""
        opts = {k: v for k, v in self.options.items()}
        return PythonTool(stateful=self.stateful, **opts)

    def __repr__(self) -> str:
        mode = "stateful" if self.stateful else "stateless"
        return f"<PythonTool {mode} timeout={self.options['timeout']}s>"
