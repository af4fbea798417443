"""MCP tools against a real MCP server process (tests/data/mcp_server.py) over stdio and HTTP."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import gymnasium
import pytest
from pydantic import ValidationError

pytest.importorskip("mcp", reason="the MCP SDK is the optional 'mcp' extra")

from gemkit.tools.base import Tool  # noqa: E402
from gemkit.tools.mcp import MCPError, MCPTool, MCPToolset, args_model, convert_result  # noqa: E402

SERVER = str(Path(__file__).resolve().parents[1] / "data" / "mcp_server.py")
STDIO = [sys.executable, SERVER]
TOOL_NAMES = {"add", "reverse", "pid", "sleep", "fail", "crash"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_http_server() -> tuple[subprocess.Popen, str]:
    """The test server over streamable HTTP on a free port, once it accepts connections."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, SERVER, "--http", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the MCP test server exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, f"http://127.0.0.1:{port}/mcp"
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("the MCP test server did not start listening within 60 s")


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def stdio() -> Iterator[MCPToolset]:
    """One stdio server for the module; the toolset is not tied to any test's event loop."""
    toolset = MCPToolset.from_spec(STDIO)
    yield toolset
    toolset.close_sync()


@pytest.fixture(scope="module")
def http() -> Iterator[MCPToolset]:
    proc, url = start_http_server()
    toolset = MCPToolset.from_spec(url)
    yield toolset
    toolset.close_sync()
    stop(proc)


async def tools_by_name(toolset: MCPToolset) -> dict[str, MCPTool]:
    return {t.name: t for t in await toolset.tools()}


async def call(tool: Tool, **arguments):
    return await tool.call(tool.Args.model_validate(arguments))


# --- stdio ---------------------------------------------------------------------------------


async def test_stdio_server_tools_are_listed_with_the_servers_own_schema(stdio):
    tools = await tools_by_name(stdio)
    assert set(tools) == TOOL_NAMES
    add = tools["add"]
    assert isinstance(add, Tool)
    assert add.description == "Add two integers."
    schema = add.json_schema()
    assert schema["required"] == ["a", "b"]
    assert schema["properties"]["a"]["type"] == "integer"
    assert add.openai_schema()["function"]["parameters"] == schema


async def test_stdio_calls_return_the_tool_output_as_text(stdio):
    tools = await tools_by_name(stdio)
    added = await call(tools["add"], a=2, b=40)
    reversed_ = await call(tools["reverse"], text="gemkit")
    assert (added.text, added.is_error) == ("42", False)
    assert reversed_.text == "tikmeg"
    assert added.metadata["structured"] == {"result": 42}


async def test_one_session_serves_every_call(stdio):
    tools = await tools_by_name(stdio)
    before = stdio.connects
    pids = {(await call(tools["pid"])).text for _ in range(5)}
    await asyncio.gather(*(call(tools["add"], a=i, b=i) for i in range(10)))
    assert len(pids) == 1  # the same server process answered every call
    assert stdio.connects == before


def test_calls_from_different_event_loops_share_the_session(stdio):
    async def server_pid() -> str:
        return (await call((await tools_by_name(stdio))["pid"])).text

    first = asyncio.run(server_pid())
    before = stdio.connects
    second = asyncio.run(server_pid())  # a new loop, as a sync env.step would use
    assert first == second and stdio.connects == before


async def test_a_tool_error_is_an_error_result_and_keeps_the_session(stdio):
    tools = await tools_by_name(stdio)
    before = stdio.connects
    failed = await call(tools["fail"], message="nope")
    assert failed.is_error and "nope" in failed.text
    assert (await call(tools["add"], a=1, b=1)).text == "2"
    assert stdio.connects == before


async def test_a_call_past_the_timeout_is_an_error_result_and_keeps_the_session(stdio):
    tools = await tools_by_name(stdio)
    before = stdio.connects
    stdio.timeout = 0.5
    try:
        slow = await call(tools["sleep"], seconds=30)
    finally:
        stdio.timeout = 60.0
    assert slow.is_error and "did not answer within 0.5s" in slow.text
    assert (await call(tools["sleep"], seconds=0)).text == "awake"
    assert stdio.connects == before


