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

A bad request gets a 4xx (400 bad body, 401 no token, 404 unknown session, 413 body too large,
429 session cap) and `{"error": message}` saying what was wrong and what is expected; 500 is
kept for faults of the env or server, logged there and answered with a generic line.

How the server holds up against its clients:

- Env calls never run on the server's event loop: sync `reset`/`step`/`clone` run in a thread
  pool, and an env with real async twins runs on one of a few event loops in threads, pinned
  for its life (its clients and pools stay on one loop). A session runs one call at a time,
  even when a client gives up midway, so one env is never touched by two threads at once.
- Every failure frees what it took: a session whose first reset fails, or whose opening answer
  cannot be delivered, is closed at once; a session idle past `session_ttl` is closed.
- Session ids are 144 random bits (`secrets.token_urlsafe`), so no client can guess another's.
- With a token (`--token` or `$GEMKIT_SERVE_TOKEN`) every request needs
  `Authorization: Bearer <token>`. Run it with `gemkit serve env ID --port P`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import json
import logging
import math
import os
import secrets
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gemkit.core import Env, ResetResult, StepResult
from gemkit.errors import GemkitError
from gemkit.serving import (
    RequestError,
    auth_headers,
    json_type,
    middlewares,
    preview,
    read_json_object,
    resolve_token,
    run_app,
)

log = logging.getLogger(__name__)

#: seeds reach numpy's SeedSequence; bounding them keeps a seed a seed, not a bignum
MAX_SEED = 2**64 - 1
#: the longest session id a request may name (ours are 24 characters)
MAX_SESSION_ID = 128
ENDPOINTS = "POST /reset, POST /step, POST /clone, POST /close, GET /health"
#: the fields each endpoint reads; any other field is a mistake worth naming
FIELDS = {
    "reset": ("session_id", "seed", "options"),
    "step": ("session_id", "action"),
    "clone": ("session_id",),
    "close": ("session_id",),
}


class RemoteEnvError(GemkitError):
    """The env server refused a request or could not be reached; the message says why."""


def _dumps(payload: Any) -> str:
    # Infos may hold objects JSON does not know (numpy numbers, dataclasses): send their text.
    try:
        return json.dumps(payload, default=_jsonable, allow_nan=False)
    except ValueError:  # NaN or infinity somewhere: strict JSON has no such number
        return json.dumps(_finite(payload), default=_jsonable, allow_nan=False)


def _jsonable(obj: Any) -> Any:
    item = getattr(obj, "item", None)
    if callable(item):
        try:
            return _finite(item())
        except (TypeError, ValueError):
            pass
    tolist = getattr(obj, "tolist", None)
    return _finite(tolist()) if callable(tolist) else str(obj)


def _finite(obj: Any) -> Any:
    """`obj` with every NaN or infinite float replaced by None."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


# -- request validation (pure: body in, values out or RequestError) -----------------------------


def check_fields(body: dict[str, Any], endpoint: str) -> None:
    """Refuse fields `endpoint` does not read (a typo such as `sesion_id` would pass unseen)."""
    unknown = [k for k in body if k not in FIELDS[endpoint]]
    if unknown:
        names = ", ".join(preview(k, 40) for k in unknown[:3])
        raise RequestError(
            400, f"unknown field {names} for /{endpoint}; it takes {', '.join(FIELDS[endpoint])}"
        )


def parse_seed(seed: Any) -> int | None:
    """A seed is null or an integer from 0 to 2**64-1."""
    if seed is None:
        return None
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        raise RequestError(
            400, f"seed must be an integer from 0 to 2**64-1 or null, got {preview(seed)}"
        )
    return seed


def parse_options(options: Any) -> dict[str, Any] | None:
    """Options are null or a JSON object."""
    if options is not None and not isinstance(options, dict):
        raise RequestError(400, f"options must be a JSON object or null, got {preview(options)}")
    return options


def parse_session_id(session_id: Any) -> str:
    """A session id is the string that /reset or /clone answered."""
    if session_id is None:
        raise RequestError(400, 'missing "session_id"; POST /reset first to open a session')
    if not isinstance(session_id, str) or not 0 < len(session_id) <= MAX_SESSION_ID:
        raise RequestError(
            400, f"session_id must be the string /reset answered, got {preview(session_id)}"
        )
    return session_id


def parse_action(body: dict[str, Any]) -> str:
    """An action is the text the agent wrote."""
    if "action" not in body:
        raise RequestError(400, 'step needs an "action" (the text the agent wrote)')
    action = body["action"]
    if not isinstance(action, str):
        raise RequestError(
            400,
            f"action must be a string (the text the agent wrote), got a JSON {json_type(action)}",
        )
    return action


# -- where env calls run -----------------------------------------------------------------------


class _LoopThread:
    """An event loop running in a daemon thread: async env calls run here, off the server's loop."""

    def __init__(self, name: str):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self.thread.start()

    def submit(self, fn: Callable[[], Any]) -> concurrent.futures.Future:
        """Run `fn()` on this loop, awaiting it when it returns an awaitable."""

        async def call() -> Any:
            result = fn()
            return await result if asyncio.iscoroutine(result) else result

        return asyncio.run_coroutine_threadsafe(call(), self.loop)

    def stop(self) -> None:
        """Stop the loop and its thread (a call still running keeps the thread until it ends)."""
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        if not self.thread.is_alive():
            self.loop.close()


