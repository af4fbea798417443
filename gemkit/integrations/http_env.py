"""Serve any gemkit env over HTTP, and `RemoteEnv`, a client with the same `Env` API.

Any trainer, in any process or language, can then play gemkit envs. One server holds many
sessions (one env each); every request and answer is JSON:

- `POST /reset {"session_id"?, "seed"?, "options"?}` -> `{"session_id", "observation", "info"}`
  (no `session_id`: a new session is opened; with one: that session's env is reset)
- `POST /step {"session_id", "action"}` ->
  `{"observation", "reward", "terminated", "truncated", "info"}`
- `POST /clone {"session_id"}` -> `{"session_id"}`: a new session in the same state
  (GRPO groups replaying one start state)
- `POST /close {"session_id"}` -> `{"closed": true}`
- `GET /health` -> `{"env_id", "sessions"}`

A bad request gets status 400 (404 for an unknown session) and `{"error": message}` saying
what was wrong and what is expected. Run it with `gemkit serve env ID --port P`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gemkit.core import Env, ResetResult, StepResult
from gemkit.errors import GemkitError

log = logging.getLogger(__name__)


class RemoteEnvError(GemkitError):
    """The env server refused a request or could not be reached; the message says why."""


def _dumps(payload: Any) -> str:
    # Infos may hold objects JSON does not know (numpy numbers, dataclasses): send their text.
    return json.dumps(payload, default=_jsonable)


def _jsonable(obj: Any) -> Any:
    item = getattr(obj, "item", None)
    if callable(item):
        try:
            return item()
        except (TypeError, ValueError):
            pass
    tolist = getattr(obj, "tolist", None)
    return tolist() if callable(tolist) else str(obj)


@dataclass
class _Session:
    env: Env
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class EnvServer:
    """An aiohttp app holding one env per session, all built by `make(env_id, **make_kwargs)`."""

    def __init__(
        self,
        env_id: str,
        *,
        max_sessions: int = 1024,
        make_kwargs: dict[str, Any] | None = None,
        env_factory: Callable[[], Env] | None = None,
    ):
        from gemkit.registry import make, spec

        if env_factory is None:
            spec(env_id)  # an unknown id fails now, with the closest ids, not on the first reset
            kwargs = dict(make_kwargs or {})
            env_factory = lambda: make(env_id, **kwargs)  # noqa: E731
        self.env_id = env_id
        self.max_sessions = max_sessions
        self.env_factory = env_factory
        self.sessions: dict[str, _Session] = {}

    def app(self) -> Any:
        """The `aiohttp.web.Application` serving this env."""
        from aiohttp import web

        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/reset", self._handler(self.reset))
        app.router.add_post("/step", self._handler(self.step))
        app.router.add_post("/clone", self._handler(self.clone))
        app.router.add_post("/close", self._handler(self.close))
        app.router.add_get("/health", self._health)
        app.on_cleanup.append(self._close_all)
        return app

    # -- handlers (pure: dict in, dict out; errors as _HTTPError) ------------------------------

    async def reset(self, body: dict[str, Any]) -> dict[str, Any]:
        """Open a session (or reuse `session_id`) and reset its env."""
        session_id = body.get("session_id")
        seed, options = body.get("seed"), body.get("options")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise _HTTPError(400, f"seed must be an integer or null, got {seed!r}")
        if options is not None and not isinstance(options, dict):
            raise _HTTPError(400, f"options must be a JSON object or null, got {options!r}")
        if session_id is None:
            session_id = self._open(self.env_factory())
        session = self._session(session_id)
        async with session.lock:
            obs, info = await session.env.areset(seed=seed, options=options)
        return {"session_id": session_id, "observation": obs, "info": info}

    async def step(self, body: dict[str, Any]) -> dict[str, Any]:
        """Apply `action` in the session's env."""
        session = self._session(body.get("session_id"))
        if "action" not in body:
            raise _HTTPError(400, 'step needs an "action" (the text the agent wrote)')
        async with session.lock:
            obs, reward, terminated, truncated, info = await session.env.astep(body["action"])
        return {
            "observation": obs,
            "reward": float(reward),
            "terminated": bool(terminated),
            "truncated": bool(truncated),
            "info": info,
        }

    async def clone(self, body: dict[str, Any]) -> dict[str, Any]:
        """Open a new session whose env is a copy of this one, in the same state."""
        session = self._session(body.get("session_id"))
        async with session.lock:
            copy = session.env.clone()
        return {"session_id": self._open(copy)}

    async def close(self, body: dict[str, Any]) -> dict[str, Any]:
        """Close a session and its env (closing an unknown session is not an error)."""
        session = self.sessions.pop(str(body.get("session_id")), None)
        if session is not None:
            async with session.lock:
                await _aclose(session.env)
        return {"closed": session is not None}

    # -- plumbing -----------------------------------------------------------------------------

    def _open(self, env: Env) -> str:
        if len(self.sessions) >= self.max_sessions:
            env.close()
            raise _HTTPError(
                429,
                f"the server holds its maximum of {self.max_sessions} sessions; "
                f'POST /close {{"session_id": ...}} the ones you no longer need',
            )
        session_id = uuid.uuid4().hex
        self.sessions[session_id] = _Session(env)
        return session_id

    def _session(self, session_id: Any) -> _Session:
        if session_id is None:
            raise _HTTPError(400, 'missing "session_id"; POST /reset first to open a session')
        session = self.sessions.get(str(session_id))
        if session is None:
            raise _HTTPError(
                404, f"no session {session_id!r} (closed, or never opened); POST /reset to open one"
            )
        return session

    def _handler(self, fn: Callable[[dict[str, Any]], Any]) -> Callable[[Any], Any]:
        from aiohttp import web

        async def handle(request: web.Request) -> web.Response:
            try:
                body = await request.json(loads=json.loads) if request.can_read_body else {}
            except (json.JSONDecodeError, UnicodeDecodeError):
                return _error(400, "the request body must be a JSON object")
            if not isinstance(body, dict):
                return _error(400, f"the request body must be a JSON object, got {body!r:.80}")
            try:
                result = await fn(body)
            except _HTTPError as e:
                return _error(e.status, e.message)
            except Exception as e:  # noqa: BLE001 - an env bug is reported, the server lives on
                log.exception("env call failed")
                return _error(500, f"the env raised {type(e).__name__}: {e}")
            return web.Response(text=_dumps(result), content_type="application/json")

        return handle

    async def _health(self, request: Any) -> Any:
        from aiohttp import web

        body = {"env_id": self.env_id, "sessions": len(self.sessions)}
        return web.Response(text=_dumps(body), content_type="application/json")

    async def _close_all(self, app: Any) -> None:
        for session in list(self.sessions.values()):
            await _aclose(session.env)
        self.sessions.clear()