async def test_arguments_are_checked_against_the_schema_before_the_call(stdio):
    add = (await tools_by_name(stdio))["add"]
    with pytest.raises(ValidationError, match="a"):
        add.Args.model_validate({"a": "two", "b": 2})
    with pytest.raises(ValidationError, match="b"):
        add.Args.model_validate({"a": 2})


async def test_unset_optional_arguments_are_left_to_the_server_default(stdio):
    fail = (await tools_by_name(stdio))["fail"]
    assert fail.Args.model_validate({}).model_dump(by_alias=True, exclude_unset=True) == {}
    assert (await call(fail)).is_error


async def test_a_crashing_call_reconnects_once_then_returns_a_clear_error(stdio):
    tools = await tools_by_name(stdio)
    first_pid = (await call(tools["pid"])).text
    before = stdio.connects
    crashed = await call(tools["crash"])
    assert crashed.is_error
    assert "closed the connection while running 'crash'" in crashed.text
    assert "failed again after one reconnect" in crashed.text
    assert stdio.connects == before + 1  # exactly one reconnect
    # The next call starts a fresh server and works.
    assert (await call(tools["add"], a=2, b=3)).text == "5"
    assert (await call(tools["pid"])).text != first_pid


async def test_a_server_that_died_between_calls_is_restarted_transparently(stdio):
    tools = await tools_by_name(stdio)
    pid = int((await call(tools["pid"])).text)
    before = stdio.connects
    os.kill(pid, signal.SIGKILL)
    result = await call(tools["add"], a=20, b=22)
    assert (result.text, result.is_error) == ("42", False)
    assert stdio.connects == before + 1
    assert int((await call(tools["pid"])).text) != pid


async def test_a_closed_toolset_answers_with_an_error_result():
    toolset = MCPToolset.from_spec([sys.executable, "-c", "pass"])
    await toolset.close()
    result = await toolset.call("add", {"a": 1, "b": 2})
    assert result.is_error and "closed" in result.text


async def test_a_command_that_does_not_exist_is_a_clear_error():
    toolset = MCPToolset.from_spec("gemkit-no-such-mcp-server --flag")
    with pytest.raises(MCPError, match="could not start gemkit-no-such-mcp-server"):
        await toolset.tools()
    await toolset.close()


async def test_a_server_that_exits_at_start_shows_its_stderr():
    script = "import sys; print('missing API key', file=sys.stderr); sys.exit(1)"
    toolset = MCPToolset.from_spec([sys.executable, "-c", script])
    with pytest.raises(MCPError, match="missing API key"):
        await toolset.tools()
    await toolset.close()


# --- streamable HTTP ------------------------------------------------------------------------


async def test_http_server_tools_are_listed_and_called(http):
    tools = await tools_by_name(http)
    assert set(tools) == TOOL_NAMES
    assert (await call(tools["reverse"], text="abc")).text == "cba"
    pids = {(await call(tools["pid"])).text for _ in range(3)}
    assert len(pids) == 1 and http.connects == 1


async def test_http_server_that_dies_gives_a_clear_error_after_one_reconnect():
    proc, url = start_http_server()
    toolset = MCPToolset.from_spec(url, timeout=20)
    try:
        tools = await tools_by_name(toolset)
        assert (await call(tools["add"], a=1, b=2)).text == "3"
        crashed = await call(tools["crash"])
        assert crashed.is_error
        assert "closed the connection while running 'crash'" in crashed.text
        assert "reconnecting failed" in crashed.text
    finally:
        await toolset.close()
        stop(proc)