async def _outlast_cancel(
    future: concurrent.futures.Future, abandon: Callable[[Any], Any] | None = None
) -> Any:
    """Await `future`; a cancelled caller still waits for it, so the env is free when it leaves.

    An env call cannot be stopped midway: were the session's lock released at the cancel, the
    next call would run on the same env while this one still does. A result nobody will
    receive (a new env) goes to `abandon`, to be closed.
    """
    waited = asyncio.wrap_future(future)
    interrupted = False
    while True:
        try:
            result = await asyncio.shield(waited)
            break
        except asyncio.CancelledError:
            if waited.done():
                raise
            interrupted = True
    if interrupted:
        if abandon is not None:
            abandon(result)
        raise asyncio.CancelledError
    return result


def _close_now(env: Any) -> Any:
    """Close `env`: its `aclose()` coroutine when it has one, else `close()`."""
    closer = getattr(env, "aclose", None)
    return closer() if closer is not None else env.close()


def _log_failure(future: concurrent.futures.Future) -> None:
    if not future.cancelled() and future.exception() is not None:
        log.error("closing an abandoned env failed: %r", future.exception())


@dataclass
class _Session:
    env: Env
    loop: _LoopThread | None  # None: a sync env, whose calls run in the thread pool
    last_used: float = field(default_factory=time.monotonic)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    closed: bool = False


