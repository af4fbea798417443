"""Any MCP server's tools as gemkit tools, over stdio (a command) or streamable HTTP (a URL).

`MCPToolset.from_spec("python -m my_server")` (or a list, a URL, a dict) describes the server;
`await toolset.tools()` connects, lists its tools and returns one `MCPTool` per tool, whose JSON
schema is the server's `inputSchema`. One session serves every call of a toolset.

Why a private event-loop thread: the SDK's transports are anyio context managers whose cancel
scopes must be entered and exited by the same task, and a session is bound to the loop that
opened it. An env may call tools from several loops over its life (a sync `step` that runs
`asyncio.run`, a vector worker), so the session lives in one background task on a loop of its
own, and callers on any loop hand it their calls.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import json
import keyword
import logging
import os
import shlex
import tempfile
import threading
import weakref
from collections.abc import Awaitable, Mapping, Sequence
from contextlib import AsyncExitStack
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, create_model

from gemkit.errors import GemkitError
from gemkit.tools.base import Tool, ToolResult

logger = logging.getLogger(__name__)

#: JSON-RPC error codes the SDK uses for a lost connection and for a request timeout
CONNECTION_CLOSED = -32000
REQUEST_TIMEOUT = (-32001, 408)
_ERRLOG_MAX_BYTES = 1 << 20
_T = TypeVar("_T")


class MCPError(GemkitError):
    """An MCP server that cannot be started, reached or understood."""


def _sdk() -> Any:
    """The `mcp` package, or a clear error naming the extra to install."""
    try:
        import mcp
    except ImportError:
        raise MCPError(
            "MCP tools need the official SDK: pip install 'gemkit[mcp]' (mcp>=2,<3)"
        ) from None
    return mcp


def _field(obj: Any, snake: str, camel: str, default: Any = None) -> Any:
    """Read a field that SDK 2.x spells in snake_case and 1.x in camelCase."""
    value = getattr(obj, snake, None)
    return getattr(obj, camel, default) if value is None else value


def _leaf(exc: BaseException) -> BaseException:
    """The first real exception inside (possibly nested) exception groups."""
    while getattr(exc, "exceptions", None):  # an ExceptionGroup from an anyio task group
        exc = exc.exceptions[0]  # type: ignore[attr-defined]
    return exc


def _describe(exc: BaseException) -> str:
    exc = _leaf(exc)
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


# --- the loop thread -----------------------------------------------------------------------


class _LoopThread:
    """One daemon thread running an event loop that owns every MCP session of this process."""

    _lock = threading.Lock()
    _instance: _LoopThread | None = None

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="gemkit-mcp", daemon=True)
        self.thread.start()

    @classmethod
    def get(cls) -> _LoopThread:
        """The process-wide loop thread (a new one after a fork or if it died)."""
        with cls._lock:
            if cls._instance is None or not cls._instance.thread.is_alive():
                cls._instance = cls()
            return cls._instance

    def submit(self, coro: Awaitable[_T]) -> concurrent.futures.Future[_T]:
        """Schedule `coro` on the MCP loop from any thread."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)  # type: ignore[arg-type]

    async def run(self, coro: Awaitable[_T]) -> _T:
        """Run `coro` on the MCP loop and await it from the caller's loop."""
        return await asyncio.wrap_future(self.submit(coro))


# --- argument models from JSON schema ------------------------------------------------------

_JSON_TYPES: dict[str, Any] = {
    "string": str,
    "integer": int,
    "number": float,
    "boolean": bool,
    "array": list[Any],
    "object": dict[str, Any],
    "null": type(None),
}


def _python_type(prop: Mapping[str, Any]) -> Any:
    kind = prop.get("type")
    if isinstance(kind, str) and kind in _JSON_TYPES:
        return _JSON_TYPES[kind]
    if isinstance(kind, list) and kind and all(k in _JSON_TYPES for k in kind):
        types = tuple(_JSON_TYPES[k] for k in kind)
        union = types[0]
        for t in types[1:]:
            union = union | t
        return union
    return Any  # anyOf, $ref, enum without type: the server validates these itself