# --- specs, schemas, results -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "command", "args", "url"),
    [
        ("python -m my_server --port 3", "python", ["-m", "my_server", "--port", "3"], None),
        (["node", "server.js"], "node", ["server.js"], None),
        ("http://127.0.0.1:8000/mcp", None, [], "http://127.0.0.1:8000/mcp"),
        ({"command": "uvx", "args": ["mcp-server-time"]}, "uvx", ["mcp-server-time"], None),
        ({"command": "python -m srv"}, "python", ["-m", "srv"], None),
        (
            {"url": "https://example.org/mcp", "headers": {"X": "1"}},
            None,
            [],
            "https://example.org/mcp",
        ),
        ({"mcpServers": {"time": {"command": "uvx", "args": ["t"]}}}, "uvx", ["t"], None),
        ({"type": "http", "url": "http://h/mcp"}, None, [], "http://h/mcp"),
    ],
)
def test_from_spec_accepts_commands_lists_urls_and_dicts(spec, command, args, url):
    toolset = MCPToolset.from_spec(spec)
    assert (toolset.command, toolset.args, toolset.url) == (command, args, url)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "command is empty"),
        (42, "expected a command"),
        ({"cmd": "x"}, "unknown MCP server config keys"),
        ({"mcpServers": {"a": {"command": "x"}, "b": {"command": "y"}}}, "exactly one"),
        ({"command": "x", "url": "http://h"}, "exactly one of command"),
        ({"url": "http://h/sse", "type": "sse"}, "SSE transport is not supported"),
    ],
)
def test_from_spec_rejects_what_it_cannot_use_with_a_message(spec, message):
    with pytest.raises(MCPError, match=message):
        MCPToolset.from_spec(spec)


def test_args_model_checks_top_level_types_and_keeps_awkward_names_as_aliases():
    schema = {
        "type": "object",
        "properties": {
            "query": {"type": "string"},
            "limit": {"type": "integer", "default": 5},
            "class": {"type": ["string", "null"]},
            "model_name": {"type": "string"},
            "filters": {"type": "object", "properties": {"lang": {"type": "string"}}},
        },
        "required": ["query"],
        "additionalProperties": False,
    }
    model = args_model("web-search", schema)
    ok = model.model_validate({"query": "q", "class": None, "model_name": "m", "filters": {}})
    assert ok.model_dump(by_alias=True, exclude_unset=True) == {
        "query": "q",
        "class": None,
        "model_name": "m",
        "filters": {},
    }
    with pytest.raises(ValidationError):
        model.model_validate({"limit": 3})  # query is required
    with pytest.raises(ValidationError):
        model.model_validate({"query": "q", "extra": 1})  # additionalProperties: false


def test_results_join_text_blocks_and_summarize_other_content():
    import mcp.types as types

    result = types.CallToolResult.model_validate(
        {
            "content": [
                {"type": "text", "text": "line one"},
                {"type": "image", "data": "aGVsbG8=", "mimeType": "image/png"},
                {"type": "text", "text": "line two"},
            ],
            "isError": True,
        }
    )
    converted = convert_result(result)
    assert converted.is_error
    assert converted.text.splitlines() == [
        "line one",
        "[image image/png, about 6 bytes]",
        "line two",
    ]


def test_structured_only_results_become_json_text():
    import mcp.types as types

    result = types.CallToolResult.model_validate({"content": [], "structuredContent": {"x": 1}})
    converted = convert_result(result)
    assert converted.text == '{"x": 1}' and converted.metadata["structured"] == {"x": 1}


# --- an env episode with MCP tools ------------------------------------------------------------


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_env_episode_uses_mcp_tools_through_make(transport):
    import gemkit

    proc, spec = start_http_server() if transport == "http" else (None, STDIO)
    env = gemkit.make("game:GuessTheNumber-v0-easy", mcp=spec)
    try:
        obs, info = env.reset(seed=0)
        assert "add" in obs and {s["function"]["name"] for s in info["tools"]} >= TOOL_NAMES
        target = env.unwrapped.target
        call_text = (
            f'<tool_call>{{"name": "add", "arguments": {{"a": {target - 1}, "b": 1}}}}</tool_call>'
        )
        obs, reward, terminated, truncated, info = env.step(call_text)
        assert not terminated and info["tool_calls"] == 1
        assert obs.endswith(f"\n{target}")  # the tool result is the next observation
        obs, reward, terminated, truncated, info = env.step(f"\\boxed{{{target}}}")
        assert terminated and reward == 1.0
    finally:
        env.close()
        if proc is not None:
            stop(proc)