class _HTTPError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


def _error(status: int, message: str) -> Any:
    from aiohttp import web

    return web.Response(
        status=status, text=json.dumps({"error": message}), content_type="application/json"
    )


async def _aclose(env: Any) -> None:
    closer = getattr(env, "aclose", None)
    if closer is not None:
        await closer()
    else:
        env.close()


def serve_env(env_id: str, host: str = "127.0.0.1", port: int = 8010, **kwargs: Any) -> None:
    """Serve `env_id` until interrupted (blocking)."""
    from aiohttp import web

    web.run_app(EnvServer(env_id, **kwargs).app(), host=host, port=port, print=None)


def add_env_parser(targets: argparse._SubParsersAction) -> None:
    """Register `gemkit serve env ID` on the `serve` command's targets."""
    p = targets.add_parser(
        "env",
        help="serve an env over HTTP (POST /reset, /step, /clone, /close; GET /health)",
        description="Serve one gemkit env id over HTTP with one env per session, so any "
        "trainer in any process or language can play it (see docs/training.md).",
    )
    p.add_argument("env_id", metavar="ID", help="env id, e.g. game:GuessTheNumber-v0-easy")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8010, help="port (default 8010)")
    p.add_argument("--max-sessions", type=int, default=1024, help="open sessions at most")
    p.set_defaults(serve=_run_env)


def _run_env(args: argparse.Namespace) -> int:
    from gemkit.cli.console import console

    server = EnvServer(args.env_id, max_sessions=args.max_sessions)
    console.print(
        f"serving [bold]{args.env_id}[/bold] on [cyan]http://{args.host}:{args.port}[/cyan]  "
        "POST /reset /step /clone /close  (Ctrl-C to stop)",
        highlight=False,
    )
    from aiohttp import web

    try:
        web.run_app(server.app(), host=args.host, port=args.port, print=None)
    except OSError as e:
        raise GemkitError(
            f"cannot listen on {args.host}:{args.port} ({e.strerror or e}); "
            "pick a free port with --port"
        ) from None
    return 0


