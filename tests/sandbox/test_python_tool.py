"""The `python` tool: what the model sees for output, errors and limits; stateless vs stateful."""

from __future__ import annotations

import asyncio

import pytest

from gemkit.tools.base import Tool
from gemkit.tools.python import PythonArgs, PythonTool


@pytest.fixture
async def tool():
    t = PythonTool(timeout=10)
    yield t
    await t.close()


@pytest.fixture
async def session_tool():
    t = PythonTool(stateful=True, timeout=10)
    yield t
    await t.close()


def test_the_tool_follows_the_tool_contract():
    t = PythonTool()
    assert isinstance(t, Tool) and t.name == "python"
    assert t.json_schema()["required"] == ["code"]
    assert t.openai_schema()["function"]["name"] == "python"


def test_only_stateless_tools_may_run_calls_in_parallel():
    assert PythonTool().parallel_safe is True
    assert PythonTool(stateful=True).parallel_safe is False


async def test_printed_output_comes_back_as_text(tool):
    r = await tool.call(PythonArgs(code="print(sum(range(100)))"))
    assert (r.text, r.is_error) == ("4950", False)


async def test_an_exception_returns_the_traceback_tail_as_an_error(tool):
    r = await tool.call(PythonArgs(code="print('before')\n[][3]"))
    assert r.is_error
    assert r.text.startswith("before\n")
    assert r.text.endswith("IndexError: list index out of range")


async def test_a_timeout_is_an_error_that_names_the_limit():
    quick = PythonTool(timeout=1)
    r = await quick.call(PythonArgs(code="while True:\n    pass"))
    assert r.is_error and r.text == "TimeoutError: code ran longer than 1 s"


async def test_a_memory_hog_is_an_error_that_names_the_limit(tool):
    r = await tool.call(PythonArgs(code="x = bytearray(8 * 1024**3)"))
    assert r.is_error and r.text == "MemoryError: code used more than the 512 MB memory limit"


async def test_empty_code_gets_a_message_with_the_expected_input(tool):
    r = await tool.call(PythonArgs(code="   "))
    assert r.is_error and "pass Python source" in r.text


async def test_silent_code_says_how_to_see_values(tool):
    r = await tool.call(PythonArgs(code="x = 1"))
    assert not r.is_error and "print()" in r.text


async def test_stateless_calls_forget_variables(tool):
    await tool.call(PythonArgs(code="secret = 7"))
    r = await tool.call(PythonArgs(code="print(secret)"))
    assert r.is_error and "NameError" in r.text


async def test_stateless_calls_run_in_parallel(tool):
    results = await asyncio.gather(*(tool.call(PythonArgs(code=f"print({i})")) for i in range(8)))
    assert [r.text for r in results] == [str(i) for i in range(8)]


async def test_stateful_calls_keep_variables_until_reset(session_tool):
    await session_tool.call(PythonArgs(code="import math\nr = 3"))
    r = await session_tool.call(PythonArgs(code="print(round(math.pi * r**2, 2))"))
    assert r.text == "28.27"
    await session_tool.reset()
    r = await session_tool.call(PythonArgs(code="print(r)"))
    assert r.is_error and "NameError" in r.text


async def test_a_stateful_timeout_tells_the_model_its_variables_are_gone():
    quick = PythonTool(stateful=True, timeout=1)
    try:
        await quick.call(PythonArgs(code="a = 1"))
        r = await quick.call(PythonArgs(code="import time\ntime.sleep(30)"))
        assert r.is_error and "TimeoutError" in r.text and "session was restarted" in r.text
        after = await quick.call(PythonArgs(code="print('a' in globals())"))
        assert after.text == "False"
    finally:
        await quick.close()


async def test_a_clone_has_its_own_session(session_tool):
    await session_tool.call(PythonArgs(code="mine = 1"))
    twin = session_tool.clone()
    try:
        r = await twin.call(PythonArgs(code="print('mine' in globals())"))
        assert r.text == "False"
    finally:
        await twin.close()


def test_the_tool_works_from_separate_event_loops():
    t = PythonTool(timeout=10)
    first = asyncio.run(t.call(PythonArgs(code="print(1)")))
    second = asyncio.run(t.call(PythonArgs(code="print(2)")))
    asyncio.run(t.close())
    assert (first.text, second.text) == ("1", "2")


def test_a_missing_sandbox_fails_when_the_tool_is_built_with_an_install_hint(monkeypatch):
    from gemkit.sandbox import SandboxUnavailableError, backends

    monkeypatch.setattr(backends, "probe", lambda name, python: f"{name} is broken here")
    with pytest.raises(SandboxUnavailableError, match="apt-get install bubblewrap"):
        PythonTool(backend="bwrap", timeout=3)