def args_model(tool_name: str, schema: Mapping[str, Any]) -> type[BaseModel]:
    """A pydantic model that checks the top-level fields of a JSON schema (types, required).

    Nested structure is left to the server, which validates the full schema; the model exists
    so that a wrong call gets a clear message before it reaches the server.
    """
    props = schema.get("properties") or {}
    required = set(schema.get("required") or [])
    fields: dict[str, Any] = {}
    for i, (key, prop) in enumerate(props.items()):
        prop = prop if isinstance(prop, Mapping) else {}
        safe = (
            key.isidentifier()
            and not keyword.iskeyword(key)
            and not key.startswith(("_", "model_"))
            and not hasattr(BaseModel, key)
        )
        name = key if safe else f"field_{i}"
        typ = _python_type(prop)
        info: dict[str, Any] = {"alias": key, "description": prop.get("description")}
        if key in required:
            fields[name] = (typ, Field(..., **info))
        else:
            fields[name] = (
                typ | None if typ is not Any else Any,
                Field(prop.get("default"), **info),
            )
    extra: Literal["forbid", "allow"] = (
        "forbid" if schema.get("additionalProperties") is False else "allow"
    )
    model_name = "".join(p.capitalize() for p in tool_name.replace("-", "_").split("_")) or "Tool"
    return create_model(
        f"{model_name}Args",
        __config__=ConfigDict(extra=extra, populate_by_name=True),
        **fields,
    )


# --- results --------------------------------------------------------------------------------


def _block_text(block: Any) -> str:
    kind = getattr(block, "type", "")
    if kind == "text":
        return str(block.text)
    if kind in ("image", "audio"):
        mime = _field(block, "mime_type", "mimeType", "")
        size = len(getattr(block, "data", "") or "") * 3 // 4
        return f"[{kind} {mime}, about {size} bytes]"
    if kind == "resource":
        res = block.resource
        text = getattr(res, "text", None)
        return text if isinstance(text, str) else f"[resource {getattr(res, 'uri', '')}]"
    if kind == "resource_link":
        return f"[resource link {getattr(block, 'uri', '')}]"
    return f"[{kind or type(block).__name__} content]"


def convert_result(result: Any) -> ToolResult:
    """An MCP `CallToolResult` as a `ToolResult`: text blocks joined, others summarized."""
    content = list(getattr(result, "content", None) or [])
    structured = _field(result, "structured_content", "structuredContent")
    is_error = bool(_field(result, "is_error", "isError", False))
    text = "\n".join(_block_text(b) for b in content)
    if not text and structured is not None:
        text = json.dumps(structured, ensure_ascii=False)
    metadata: dict[str, Any] = {"content_types": [getattr(b, "type", "") for b in content]}
    if structured is not None:
        metadata["structured"] = structured
    return ToolResult(text, is_error=is_error, metadata=metadata)


# --- the toolset ----------------------------------------------------------------------------


class _ConnectionLost(Exception):
    """The session ended under a call (the server exited or the connection dropped)."""


_live_toolsets: weakref.WeakSet[MCPToolset] = weakref.WeakSet()
#: keys a dict spec may hold (`type`/`transport` are read only to reject SSE)
_CONFIG_KEYS = frozenset(
    "command args env cwd url headers name prefix timeout connect_timeout type transport".split()
)