# -- a third-party MCP server from PyPI, the missing extra, the JSON form of a tag call ---------

TIME_SERVER = [sys.executable, "-m", "mcp_server_time", "--local-timezone", "UTC"]


def _time_server_or_skip() -> list[str]:
    pytest.importorskip("mcp_server_time", reason="needs mcp-server-time (in the dev extra)")
    return TIME_SERVER


class _TokyoClock(gymnasium.Env):
    """A plain gymnasium env: convert 12:00 UTC to Tokyo time; the final answer is graded."""

    observation_space = gymnasium.spaces.Text(10_000)
    action_space = gymnasium.spaces.Text(10_000)

    def reset(self, *, seed=None, options=None):
        return "What time is it in Asia/Tokyo when it is 12:00 in UTC? Answer HH:MM.", {}

    def step(self, action):
        ok = action.strip() == "21:00"
        return ("Correct." if ok else "Wrong."), float(ok), True, False, {"success": ok}


def test_a_third_party_mcp_server_drives_an_env_episode():
    from gemkit.tools.wrapper import wrap_with_tools

    env = wrap_with_tools(_TokyoClock(), mcp=_time_server_or_skip())
    try:
        obs, info = env.reset()
        names = {t["function"]["name"] for t in info["tools"]}
        assert {"get_current_time", "convert_time"} <= names and "convert_time" in obs
        call = (
            '<tool_call>{"name": "convert_time", "arguments": {"source_timezone": "UTC", '
            '"time": "12:00", "target_timezone": "Asia/Tokyo"}}</tool_call>'
        )
        obs, reward, terminated, _, info = env.step(call)
        assert not terminated and info["tool_errors"] == 0 and "21:00" in obs
        # one required string argument: the advertised JSON object form and the bare text
        obs, *_, info = env.step('<get_current_time>{"timezone": "Asia/Tokyo"}</get_current_time>')
        assert info["tool_errors"] == 0 and "Asia/Tokyo" in obs, obs
        obs, *_, info = env.step("<get_current_time>Europe/Paris</get_current_time>")
        assert info["tool_errors"] == 0 and "Europe/Paris" in obs, obs
        obs, reward, terminated, _, info = env.step("21:00")
        assert (reward, terminated, info["success"]) == (1.0, True, True)
    finally:
        env.close()


def test_without_the_mcp_extra_the_message_comes_at_once():
    code = (
        "import json, sys; sys.modules['mcp'] = None\n"
        "import gemkit\n"
        "try:\n    gemkit.make('toy:Copy-v0', mcp=['python', 'server.py'])\n"
        "except gemkit.GemkitError as e:\n    print(json.dumps(str(e)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    # raised while building the env: no server started, no handshake waited for
    assert "pip install 'gemkit[mcp]'" in json.loads(out.stdout.strip()), out.stderr[-2000:]


def test_a_json_object_fills_any_tools_arguments_in_a_tag():
    from gemkit.tools.calls import parse_action
    from gemkit.tools.function import tool

    @tool
    def lookup(query: str, limit: int = 3) -> str:
        """Look something up."""
        return query

    tools = {"lookup": lookup}
    parsed = parse_action('<lookup>{"query": "x y", "limit": 2}</lookup>', tools)
    assert parsed.items[0].arguments == {"query": "x y", "limit": 2}
    # JSON that is not an object of this tool's arguments is the text argument, as before
    for text in ('{"other": 1}', "{not json}", '{"limit": 2}', "plain words"):
        parsed = parse_action(f"<lookup>{text}</lookup>", tools)
        assert parsed.items[0].arguments == {"query": text}, text
