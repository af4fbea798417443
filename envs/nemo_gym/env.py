"""`NemoGymEnv`: a NeMo Gym resources server's rollouts under gemkit's contract.

A NeMo Gym rollout is a dataset row (`responses_create_params`: the input messages and the
tools; plus what `seed_session` takes), one session cookie across its requests,
`POST /seed_session` with the row, `POST /<tool>` per tool call, and `POST /verify` with the
final response, which answers the `reward`. Here:

- `reset(seed)` picks row `seed` (modulo the rows; drawn when None), seeds a new session with
  it, and returns the row's last user message (the earlier input is in `info["input"]`, the
  tools in `info["tools"]`);
- an action holding a tool call (`<tool_call>{"name": ..., "arguments": {...}}</tool_call>`,
  or that JSON alone) calls the tool; its answer, as JSON text, is the observation (reward 0);
- any other action is the final answer: it goes to `verify` as the response's text, the
  episode ends with verify's `reward`, `info["success"]` is verify's own when it sends one
  (else a positive reward), and `info["verify"]` holds the rest of its answer.

A tool the row does not offer, or an error the server answers, is an observation that says so;
a server that cannot be reached raises `GemkitError`.
"""

from __future__ import annotations

import http.cookiejar
import json
import re
import time
import urllib.error
import urllib.request
from typing import Any

from gemkit.core import Env, ResetResult, StepResult
from gemkit.errors import GemkitError

_TOOL_CALL = re.compile(r"<tool_call>\s*(\{.*\})\s*</tool_call>", re.DOTALL)


def _tool_call(action: str) -> tuple[str, dict[str, Any]] | None:
    """`(name, arguments)` when the action is a tool call, else None."""
    match = _TOOL_CALL.search(action)
    text = match.group(1) if match else action.strip()
    if not text.startswith("{"):
        return None
    try:
        call = json.loads(text)
    except ValueError:
        return None
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        return None
    arguments = call.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return None
    return (call["name"], arguments) if isinstance(arguments, dict) else None


def _response(text: str) -> dict[str, Any]:
    """A Responses API response whose output is one assistant message."""
    return {
        "id": f"gemkit-{time.monotonic_ns()}",
        "created_at": int(time.time()),
        "model": "gemkit",
        "object": "response",
        "output": [
            {
                "type": "message",
                "id": "msg-gemkit",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        ],
        "parallel_tool_calls": False,
        "tool_choice": "auto",
        "tools": [],
    }


class NemoGymEnv(Env):
    """Rollouts of the NeMo Gym resources server at `base_url`, one per dataset row."""

    def __init__(
        self,
        base_url: str | None = None,
        rows: list[dict[str, Any]] | None = None,
        timeout_s: float = 120.0,
    ):
        if not base_url or not rows:
            raise GemkitError(
                "nemo_gym:Server-v0 needs the server and its dataset rows: gemkit.make("
                "'nemo_gym:Server-v0', base_url='http://127.0.0.1:8000', rows=[...])"
            )
        self.base_url, self.rows, self.timeout_s = base_url.rstrip("/"), list(rows), timeout_s
        self._opener: Any = None
        self.row: dict[str, Any] = {}
        self.done = True

    def _post(self, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        request = urllib.request.Request(
            self.base_url + path, json.dumps(body).encode(), {"Content-Type": "application/json"}
        )
        try:
            with self._opener.open(request, timeout=self.timeout_s) as r:
                return r.status, json.load(r)
        except urllib.error.HTTPError as e:
            text = e.read().decode(errors="replace")[:500]
            return e.code, text
        except (OSError, ValueError) as e:
            raise GemkitError(
                f"the NeMo Gym server at {self.base_url} cannot be reached ({e})"
            ) from e

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> ResetResult:
        """Seed a new session with row `seed`; the row's last user message is the observation."""
        super().reset(seed=seed)
        pick = seed if seed is not None else int(self.np_random.integers(2**31))
        self.row = self.rows[pick % len(self.rows)]
        self._opener = urllib.request.build_opener(
            urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar())
        )
        body = {k: v for k, v in self.row.items() if k != "responses_create_params"}
        status, answer = self._post("/seed_session", body)
        if status != 200:
            raise GemkitError(f"the NeMo Gym server refused seed_session ({status}): {answer}")
        params = self.row.get("responses_create_params", {})
        messages = params.get("input", [])
        text = next(
            (m.get("content", "") for m in reversed(messages) if m.get("role") == "user"), ""
        )
        self.done = False
        return str(text), {
            "input": messages,
            "tools": params.get("tools", []),
            "seed_session": answer,
        }

    def step(self, action: str) -> StepResult:
        """A tool call calls the tool; anything else is the final answer, verified."""
        if self.done:
            return "The episode is over; call reset() to start a new one.", 0.0, True, False, {}
        action = action if isinstance(action, str) else str(action)
        call = _tool_call(action)
        if call is not None:
            name, arguments = call
            offered = {
                t.get("name") for t in self.row.get("responses_create_params", {}).get("tools", [])
            }
            if name not in offered:
                obs = f"There is no tool {name!r}; the tools are: {', '.join(sorted(map(str, offered)))}."
                return obs, 0.0, False, False, {"invalid": obs}
            status, answer = self._post(f"/{name}", arguments)
            if status != 200:
                obs = f"The tool {name!r} answered an error ({status}): {answer}"
                return obs, 0.0, False, False, {"invalid": obs}
            return json.dumps(answer), 0.0, False, False, {"tool": name}
        body = {
            "responses_create_params": self.row.get("responses_create_params", {}),
            "response": _response(action),
        }
        status, answer = self._post("/verify", body)
        self.done = True
        if status != 200 or not isinstance(answer, dict):
            return (
                f"The server could not verify the answer ({status}): {answer}",
                0.0,
                False,
                True,
                {
                    "error": str(answer),
                    "success": False,
                },
            )
        reward = float(answer.get("reward", 0.0))
        verify = {
            k: v for k, v in answer.items() if k not in ("responses_create_params", "response")
        }
        success = bool(answer["success"]) if "success" in answer else reward > 0
        return (
            "The answer was verified.",
            reward,
            True,
            False,
            {"verify": verify, "success": success},
        )
