"""`OpenEnvClientEnv`: a session on an OpenEnv server under gemkit's contract.

OpenEnv's WebSocket endpoint `/ws` gives each connection its own env; OpenEnv's own
`GenericEnvClient` speaks it (`reset(**kwargs)`, `step(action_dict)`, answers with
`observation` (a dict), `reward` and `done`). Here:

- an action is the model's text: a JSON object is sent as the action itself; other text goes
  into the action's one required field (read from the server's `/schema`, or `action_field=`);
- the observation is the observation's text field (`observation_field=`, else the first of
  `text`, `prompt`, `message`, `observation`, `content` that is a string, else the whole
  observation as JSON); `info["observation"]` carries the whole dict;
- `terminated`/`truncated` are the server's when it sends them (a gemkit env served by
  `gemkit.integrations.openenv` does), else `done` is `terminated`; `info["success"]` is the
  served env's own when it sends one, else whether the last reward was positive;
- an action the server refuses (a validation error) is answered with its message and the
  episode goes on; a server that cannot be reached raises `GemkitError`.

Each env holds one connection on a background event loop shared by the process, so the sync
and async methods both work and a vector's envs keep their sessions apart. A remote session
cannot be copied: `clone()` raises.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import urllib.request
from collections.abc import Coroutine
from typing import Any

from gemkit.core import Env, ResetResult, StepResult
from gemkit.errors import GemkitError

TEXT_FIELDS = ("text", "prompt", "message", "observation", "content")

_loop: asyncio.AbstractEventLoop | None = None
_loop_lock = threading.Lock()


def _background_loop() -> asyncio.AbstractEventLoop:
    """The process's event loop for OpenEnv connections, in a daemon thread."""
    global _loop
    with _loop_lock:
        if _loop is None:
            _loop = asyncio.new_event_loop()
            threading.Thread(target=_loop.run_forever, name="gemkit-openenv", daemon=True).start()
        return _loop


def _import_client() -> Any:
    try:
        from openenv.core import GenericEnvClient
    except ImportError as e:
        raise GemkitError(f"openenv: envs need OpenEnv: pip install 'gemkit[openenv]' ({e})") from e
    return GenericEnvClient


def observation_text(observation: dict[str, Any], field: str | None = None) -> str:
    """The text a model reads from an OpenEnv observation dict."""
    if field is not None:
        value = observation.get(field)
        return value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    for name in TEXT_FIELDS:
        if isinstance(observation.get(name), str):
            return observation[name]
    return json.dumps(observation, sort_keys=True, default=str)


