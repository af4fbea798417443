"""What every gemkit HTTP server shares: the guard, bounded JSON bodies, one-line JSON errors,
and checks of the address it binds (`gemkit serve env`, `serve search`, `serve model`, and
`gemkit view`, which renders the guard's refusals as pages).

The guard (`Guard.check`) refuses every request a web page could make, so that a page the
operator opens in a browser (or a browser an agent drives) cannot use a server on this
machine:

- one marked by the browser as another site's (`Sec-Fetch-Site: cross-site` or `same-site`:
  another port of localhost is the same site), or whose `Origin` is not the server's own;
- without a token, one whose `Host` names anything but a loopback name, the address the
  connection arrived at, or the name the server was bound to: a DNS-rebinding page's
  requests name the page's own domain;
- on a route that reads a body, one whose `Content-Type` is not the route's (JSON by
  default): a page can send `text/plain`, a form or no type at all without asking the server
  first (a CORS "simple request"), and never `application/json` or
  `application/octet-stream` without a preflight, which no gemkit server answers;
- with a token, one without `Authorization: Bearer <token>` (compared in constant time).

A server built on these answers anything a client can send with a 4xx and
`{"error": "<what was wrong; what is expected>"}`, never a traceback, and never echoes a long
input back. A fault of the server itself is logged and answered 500 with a generic line, so
the answer cannot carry internal state (an exception message may quote expected data).
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import json
import logging
import os
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gemkit.errors import GemkitError

log = logging.getLogger(__name__)

#: where servers and their clients read the bearer token when none is given
TOKEN_ENV = "GEMKIT_SERVE_TOKEN"
#: seconds a client has to send its whole body once the headers arrived
BODY_TIMEOUT = 30.0
JSON_TYPE = "application/json"
#: methods whose request carries a body, checked for its Content-Type
BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
#: Host names of this machine's loopback, whatever address the server is bound to
LOOPBACK_NAMES = frozenset({"localhost", "localhost.", "127.0.0.1", "::1"})


class RequestError(Exception):
    """A request the server refuses: HTTP `status` and a one-line `message` for the client."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


def preview(value: Any, limit: int = 60) -> str:
    """`repr(value)` cut to `limit` characters: what an error may quote of a client's input."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 1]}… ({len(text):,} characters)"


_JSON_TYPES = {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}


def json_type(value: Any) -> str:
    """The JSON name of `value`'s type ("number", "string", "object", ...), for error messages."""
    return _JSON_TYPES.get(type(value), "number" if isinstance(value, (int, float)) else "value")


def _no_constant(name: str) -> Any:
    raise RequestError(400, f"{name} is not a JSON number; send finite numbers only")


def loads_json(raw: bytes) -> Any:
    """Parse a request body as strict JSON (no NaN/Infinity), or raise a 400 `RequestError`."""
    try:
        return json.loads(raw, parse_constant=_no_constant)
    except RecursionError:
        raise RequestError(400, "the body nests too deeply; send a flat JSON object") from None
    except UnicodeDecodeError:
        raise RequestError(400, "the body is not UTF-8 text; send a UTF-8 JSON object") from None
    except json.JSONDecodeError as e:
        raise RequestError(
            400, f"the body is not valid JSON ({e.msg}); send a JSON object"
        ) from None
    except ValueError:  # an integer past Python's digit limit, say
        raise RequestError(400, "the body holds a number too long to read") from None