class EnvServer:
    """An aiohttp app holding one env per session, all built by `make(env_id, **make_kwargs)`.

    `max_sessions` caps open sessions; `session_ttl` closes one idle that many seconds (None:
    never); `max_body` caps a request body in bytes; `workers` sizes the thread pool of sync
    env calls (default: the CPU count + 4, at most 32); `token` (default `$GEMKIT_SERVE_TOKEN`)
    makes every request show `Authorization: Bearer <token>`.
    """

    def __init__(
        self,
        env_id: str,
        *,
        max_sessions: int = 1024,
        make_kwargs: dict[str, Any] | None = None,
        env_factory: Callable[[], Env] | None = None,
        session_ttl: float | None = 3600.0,
        max_body: int = 4 * 1024 * 1024,
        workers: int | None = None,
        token: str | None = None,
    ):
        from gemkit.registry import make, spec

        if env_factory is None:
            spec(env_id)  # an unknown id fails now, with the closest ids, not on the first reset
            kwargs = dict(make_kwargs or {})
            env_factory = lambda: make(env_id, **kwargs)  # noqa: E731
        self.env_id = env_id
        self.max_sessions = max_sessions
        self.env_factory = env_factory
        self.session_ttl = session_ttl if session_ttl and session_ttl > 0 else None
        self.max_body = max_body
        self.workers = workers or min(32, (os.cpu_count() or 1) + 4)
        self.token = resolve_token(token)
        self.sessions: dict[str, _Session] = {}
        self._opening = 0  # sessions being built: they count against max_sessions already
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._loops: list[_LoopThread] = []
        self._next_loop = itertools.count()

    def app(self) -> Any:
        """The `aiohttp.web.Application` serving this env."""
        from aiohttp import web

        app = web.Application(
            client_max_size=self.max_body, middlewares=middlewares(ENDPOINTS, self.token)
        )
        app.router.add_post("/reset", self._route(self.reset, "reset"))
        app.router.add_post("/step", self._route(self.step, "step"))
        app.router.add_post("/clone", self._route(self.clone, "clone"))
        app.router.add_post("/close", self._route(self.close, "close"))
        app.router.add_get("/health", self._health)
        app.cleanup_ctx.append(self._lifetime)
        return app

    # -- endpoints (dict in, dict out; errors as RequestError) ---------------------------------

    async def reset(self, body: dict[str, Any]) -> dict[str, Any]:
        """Open a session (or reuse `session_id`) and reset its env."""
        check_fields(body, "reset")
        seed, options = parse_seed(body.get("seed")), parse_options(body.get("options"))
        if body.get("session_id") is not None:
            session_id = parse_session_id(body["session_id"])
            obs, info = await self._reset(self._session(session_id), seed, options)
            return {"session_id": session_id, "observation": obs, "info": info}
        session_id, session = await self._open(None)
        try:
            obs, info = await self._reset(session, seed, options)
        except BaseException:
            await self._drop(session_id)  # the client never learns the id: nobody else can close it
            raise
        return {"session_id": session_id, "observation": obs, "info": info}

    async def step(self, body: dict[str, Any]) -> dict[str, Any]:
        """Apply `action` in the session's env."""
        check_fields(body, "step")
        session = self._session(parse_session_id(body.get("session_id")))
        action = parse_action(body)
        obs, reward, terminated, truncated, info = await self._call(session, "step", action)
        reward = float(reward)
        if not math.isfinite(reward):
            raise ValueError(f"{self.env_id} returned the reward {reward}")  # an env fault: 500
        return {
            "observation": obs,
            "reward": reward,
            "terminated": bool(terminated),
            "truncated": bool(truncated),
            "info": info,
        }

    async def clone(self, body: dict[str, Any]) -> dict[str, Any]:
        """Open a new session whose env is a copy of this one, in the same state."""
        check_fields(body, "clone")
        session = self._session(parse_session_id(body.get("session_id")))
        session_id, _ = await self._open(session)
        return {"session_id": session_id}

    async def close(self, body: dict[str, Any]) -> dict[str, Any]:
        """Close a session and its env (closing an unknown session is not an error)."""
        check_fields(body, "close")
        return {"closed": await self._drop(parse_session_id(body.get("session_id")))}

    async def expire_idle(self) -> int:
        """Close every session idle for more than `session_ttl` seconds; return how many."""
        if self.session_ttl is None:
            return 0
        cutoff = time.monotonic() - self.session_ttl
        idle = [
            sid
            for sid, s in self.sessions.items()
            if s.last_used < cutoff and not s.lock.locked()  # a call in flight is not idle
        ]
        for sid in idle:
            await self._drop(sid)
        if idle:
            log.info("closed %d session(s) idle for over %g s", len(idle), self.session_ttl)
        return len(idle)

    # -- sessions -----------------------------------------------------------------------------

    async def _reset(
        self, session: _Session, seed: int | None, options: dict[str, Any] | None
    ) -> ResetResult:
        try:
            return await self._call(session, "reset", seed=seed, options=options)
        except (ValueError, TypeError, LookupError, GemkitError) as e:
            if not options:
                raise  # nothing the client chose: a fault of the env, answered 500
            raise RequestError(
                400, f"the env rejected these options ({type(e).__name__}: {str(e)[:200]})"
            ) from None

    async def _open(self, parent: _Session | None) -> tuple[str, _Session]:
        """A new session: a fresh env, or a clone of `parent`'s, its slot held while it is built."""
        if len(self.sessions) + self._opening >= self.max_sessions:
            await self.expire_idle()
        if len(self.sessions) + self._opening >= self.max_sessions:
            raise RequestError(
                429,
                f"the server holds its maximum of {self.max_sessions} sessions; "
                'POST /close {"session_id": ...} the ones you no longer need',
            )
        self._opening += 1
        try:
            if parent is None:
                built = self._executor().submit(self.env_factory)
                env = await _outlast_cancel(built, abandon=lambda e: self._discard(e, None))
                loop = None if env.runs_sync() else self._pick_loop()
            else:
                loop = parent.loop  # a clone shares what its original holds on that loop
                env = await self._call(parent, "clone", abandon=lambda e: self._discard(e, loop))
            session_id = secrets.token_urlsafe(18)
            session = self.sessions[session_id] = _Session(env, loop)
        finally:
            self._opening -= 1
        return session_id, session

    def _session(self, session_id: str) -> _Session:
        session = self.sessions.get(session_id)
        if session is None:
            raise RequestError(
                404,
                f"no session {preview(session_id, 40)} (closed, expired or never opened); "
                "POST /reset to open one",
            )
        return session

    async def _drop(self, session_id: str) -> bool:
        """Forget the session and close its env, once its call in flight (if any) is over."""
        session = self.sessions.pop(session_id, None)
        if session is None:
            return False
        async with session.lock:
            session.closed = True
            try:
                await _outlast_cancel(self._submit(session.loop, lambda: _close_now(session.env)))
            except Exception:  # noqa: BLE001 - a failing close must not keep the slot
                log.exception("closing a session of %s failed", self.env_id)
        return True

    def _discard(self, env: Env, loop: _LoopThread | None) -> None:
        """Close an env nobody holds any more, without waiting for it."""
        self._submit(loop, lambda: _close_now(env)).add_done_callback(_log_failure)

    async def _call(
        self,
        session: _Session,
        method: str,
        *args: Any,
        abandon: Callable[[Any], Any] | None = None,
        **kwargs: Any,
    ) -> Any:
        """Run `method` on the session's env off the event loop, one call at a time."""
        async with session.lock:
            if session.closed:  # closed or expired while this call waited for the lock
                raise RequestError(404, "the session was closed; POST /reset to open one")
            session.last_used = time.monotonic()
            env = session.env
            if method in ("reset", "step") and session.loop is not None:
                method = "a" + method  # the async twin, on the env's own loop
            try:
                fn = getattr(env, method)
                call = self._submit(session.loop, lambda: fn(*args, **kwargs))
                return await _outlast_cancel(call, abandon)
            finally:
                session.last_used = time.monotonic()

    def _submit(self, loop: _LoopThread | None, fn: Callable[[], Any]) -> concurrent.futures.Future:
        """Run `fn` on `loop` (an async env's) or, for a sync env (None), in the thread pool."""
        if loop is not None:
            return loop.submit(fn)

        def run_sync() -> Any:
            result = fn()  # an env's close may still be a coroutine (`aclose`)
            return asyncio.run(result) if asyncio.iscoroutine(result) else result

        return self._executor().submit(run_sync)

    def _executor(self) -> concurrent.futures.ThreadPoolExecutor:
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(
                self.workers, thread_name_prefix="gemkit-env"
            )
        return self._pool

    def _pick_loop(self) -> _LoopThread:
        """Round robin over a few loop threads, started on first need."""
        k = next(self._next_loop) % min(4, self.workers)
        while len(self._loops) <= k:
            self._loops.append(_LoopThread(f"gemkit-env-loop-{len(self._loops)}"))
        return self._loops[k]

    # -- aiohttp plumbing ---------------------------------------------------------------------

    def _route(self, fn: Callable[[dict[str, Any]], Any], endpoint: str) -> Callable[[Any], Any]:
        from aiohttp import web

        shape = "{" + ", ".join(f'"{k}": ...' for k in FIELDS[endpoint]) + "}"

        async def handle(request: web.Request) -> web.Response:
            body = await read_json_object(
                request, shape=shape, max_body=self.max_body, limit_flag="--max-body-kb"
            )
            result = await fn(body)
            opened = result.get("session_id")
            transport = request.transport
            gone = transport is None or transport.is_closing()
            if gone and opened is not None and opened != body.get("session_id"):
                # The client left before learning its new session's id: nobody could close it.
                await self._drop(opened)
            return web.Response(text=_dumps(result), content_type="application/json")

        return handle

    async def _health(self, request: Any) -> Any:
        from aiohttp import web

        body = {"env_id": self.env_id, "sessions": len(self.sessions)}
        return web.Response(text=_dumps(body), content_type="application/json")

    async def _lifetime(self, app: Any) -> Any:
        reaper = asyncio.create_task(self._reap()) if self.session_ttl else None
        yield
        if reaper is not None:
            reaper.cancel()
        for session_id in list(self.sessions):
            await self._drop(session_id)
        for loop in self._loops:
            loop.stop()
        self._loops.clear()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    async def _reap(self) -> None:
        assert self.session_ttl is not None
        every = min(max(self.session_ttl / 4, 0.05), 60.0)
        while True:
            await asyncio.sleep(every)
            try:
                await self.expire_idle()
            except Exception:  # noqa: BLE001 - the reaper outlives a failing close
                log.exception("expiring idle sessions failed")