# -- client ------------------------------------------------------------------------------------


class RemoteEnv(Env):
    """An env played on an env server: `reset`/`step` (blocking) and `areset`/`astep` (aiohttp).

    The session opens on the first reset and closes with `close()`/`aclose()`. `clone()` asks
    the server for a copy of the session in its current state.
    """

    def __init__(self, url: str, *, timeout: float = 60.0, session_id: str | None = None):
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.session_id = session_id
        self._client: Any = None  # aiohttp session, bound to the loop that made it
        self._client_loop: Any = None

    # -- sync -------------------------------------------------------------------------------

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        request = urllib.request.Request(
            self.url + path,
            data=_dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as e:
            raise RemoteEnvError(_server_message(e.code, e.read())) from None
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise RemoteEnvError(
                f"cannot reach the env server at {self.url} ({reason}); "
                "start it with `gemkit serve env ID --port P`"
            ) from None

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> ResetResult:
        """Reset the remote env (opening the session on first use)."""
        body = self._post(
            "/reset", {"session_id": self.session_id, "seed": seed, "options": options}
        )
        self.session_id = body["session_id"]
        return body["observation"], body["info"]

    def step(self, action: str) -> StepResult:
        """Step the remote env."""
        return _step_result(self._post("/step", {"session_id": self._require(), "action": action}))

    def clone(self) -> RemoteEnv:
        """A new remote session in this session's state."""
        body = self._post("/clone", {"session_id": self._require()})
        return RemoteEnv(self.url, timeout=self.timeout, session_id=body["session_id"])

    def close(self) -> None:
        """Close the remote session (the server keeps running)."""
        if self.session_id is not None:
            try:
                self._post("/close", {"session_id": self.session_id})
            except RemoteEnvError as e:
                log.debug("closing session %s: %s", self.session_id, e)
            self.session_id = None

    # -- async ------------------------------------------------------------------------------

    async def _apost(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        import aiohttp

        loop = asyncio.get_running_loop()
        if self._client is None or self._client.closed or self._client_loop is not loop:
            self._client = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout))
            self._client_loop = loop
        try:
            async with self._client.post(
                self.url + path, data=_dumps(body), headers={"Content-Type": "application/json"}
            ) as response:
                raw = await response.read()
                if response.status != 200:
                    raise RemoteEnvError(_server_message(response.status, raw))
                return json.loads(raw)
        except aiohttp.ClientError as e:
            raise RemoteEnvError(
                f"cannot reach the env server at {self.url} ({e}); "
                "start it with `gemkit serve env ID --port P`"
            ) from None

    async def areset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> ResetResult:
        """Async `reset`."""
        body = await self._apost(
            "/reset", {"session_id": self.session_id, "seed": seed, "options": options}
        )
        self.session_id = body["session_id"]
        return body["observation"], body["info"]

    async def astep(self, action: str) -> StepResult:
        """Async `step`."""
        body = await self._apost("/step", {"session_id": self._require(), "action": action})
        return _step_result(body)

    async def aclose(self) -> None:
        """Async `close`; also closes the HTTP client."""
        if self.session_id is not None:
            try:
                await self._apost("/close", {"session_id": self.session_id})
            except RemoteEnvError as e:
                log.debug("closing session %s: %s", self.session_id, e)
            self.session_id = None
        if self._client is not None:
            await self._client.close()
            self._client = None

    def runs_sync(self, method: str | None = None) -> bool:
        """False: every call is network I/O."""
        return False

    def _require(self) -> str:
        if self.session_id is None:
            raise RemoteEnvError("call reset() before step(): the remote session is not open")
        return self.session_id

    def __deepcopy__(self, memo: dict[int, Any]) -> RemoteEnv:
        return self.clone()

    def __repr__(self) -> str:
        return f"<RemoteEnv {self.url} session={self.session_id}>"


def _step_result(body: dict[str, Any]) -> StepResult:
    return (
        body["observation"],
        float(body["reward"]),
        bool(body["terminated"]),
        bool(body["truncated"]),
        body["info"],
    )


def _server_message(status: int, raw: bytes) -> str:
    try:
        message = json.loads(raw)["error"]
    except (json.JSONDecodeError, KeyError, TypeError, UnicodeDecodeError):
        message = raw[:200].decode("utf-8", "replace")
    return f"env server answered {status}: {message}"