async def read_body(
    request: Any, *, max_body: int, limit_flag: str, timeout: float = BODY_TIMEOUT
) -> bytes:
    """The request's whole body, at most `max_body` bytes within `timeout` seconds, or raise
    a `RequestError` (413 naming `limit_flag`, 408, or 400 for a client that left).

    A body over the limit is refused by its Content-Length, or once `max_body + 1` bytes
    arrived: nothing past the limit is ever held.
    """
    from aiohttp.http_exceptions import HttpProcessingError

    too_big = RequestError(
        413,
        f"the body is over the server's limit of {max_body:,} bytes; send less per request "
        f"or start the server with a larger {limit_flag}",
    )
    if request.content_length is not None and request.content_length > max_body:
        raise too_big
    deadline = time.monotonic() + timeout
    raw = bytearray()
    try:
        while len(raw) <= max_body:
            left = deadline - time.monotonic()
            if left <= 0:
                raise asyncio.TimeoutError
            chunk = await asyncio.wait_for(request.content.read(max_body + 1 - len(raw)), left)
            if not chunk:
                break
            raw += chunk
    except asyncio.TimeoutError:
        raise RequestError(
            408, f"the body did not arrive within {timeout:g} s ({len(raw):,} bytes came)"
        ) from None
    except (ConnectionError, HttpProcessingError):  # the client left mid-body, or sent junk
        raise RequestError(400, "the connection closed before the body arrived") from None
    if len(raw) > max_body:
        raise too_big
    return bytes(raw)


async def read_json_object(
    request: Any, *, shape: str, max_body: int, limit_flag: str, timeout: float = BODY_TIMEOUT
) -> dict[str, Any]:
    """The request's body as a JSON object (an empty body is `{}`), or raise a `RequestError`.

    `shape` shows the expected body; `max_body` is the limit on its size, set by the server
    flag `limit_flag`; the whole body must arrive within `timeout` seconds.
    """
    raw = await read_body(request, max_body=max_body, limit_flag=limit_flag, timeout=timeout)
    if not raw.strip():
        return {}
    body = loads_json(raw)
    if not isinstance(body, dict):
        raise RequestError(400, f"expected a JSON object {shape}, got a JSON {json_type(body)}")
    return body


def json_error(status: int, message: str) -> Any:
    """An aiohttp response `{"error": message}` with `status`."""
    from aiohttp import web

    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return web.json_response({"error": message}, status=status, headers=headers)


#: the error types of OpenAI's (and vLLM's) error bodies, by status
OPENAI_ERROR_TYPES = {
    400: "BadRequestError",
    401: "AuthenticationError",
    403: "PermissionDeniedError",
    404: "NotFoundError",
    408: "RequestTimeoutError",
    409: "ConflictError",
    413: "RequestEntityTooLargeError",
    415: "UnsupportedMediaTypeError",
    429: "RateLimitError",
}


def openai_error(status: int, message: str) -> Any:
    """An aiohttp response in OpenAI's error shape, `{"error": {"message", "type", "param",
    "code"}}`, which the official SDKs show in their exceptions."""
    from aiohttp import web

    kind = OPENAI_ERROR_TYPES.get(status, "InternalServerError" if status >= 500 else "Error")
    body = {"error": {"message": message, "type": kind, "param": None, "code": status}}
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return web.json_response(body, status=status, headers=headers)


#: how a server writes an error answer: `json_error` or `openai_error`
Render = Callable[[int, str], Any]


def error_middleware(endpoints: str, render: Render = json_error) -> Any:
    """Turn every error into a one-line JSON answer; unknown routes list `endpoints`."""
    from aiohttp import web

    @web.middleware
    async def json_errors(request: web.Request, handler: Any) -> web.StreamResponse:
        try:
            return await handler(request)
        except RequestError as e:
            return render(e.status, e.message)
        except web.HTTPException as e:
            if e.status < 400:
                raise
            return render(e.status, f"{e.reason}; endpoints: {endpoints}")
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("%s %s failed", request.method, request.path)
            return render(500, "internal server error; the server log has the details")

    return json_errors


def resolve_token(token: str | None) -> str | None:
    """`token`, else `$GEMKIT_SERVE_TOKEN`; an empty string means no token."""
    if token is None:
        token = os.environ.get(TOKEN_ENV)
    return token or None


def is_loopback(host: str) -> bool:
    """Whether a host name or address (a bind address, or a Host header's name) is loopback."""
    host = host.strip().strip("[]").lower()
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name, or "" (every address)
        return False