def serve_env(env_id: str, host: str = "127.0.0.1", port: int = 8010, **kwargs: Any) -> None:
    """Serve `env_id` until interrupted (blocking); `kwargs` go to `EnvServer`."""
    server = EnvServer(env_id, **kwargs)
    run_app(server.app(), host, port, token=server.token)


# -- client ------------------------------------------------------------------------------------


class RemoteEnv(Env):
    """An env played on an env server: `reset`/`step` (blocking) and `areset`/`astep` (aiohttp).

    The session opens on the first reset and closes with `close()`/`aclose()`. `clone()` asks
    the server for a copy of the session in its current state. `token` (default
    `$GEMKIT_SERVE_TOKEN`) is sent as `Authorization: Bearer <token>`.
    """

    def __init__(
        self,
        url: str,
        *,
        timeout: float = 60.0,
        session_id: str | None = None,
        token: str | None = None,
    ):
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.session_id = session_id
        self.token = resolve_token(token)
        self._headers = {"Content-Type": "application/json", **auth_headers(self.token)}
        self._client: Any = None  # aiohttp session, bound to the loop that made it
        self._client_loop: Any = None

    # -- sync -------------------------------------------------------------------------------

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        request = urllib.request.Request(
            self.url + path,
            data=_dumps(body).encode(),
            headers=self._headers,
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
        return RemoteEnv(
            self.url, timeout=self.timeout, session_id=body["session_id"], token=self.token
        )

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
                self.url + path, data=_dumps(body), headers=self._headers
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
    if not isinstance(message, str):
        message = preview(message, 200)
    return f"env server answered {status}: {message}"
