"""A tool-using agent written as a generator: yield a batch of calls, receive their results.

`GeneratorAgent` turns such a generator into a `SyncPolicy` for any `ToolEnvWrapper` env: each
yielded batch becomes one action of Hermes `<tool_call>` blocks, the next observation's tool
results are parsed back (JSON when they are JSON), and the generator's return value is
submitted with `submit_result` (or given as a final JSON answer).
"""

from __future__ import annotations

import json
import re
from collections.abc import Generator
from typing import Any

import numpy as np

from gemkit.policy import SyncPolicy

Call = tuple[str, dict[str, Any]]
Plan = Generator[list[Call], list[Any], Any]

_RESULT_HEADER = re.compile(r"^\[tool (result|error)(?: \d+/\d+)?: (.+?) \(id [^)]*\)\]$", re.M)


class ToolError(str):
    """A tool result that was an error (its text is the message)."""


def parse_results(observation: str) -> list[Any]:
    """The tool results of a `ToolEnvWrapper` observation, in order; JSON bodies are decoded."""
    heads = list(_RESULT_HEADER.finditer(observation))
    out: list[Any] = []
    for i, m in enumerate(heads):
        end = heads[i + 1].start() if i + 1 < len(heads) else len(observation)
        body = observation[m.end() : end].strip()
        if m.group(1) == "error":
            out.append(ToolError(body))
            continue
        try:
            out.append(json.loads(body))
        except json.JSONDecodeError:
            out.append(body)
    return out


def render_calls(calls: list[Call]) -> str:
    """One action holding every call as a Hermes `<tool_call>` block."""
    return "\n".join(
        "<tool_call>" + json.dumps({"name": n, "arguments": a}, ensure_ascii=False) + "</tool_call>"
        for n, a in calls
    )


class GeneratorAgent(SyncPolicy):
    """A policy driven by `plan(prompt, rng)`, a generator of call batches returning the answer.

    `submit_tool` names the tool the answer is submitted with (None: a final JSON answer).
    """

    submit_tool: str | None = "submit_result"
    submit_argument: str = "plan"

    def __init__(self, seed: int | None = None, **_: Any):
        self.rng = np.random.default_rng(seed)
        self._gen: Plan | None = None
        self._done = False

    def plan(self, prompt: str, rng: np.random.Generator) -> Plan:
        """The agent's strategy (a generator); subclasses implement it."""
        raise NotImplementedError

    def reset(self) -> None:
        """Start a new episode (the rng carries on, so repeated tries differ)."""
        self._gen = None
        self._done = False

    def choose(self, observation: str) -> str:
        """Send the parsed results into the plan and render its next batch (or its answer)."""
        if self._done:
            return "[]"  # the submission was refused: a plain final answer ends the episode
        try:
            if self._gen is None:
                self._gen = self.plan(observation, self.rng)
                batch = next(self._gen)
            else:
                batch = self._gen.send(parse_results(observation))
        except StopIteration as stop:
            return self._final(stop.value)
        if not batch:
            return self._final(None)
        return render_calls(batch)

    def _final(self, answer: Any) -> str:
        self._done = True
        answer = [] if answer is None else answer
        if self.submit_tool is None:
            return json.dumps(answer, ensure_ascii=False)
        return render_calls([(self.submit_tool, {self.submit_argument: answer})])