def host_name(header: str) -> str:
    """The host of a Host header, without its port or IPv6 brackets, in lower case."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1 : header.find("]")] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def _same_address(name: str, address: Any) -> bool:
    """Whether `name` is the IP address `address` (a socket's, maybe IPv4-mapped IPv6)."""
    try:
        a, b = ipaddress.ip_address(name), ipaddress.ip_address(str(address).split("%")[0])
    except ValueError:
        return False
    a = getattr(a, "ipv4_mapped", None) or a
    b = getattr(b, "ipv4_mapped", None) or b
    return a == b


def _media_type(header: str) -> str:
    return header.split(";", 1)[0].strip().lower()


@dataclass
class Guard:
    """What a gemkit server answers at all (the module docstring says why each rule exists).

    `token`: every request must show it (and then any Host name is fine: a page cannot know
    it). `bodies`: per route path, the Content-Types its body may have (JSON elsewhere).
    `names`: Host names the server answers besides loopback names and the address a
    connection arrived at; `bind` adds the name the server listens on.
    """

    token: str | None = None
    bodies: Mapping[str, Iterable[str]] = field(default_factory=dict)
    names: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self._expected = f"Bearer {self.token}".encode() if self.token else b""
        self._bodies = {path: frozenset(types) for path, types in self.bodies.items()}

    def bind(self, host: str) -> None:
        """Also answer requests that name `host`, the address or name the server listens on."""
        if host and host not in ("0.0.0.0", "::"):
            self.names.add(host_name(host) if host.startswith("[") else host.lower())

    def check(self, request: Any) -> RequestError | None:
        """The refusal of `request` (403, 401 or 415 with a one-line message), or None."""
        headers = request.headers
        site = headers.get("Sec-Fetch-Site", "").strip().lower()
        if site in ("cross-site", "same-site"):
            return RequestError(
                403,
                f"this server answers no web page of another site (Sec-Fetch-Site: {site}); "
                "call it from a program, not from a page in a browser",
            )
        host = headers.get("Host", "")
        origin = headers.get("Origin")
        if origin is not None and origin.strip().lower().rstrip("/") != (
            f"{request.scheme}://{host}".lower()
        ):
            return RequestError(
                403,
                f"this server answers no web page of another origin (Origin: {origin[:80]!r}); "
                "call it from a program, not from a page in a browser",
            )
        if not self.token and not self._host_allowed(request, host):
            return RequestError(
                403,
                f"this server answers only requests addressed to its own address or to "
                f"localhost, not {host[:80]!r} (a web page rebinding a name to this machine "
                "sends its own); address it by that, or start it with a token",
            )
        if self.token:
            sent = headers.get("Authorization", "").encode("utf-8", "replace")
            # Constant-time, so the answer's timing does not tell how much of a guess was right.
            if not hmac.compare_digest(sent, self._expected):
                return RequestError(
                    401,
                    "missing or wrong token: send the header 'Authorization: Bearer <token>' "
                    f"with the server's --token (or ${TOKEN_ENV})",
                )
        if request.method in BODY_METHODS and _routed(request):
            wanted = self._bodies.get(request.path, frozenset({JSON_TYPE}))
            sent_type = _media_type(headers.get("Content-Type", ""))
            if sent_type not in wanted:
                types = " or ".join(f"'Content-Type: {t}'" for t in sorted(wanted))
                got = f"{sent_type[:60]!r}" if sent_type else "none"
                return RequestError(
                    415,
                    f"{request.method} {request.path} takes a body sent with {types} "
                    f"(this one had {got})",
                )
        return None

    def _host_allowed(self, request: Any, header: str) -> bool:
        name = host_name(header)
        if not name:
            return False
        if is_loopback(name) or name in self.names:
            return True
        transport = request.transport
        local = transport.get_extra_info("sockname") if transport is not None else None
        if not local:
            return False
        return _same_address(name, local[0])


def _routed(request: Any) -> bool:
    """Whether the request reached a route (a 404 or 405 is answered as such, not as a 415)."""
    info = request.match_info
    return getattr(info, "http_exception", None) is None


def guard_middleware(guard: Guard, render: Render = json_error) -> Any:
    """A middleware that answers each request `guard` refuses with its one-line error."""
    from aiohttp import web

    @web.middleware
    async def guarded(request: web.Request, handler: Any) -> web.StreamResponse:
        refused = guard.check(request)
        if refused is not None:
            return render(refused.status, refused.message)
        return await handler(request)

    guarded.guard = guard  # type: ignore[attr-defined]  # found by `run_app` to bind its name
    return guarded


def middlewares(
    endpoints: str,
    token: str | None,
    *,
    bodies: Mapping[str, Iterable[str]] | None = None,
    render: Render = json_error,
) -> list[Any]:
    """The middlewares of a gemkit API server: JSON errors, then the guard (`Guard`)."""
    guard = Guard(token, bodies or {})
    return [error_middleware(endpoints, render), guard_middleware(guard, render)]


def guard_of(app: Any) -> Guard | None:
    """The `Guard` among `app`'s middlewares, if it has one."""
    for m in app.middlewares:
        guard = getattr(m, "guard", None)
        if isinstance(guard, Guard):
            return guard
    return None


def auth_headers(token: str | None) -> dict[str, str]:
    """The request headers a client sends for `token` (none without one)."""
    return {"Authorization": f"Bearer {token}"} if token else {}


def check_port(port: Any) -> int:
    """`port` if it is a TCP port (1-65535), else a `GemkitError` saying so."""
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise GemkitError(f"--port must be an integer from 1 to 65535, got {preview(port)}")
    return port


def exposure_warning(host: str, token: str | None) -> str | None:
    """A one-line warning when `host` is reachable from other machines and no token is set."""
    if token or is_loopback(host):
        return None
    return (
        f"warning: listening on {host or 'every address'} without a token: anyone who can "
        f"reach this port can use the server; set --token or ${TOKEN_ENV}"
    )


def run_app(
    app: Any,
    host: str,
    port: int,
    *,
    token: str | None,
    on_start: Callable[[], None] | None = None,
    warn: Callable[[str], None] = log.warning,
    loop: asyncio.AbstractEventLoop | None = None,
) -> None:
    """Serve `app` until interrupted (blocking); `on_start` runs once the port is bound.

    A bad port or an address that cannot be bound is a `GemkitError` with a one-line message.
    """
    from aiohttp import web

    check_port(port)
    warning = exposure_warning(host, token)
    if warning:
        warn(warning)
    guard = guard_of(app)
    if guard is not None:
        guard.bind(host)
    try:
        web.run_app(
            app,
            host=host,
            port=port,
            access_log=None,
            print=(lambda _: on_start()) if on_start else None,
            loop=loop,
        )
    except OSError as e:
        raise GemkitError(
            f"cannot listen on {host}:{port} ({e.strerror or e}); pick a free port with --port"
        ) from None


class AppThread:
    """A server on a thread of its own, with its own event loop, until the `with` block ends.

    `start()` (a coroutine function, run on that loop) starts serving and returns the runner
    to clean up and the address to show; an error it raises is raised by `__enter__`.
    """

    def __init__(
        self,
        start: Callable[[], Awaitable[tuple[Any, str]]],
        *,
        name: str = "gemkit-server",
        timeout: float = 60.0,
    ):
        self._start, self._name, self._timeout = start, name, timeout
        self.url = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._stop: asyncio.Event | None = None

    def _run(self) -> None:
        async def main() -> None:
            self._stop = asyncio.Event()
            try:
                runner, self.url = await self._start()
            except BaseException as e:  # noqa: BLE001 - handed to the starting thread
                self._error = e
                self._ready.set()
                return
            self._ready.set()
            try:
                await self._stop.wait()
            finally:
                await runner.cleanup()

        self._loop = asyncio.new_event_loop()
        try:
            self._loop.run_until_complete(main())
        finally:
            self._loop.close()

    def __enter__(self) -> AppThread:
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()
        self._ready.wait(self._timeout)
        if self._error is not None:
            raise self._error
        if not self.url:
            raise GemkitError(f"the server did not start within {self._timeout:g} s")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None and self._stop is not None and self._loop.is_running():
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(30)