class MCPToolset:
    """One MCP server: its session, its tools, and calls routed to it.

    Give `command` (+ `args`, `env`, `cwd`) for a stdio server, or `url` (+ `headers`) for a
    streamable HTTP server. The session opens on the first `tools()` or call and stays open
    until `close()`. A call whose connection is lost reconnects once and retries; if that fails
    too, the call returns an error result saying so.
    """

    def __init__(
        self,
        command: str | None = None,
        args: Sequence[str] = (),
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        url: str | None = None,
        headers: Mapping[str, str] | None = None,
        name: str | None = None,
        prefix: str = "",
        timeout: float = 60.0,
        connect_timeout: float = 30.0,
    ):
        if (command is None) == (url is None):
            raise MCPError("an MCP toolset needs exactly one of command= (stdio) or url= (HTTP)")
        _sdk()  # a missing extra is said here, at once, not as a handshake timeout later
        self.command, self.args = command, list(args)
        self.env, self.cwd = dict(env) if env else None, cwd
        self.url, self.headers = url, dict(headers) if headers else None
        label = [os.path.basename(command or ""), *self.args]
        self.name = name or (url if url else shlex.join(label))
        self.prefix = prefix
        self.timeout, self.connect_timeout = timeout, connect_timeout
        #: sessions opened so far (1 while the first one lives; each reconnect adds one)
        self.connects = 0
        self.server_info: dict[str, Any] = {}
        self._session: Any = None
        self._stop: asyncio.Event | None = None
        self._owner: asyncio.Task[None] | None = None
        self._generation = 0
        self._lock: asyncio.Lock | None = None
        self._tools: list[MCPTool] | None = None
        self._errlog: Any = None
        self._errlog_mark = 0
        self._closed = False
        self._pid = os.getpid()
        _live_toolsets.add(self)

    # -- construction

    @classmethod
    def from_spec(cls, spec: Any, **kwargs: Any) -> MCPToolset:
        """A toolset from a command string, an argv list, a URL, or a dict config.

        Dicts take `{"command", "args", "env", "cwd"}` or `{"url", "headers"}` plus options
        (`name`, `prefix`, `timeout`), or a Claude-style `{"mcpServers": {name: {...}}}` with
        one server.
        """
        if isinstance(spec, MCPToolset):
            return spec
        if isinstance(spec, str):
            text = spec.strip()
            if text.startswith(("http://", "https://")):
                return cls(url=text, **kwargs)
            argv = shlex.split(text)
            if not argv:
                raise MCPError("the MCP server command is empty; expected e.g. 'python -m server'")
            return cls(argv[0], argv[1:], **kwargs)
        if isinstance(spec, (list, tuple)) and spec and all(isinstance(a, str) for a in spec):
            return cls(spec[0], spec[1:], **kwargs)
        if isinstance(spec, Mapping):
            config = dict(spec)
            if "mcpServers" in config:
                servers = config["mcpServers"]
                if not isinstance(servers, Mapping) or len(servers) != 1:
                    raise MCPError(
                        "an MCP toolset is one server; 'mcpServers' must hold exactly one entry"
                    )
                name, config = next(iter(servers.items()))
                config = {"name": name, **dict(config)}
            unknown = set(config) - _CONFIG_KEYS
            if unknown:
                raise MCPError(
                    f"unknown MCP server config keys {sorted(unknown)}; expected "
                    "{'command', 'args', 'env', 'cwd'} or {'url', 'headers'}"
                )
            kind = str(config.pop("type", None) or config.pop("transport", None) or "")
            config.pop("transport", None)
            if kind.lower() == "sse":
                raise MCPError(
                    "the legacy SSE transport is not supported; give the server's streamable "
                    "HTTP endpoint (usually .../mcp) or a stdio command"
                )
            if isinstance(config.get("command"), str) and "args" not in config:
                argv = shlex.split(config["command"])
                config["command"], config["args"] = argv[0], argv[1:]
            return cls(**{**config, **kwargs})
        raise MCPError(
            f"cannot make an MCP server from {spec!r}; expected a command ('python -m server'), "
            "an argv list, a URL ('http://127.0.0.1:8000/mcp') or a dict "
            "{'command': ..., 'args': [...]} / {'url': ...}"
        )

    def __repr__(self) -> str:
        return f"MCPToolset({self.name!r})"

    # -- session lifetime (everything below `_` runs on the MCP loop)

    def _transport(self) -> Any:
        mcp = _sdk()
        if self.url is not None:
            from mcp.client import streamable_http

            connect = getattr(streamable_http, "streamable_http_client", None)
            if connect is None:  # mcp 1.x
                # mcp 1.x's name (the stubs are of the mcp 2 installed here, which renamed it)
                old = streamable_http.streamablehttp_client  # type: ignore[attr-defined]
                return old(self.url, headers=self.headers)
            if self.headers:
                from mcp.shared._httpx_utils import create_mcp_http_client

                return connect(self.url, http_client=create_mcp_http_client(headers=self.headers))
            return connect(self.url)
        if self._errlog is None:
            # The server's stderr goes to an unlinked file opened for append, so its log does
            # not flood the console yet its last lines can explain a failed start.
            fd, path = tempfile.mkstemp(prefix="gemkit-mcp-", suffix=".log")
            os.close(fd)
            self._errlog = open(path, "a+", encoding="utf-8", errors="replace")
            os.unlink(path)
        elif os.fstat(self._errlog.fileno()).st_size > _ERRLOG_MAX_BYTES:
            self._errlog.truncate(0)
        self._errlog_mark = os.fstat(self._errlog.fileno()).st_size
        params = mcp.StdioServerParameters(
            command=self.command, args=self.args, env=self.env, cwd=self.cwd
        )
        return mcp.stdio_client(params, errlog=self._errlog)

    def _stderr_tail(self, lines: int = 5) -> str:
        """The last lines the current server process wrote to stderr, for error messages."""
        if self._errlog is None:
            return ""
        try:
            self._errlog.seek(self._errlog_mark)
            text = self._errlog.read()[-4000:]
        except (OSError, ValueError):
            return ""
        tail = [" ".join(line.split()) for line in text.splitlines() if line.strip()][-lines:]
        return ("; server stderr: " + " | ".join(tail)) if tail else ""

    async def _own_session(self, ready: asyncio.Future[Any], stop: asyncio.Event) -> None:
        """Hold the transport and session open until `stop` is set (enter and exit here)."""
        try:
            # inside the try: every failure, this one included, reaches the caller on `ready`
            mcp = _sdk()
            async with AsyncExitStack() as stack:
                streams = await stack.enter_async_context(self._transport())
                session = await stack.enter_async_context(mcp.ClientSession(streams[0], streams[1]))
                init = await session.initialize()
                info = _field(init, "server_info", "serverInfo")
                self.server_info = info.model_dump() if info is not None else {}
                if not ready.done():
                    ready.set_result(session)
                await stop.wait()
        except asyncio.CancelledError:
            if not ready.done():
                ready.set_exception(MCPError(f"connecting to MCP server {self.name} was cancelled"))
            raise
        except Exception as e:  # handed to the caller waiting on `ready`, or logged
            if not ready.done():
                ready.set_exception(e)
            else:
                logger.debug("MCP session %s ended: %s", self.name, _describe(e))

    async def _open(self) -> Any:
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[Any] = loop.create_future()
        stop = asyncio.Event()
        owner = loop.create_task(self._own_session(ready, stop))
        try:
            session = await asyncio.wait_for(asyncio.shield(ready), self.connect_timeout)
        except BaseException as e:
            stop.set()
            owner.cancel()
            await asyncio.gather(owner, return_exceptions=True)
            if isinstance(e, asyncio.TimeoutError):
                raise MCPError(
                    f"MCP server {self.name} did not finish the handshake within "
                    f"{self.connect_timeout:g}s{self._stderr_tail()}"
                ) from None
            where = f"connect to {self.url}" if self.url else f"start {self.name}"
            raise MCPError(f"could not {where}: {_describe(e)}{self._stderr_tail()}") from None
        self._session, self._stop, self._owner = session, stop, owner
        self._generation += 1
        self.connects += 1
        return session

    def _forget_if_forked(self) -> None:
        # A forked child inherits the parent's session objects, bound to a loop that does not
        # run here; it starts its own session instead.
        if self._pid != os.getpid():
            self._pid = os.getpid()
            self._session = self._stop = self._owner = self._lock = None

    async def _ensure(self) -> tuple[Any, int]:
        self._forget_if_forked()
        if self._closed:
            raise MCPError(f"MCP toolset {self.name} is closed")
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._session is None:
                await self._open()
            return self._session, self._generation

    async def _drop(self, generation: int | None = None) -> None:
        """End the session (if it is still the one of `generation`) and wait for its teardown."""
        self._forget_if_forked()
        if generation is not None and generation != self._generation:
            return  # another call already replaced the broken session
        stop, owner = self._stop, self._owner
        self._session = self._stop = self._owner = None
        if stop is not None:
            stop.set()
        if owner is not None:
            try:
                await asyncio.wait_for(owner, 10.0)
            except (asyncio.TimeoutError, asyncio.CancelledError):
                owner.cancel()

    async def _request(self, method: str, *args: Any) -> Any:
        """Call a session method, reconnecting once when the connection is lost."""
        lost = ""
        for attempt in range(2):
            try:
                session, generation = await self._ensure()
            except MCPError as e:
                if attempt == 0:
                    raise
                raise _ConnectionLost(f"{lost}; reconnecting failed: {e}") from None
            try:
                return await asyncio.wait_for(getattr(session, method)(*args), self.timeout)
            except asyncio.TimeoutError:
                raise
            except Exception as e:
                code = getattr(getattr(e, "error", None), "code", None)
                if code in REQUEST_TIMEOUT:
                    raise asyncio.TimeoutError() from None
                if code is not None and code != CONNECTION_CLOSED:
                    raise  # the server answered with an error: the connection is fine
                lost = _describe(e)
            tail = self._stderr_tail(3)
            await self._drop(generation)
            if attempt == 0:
                logger.info("MCP server %s connection lost (%s); reconnecting", self.name, lost)
        raise _ConnectionLost(f"{lost}; it failed again after one reconnect{tail}")

    async def _list_tools(self) -> list[Any]:
        tools: list[Any] = []
        cursor = None
        for _ in range(100):  # bounded: a server whose cursor never ends cannot hang us
            if cursor is None:
                page = await self._request("list_tools")
            else:
                types = _sdk().types
                params = types.PaginatedRequestParams(cursor=cursor)
                page = await self._request("list_tools", params)
            tools.extend(page.tools)
            cursor = _field(page, "next_cursor", "nextCursor")
            if not cursor:
                break
        return tools

    async def _call(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        try:
            result = await self._request("call_tool", name, arguments)
        except _ConnectionLost as e:
            return ToolResult(
                f"The MCP server {self.name} closed the connection while running {name!r} "
                f"({e}). The tool is unavailable for now.",
                is_error=True,
                metadata={"connects": self.connects},
            )
        except MCPError as e:
            return ToolResult(f"MCP tool {name!r} is unavailable: {e}", is_error=True)
        except asyncio.TimeoutError:
            return ToolResult(
                f"MCP tool {name!r} did not answer within {self.timeout:g}s.", is_error=True
            )
        except Exception as e:
            return ToolResult(f"MCP tool {name!r} failed: {_describe(e)}", is_error=True)
        return convert_result(result)

    # -- public API (callable from any event loop)

    async def tools(self) -> list[MCPTool]:
        """Connect if needed and return the server's tools (listed once, then cached)."""
        if self._tools is None:
            try:
                listed = await _LoopThread.get().run(self._list_tools())
            except _ConnectionLost as e:
                raise MCPError(f"MCP server {self.name} closed the connection: {e}") from None
            except asyncio.TimeoutError:
                raise MCPError(f"MCP server {self.name} did not list its tools in time") from None
            self._tools = [MCPTool.create(self, t) for t in listed]
        return list(self._tools)

    async def call(self, name: str, arguments: Mapping[str, Any] | None = None) -> ToolResult:
        """Call tool `name` of the server (by its server-side name) and convert the result."""
        return await _LoopThread.get().run(self._call(name, dict(arguments or {})))

    async def close(self) -> None:
        """End the session (stopping a stdio server). Later calls return an error result."""
        if self._closed:
            return
        self._closed = True
        await _LoopThread.get().run(self._drop())
        if self._errlog is not None:
            self._errlog.close()
            self._errlog = None

    def close_sync(self, timeout: float = 10.0) -> None:
        """`close` for code without a running loop (atexit, a sync `env.close`)."""
        if self._closed:
            return
        self._closed = True
        try:
            _LoopThread.get().submit(self._drop()).result(timeout)
        except (concurrent.futures.TimeoutError, RuntimeError) as e:
            logger.debug("closing MCP session %s: %s", self.name, _describe(e))


@atexit.register
def _close_all() -> None:
    # Stop stdio servers cleanly rather than leaving them to notice a closed pipe.
    for toolset in list(_live_toolsets):
        toolset.close_sync(timeout=5.0)


class MCPTool(Tool):
    """One tool of an MCP server; its argument schema is exactly the server's `inputSchema`."""

    toolset: MCPToolset
    remote_name: str
    input_schema: dict[str, Any]

    @classmethod
    def create(cls, toolset: MCPToolset, tool: Any) -> MCPTool:
        """A tool instance (of a class made for it) from a listed MCP `Tool`."""
        schema = dict(_field(tool, "input_schema", "inputSchema") or {"type": "object"})
        attrs = {
            "name": toolset.prefix + tool.name,
            "description": tool.description or tool.name,
            "Args": args_model(tool.name, schema),
            "remote_name": tool.name,
            "input_schema": schema,
        }
        sub = type(f"MCPTool[{tool.name}]", (cls,), attrs)
        instance = sub()
        instance.toolset = toolset
        return instance

    def json_schema(self) -> dict[str, Any]:
        """The server's own input schema."""
        return json.loads(json.dumps(self.input_schema))

    async def call(self, args: BaseModel | Mapping[str, Any]) -> ToolResult:
        """Send the call to the server (fields the caller did not set are left out)."""
        if isinstance(args, BaseModel):
            arguments = args.model_dump(by_alias=True, exclude_unset=True)
        else:
            arguments = dict(args)
        return await self.toolset.call(self.remote_name, arguments)

    def clone(self) -> MCPTool:
        """The same tool: it is a handle on the toolset, whose session clones share."""
        return self

    async def close(self) -> None:
        """Nothing per tool: the toolset owns the session (close it with `toolset.close()`)."""

    def __repr__(self) -> str:
        return f"MCPTool({self.name!r} of {self.toolset.name!r})"
