"""What every gemkit HTTP server shares: bounded JSON bodies, one-line JSON errors, an opt-in
bearer token, and checks of the address it binds (`gemkit serve env`, `gemkit serve search`).

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
from collections.abc import Callable
from typing import Any

from gemkit.errors import GemkitError

log = logging.getLogger(__name__)

#: where servers and their clients read the bearer token when none is given
TOKEN_ENV = "GEMKIT_SERVE_TOKEN"
#: seconds a client has to send its whole body once the headers arrived
BODY_TIMEOUT = 30.0


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


async def read_json_object(
    request: Any, *, shape: str, max_body: int, limit_flag: str, timeout: float = BODY_TIMEOUT
) -> dict[str, Any]:
    """The request's body as a JSON object (an empty body is `{}`), or raise a `RequestError`.

    `shape` shows the expected body; `max_body` is the app's `client_max_size`, set by the
    server flag `limit_flag`.
    """
    from aiohttp import web

    try:
        raw = await asyncio.wait_for(request.read(), timeout)
    except web.HTTPRequestEntityTooLarge:
        raise RequestError(
            413,
            f"the body is over the server's limit of {max_body:,} bytes; send less per request "
            f"or start the server with a larger {limit_flag}",
        ) from None
    except asyncio.TimeoutError:
        raise RequestError(408, f"the body did not arrive within {timeout:g} s") from None
    except ConnectionError:  # the client left mid-body: nobody reads the answer, nothing to log
        raise RequestError(400, "the connection closed before the body arrived") from None
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


def error_middleware(endpoints: str) -> Any:
    """Turn every error into a one-line JSON answer; unknown routes list `endpoints`."""
    from aiohttp import web

    @web.middleware
    async def json_errors(request: web.Request, handler: Any) -> web.StreamResponse:
        try:
            return await handler(request)
        except RequestError as e:
            return json_error(e.status, e.message)
        except web.HTTPException as e:
            if e.status < 400:
                raise
            return json_error(e.status, f"{e.reason}; endpoints: {endpoints}")
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("%s %s failed", request.method, request.path)
            return json_error(500, "internal server error; the server log has the details")

    return json_errors


def resolve_token(token: str | None) -> str | None:
    """`token`, else `$GEMKIT_SERVE_TOKEN`; an empty string means no token."""
    if token is None:
        token = os.environ.get(TOKEN_ENV)
    return token or None


def token_middleware(token: str) -> Any:
    """Refuse (401) every request without `Authorization: Bearer <token>`."""
    from aiohttp import web

    expected = f"Bearer {token}".encode()

    @web.middleware
    async def bearer(request: web.Request, handler: Any) -> web.StreamResponse:
        sent = request.headers.get("Authorization", "").encode("utf-8", "replace")
        # Constant-time, so the answer's timing does not tell how much of a guess was right.
        if not hmac.compare_digest(sent, expected):
            return json_error(
                401,
                "missing or wrong token: send the header 'Authorization: Bearer <token>' with "
                f"the server's --token (or ${TOKEN_ENV})",
            )
        return await handler(request)

    return bearer


def middlewares(endpoints: str, token: str | None) -> list[Any]:
    """The middlewares of a gemkit server: JSON errors, then the token check when one is set."""
    return [error_middleware(endpoints), *([token_middleware(token)] if token else [])]


def auth_headers(token: str | None) -> dict[str, str]:
    """The request headers a client sends for `token` (none without one)."""
    return {"Authorization": f"Bearer {token}"} if token else {}


def check_port(port: Any) -> int:
    """`port` if it is a TCP port (1-65535), else a `GemkitError` saying so."""
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise GemkitError(f"--port must be an integer from 1 to 65535, got {preview(port)}")
    return port


def is_loopback(host: str) -> bool:
    """True when binding `host` only listens on this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name, or "" (every address)
        return False


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