class OpenEnvClientEnv(Env):
    """A session on the OpenEnv server at `base_url` (http:// or ws://)."""

    def __init__(
        self,
        base_url: str | None = None,
        *,
        action_field: str | None = None,
        observation_field: str | None = None,
        message_timeout_s: float = 60.0,
    ):
        if not base_url:
            raise GemkitError(
                "openenv:Remote-v0 needs the server: gemkit.make('openenv:Remote-v0', "
                "base_url='http://127.0.0.1:8000')"
            )
        self.base_url = base_url.rstrip("/")
        self.action_field = action_field
        self.observation_field = observation_field
        self._client = _import_client()(base_url=self.base_url, message_timeout_s=message_timeout_s)
        self._schema: dict[str, Any] | None = None
        self.done = True

    def _run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, _background_loop()).result()

    async def _arun(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, _background_loop()))

    def _http_base(self) -> str:
        return self.base_url.replace("ws://", "http://", 1).replace("wss://", "https://", 1)

    def _field(self) -> str | None:
        """The action's one required field, from the server's schema (read once)."""
        if self.action_field is not None:
            return self.action_field
        if self._schema is None:
            try:
                with urllib.request.urlopen(f"{self._http_base()}/schema", timeout=10) as r:
                    self._schema = json.load(r).get("action", {})
            except (OSError, ValueError) as e:
                raise GemkitError(f"could not read {self._http_base()}/schema ({e})") from e
        required = self._schema.get("required", [])
        return required[0] if len(required) == 1 else None

    def _payload(self, action: Any) -> tuple[dict[str, Any] | None, str | None]:
        """The action dict to send, or `(None, why)` when the text cannot be one."""
        if isinstance(action, dict):
            return action, None
        if not isinstance(action, str):
            return None, f"An action is text, got {type(action).__name__}."
        try:
            parsed = json.loads(action)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            return parsed, None
        field = self._field()
        if field is None:
            fields = ", ".join(self._schema.get("properties", {})) if self._schema else "?"
            return None, f"This env takes an action as a JSON object with the fields {fields}."
        return {field: action}, None

    def _result(self, result: Any) -> StepResult:
        observation = dict(result.observation or {})
        reward = float(result.reward or 0.0)
        served = "terminated" in observation and "truncated" in observation
        terminated = bool(observation.get("terminated")) if served else bool(result.done)
        truncated = bool(observation.get("truncated")) if served else False
        info: dict[str, Any] = {"observation": observation}
        if terminated or truncated:
            self.done = True
            served_info = observation.get("info")
            if isinstance(served_info, dict) and "success" in served_info:
                info["success"] = bool(served_info["success"])
            elif "success" in observation:
                info["success"] = bool(observation["success"])
            else:
                info["success"] = reward > 0
        return (
            observation_text(observation, self.observation_field),
            reward,
            terminated,
            truncated,
            info,
        )

    async def _areset(self, seed: int | None, options: dict[str, Any] | None) -> ResetResult:
        kwargs: dict[str, Any] = dict(options or {})
        if seed is not None:
            kwargs["seed"] = seed
        try:
            result = await self._client.reset(**kwargs)
        except (ConnectionError, OSError) as e:
            raise GemkitError(
                f"the OpenEnv server at {self.base_url} cannot be reached ({e})"
            ) from e
        self.done = False
        observation = dict(result.observation or {})
        return observation_text(observation, self.observation_field), {"observation": observation}

    async def _astep(self, action: Any) -> StepResult:
        if self.done:
            return "The episode is over; call reset() to start a new one.", 0.0, True, False, {}
        payload, problem = self._payload(action)
        if payload is None:
            return problem or "", 0.0, False, False, {"invalid": problem}
        try:
            result = await self._client.step(payload)
        except RuntimeError as e:  # the server refused the action ("Server error: ...")
            return f"The env refused this action: {e}", 0.0, False, False, {"invalid": str(e)}
        except (ConnectionError, OSError) as e:
            raise GemkitError(
                f"the OpenEnv server at {self.base_url} cannot be reached ({e})"
            ) from e
        return self._result(result)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> ResetResult:
        """Reset the session's env (`options` go to the server's reset as keyword arguments)."""
        super().reset(seed=seed)
        return self._run(self._areset(seed, options))

    async def areset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> ResetResult:
        """Async twin of `reset`."""
        super().reset(seed=seed)
        return await self._arun(self._areset(seed, options))

    def step(self, action: str) -> StepResult:
        """Send one action."""
        return self._run(self._astep(action))

    async def astep(self, action: str) -> StepResult:
        """Async twin of `step`."""
        return await self._arun(self._astep(action))

    def clone(self) -> Env:
        """Not possible: a session lives on the server, which copies nothing."""
        raise GemkitError("an OpenEnv session lives on its server and cannot be cloned")

    def close(self) -> None:
        """Close the session: ask the server to close it, then wait for it to hang up."""
        if self._client is not None:
            self._run(self._disconnect())
            self._client = None

    async def _disconnect(self) -> None:
        # OpenEnv's `disconnect()` hangs up right after its "close" message, and the server,
        # closing the socket it was about to close, logs a traceback: let the server hang up
        ws = getattr(self._client, "_ws", None)
        if ws is None:
            return
        with contextlib.suppress(Exception):
            await ws.send(json.dumps({"type": "close"}))
            await asyncio.wait_for(ws.wait_closed(), 10)
        await self._client.disconnect()
