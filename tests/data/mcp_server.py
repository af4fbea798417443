"""A small MCP server for the tests and benchmarks: `python mcp_server.py [--http PORT]`.

Tools: `add(a, b)`, `reverse(text)`, `pid()` (the server's process id, to tell sessions apart),
`sleep(seconds)`, `fail(message)` (a tool-level error), `crash()` (the process exits mid-call).
"""

from __future__ import annotations

import argparse
import asyncio
import os

try:  # mcp 2.x
    from mcp.server.mcpserver import MCPServer as _Server
    from mcp.server.mcpserver.exceptions import ToolError
except ImportError:  # mcp 1.x
    from mcp.server.fastmcp import FastMCP as _Server  # type: ignore[no-redef]
    from mcp.server.fastmcp.exceptions import ToolError  # type: ignore[no-redef]

server = _Server("gemkit-test", log_level="WARNING")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def reverse(text: str) -> str:
    """Reverse a string."""
    return text[::-1]


@server.tool()
def pid() -> int:
    """The server process id."""
    return os.getpid()


@server.tool()
async def sleep(seconds: float) -> str:
    """Wait, then answer."""
    await asyncio.sleep(seconds)
    return "awake"


@server.tool()
def fail(message: str = "failed on purpose") -> str:
    """Fail on purpose (a deliberate tool error: its message reaches the client)."""
    raise ToolError(message)


@server.tool()
def crash() -> str:
    """Exit the server process in the middle of the call."""
    os._exit(3)


def main() -> None:
    """Serve over stdio, or over streamable HTTP with --http PORT."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int, help="serve streamable HTTP on this port")
    args = parser.parse_args()
    if args.http is None:
        server.run("stdio")
    elif hasattr(server, "settings") and hasattr(server.settings, "port"):  # mcp 1.x
        server.settings.host, server.settings.port = "127.0.0.1", args.http
        server.run("streamable-http")
    else:
        server.run("streamable-http", host="127.0.0.1", port=args.http)


if __name__ == "__main__":
    main()
