"""`@tool`: typed functions become tools with a schema, docs, JSON results and error results."""

from __future__ import annotations

import asyncio
import threading
from typing import Literal, Optional

import pytest
from pydantic import BaseModel, Field, ValidationError

from gemkit.tools import FunctionTool, Tool, ToolError, ToolResult, tool
from gemkit.tools.function import parse_docstring


class Point(BaseModel):
    x: int
    y: int = 0


@tool
def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first number.
        b (int): The second number,
            which may be negative.
    """
    return a + b


def run(t: Tool, **arguments) -> ToolResult:
    return asyncio.run(t.call(t.Args.model_validate(arguments)))


def test_decorated_function_is_a_tool_and_still_a_function():
    assert isinstance(add, Tool) and isinstance(add, FunctionTool)
    assert add.name == "add"
    assert add(2, 3) == 5
    assert add.__doc__.startswith("Add two integers.")


def test_schema_comes_from_signature_and_google_docstring():
    schema = add.json_schema()
    assert schema["required"] == ["a", "b"]
    assert schema["properties"]["a"]["type"] == "integer"
    assert schema["properties"]["a"]["description"] == "The first number."
    assert schema["properties"]["b"]["description"] == "The second number, which may be negative."
    assert schema["additionalProperties"] is False
    assert add.openai_schema() == {
        "type": "function",
        "function": {"name": "add", "description": "Add two integers.", "parameters": schema},
    }


def test_defaults_optional_literal_lists_and_nested_models():
    @tool
    def plot(
        points: list[Point],
        mode: Literal["line", "dots"] = "line",
        title: Optional[str] = None,  # noqa: UP045 - the typing form must work too
        width: int | None = 80,
    ) -> str:
        """Plot points."""
        return f"{len(points)} {mode} {title} {width} {points[0].y}"

    schema = plot.json_schema()
    assert schema["required"] == ["points"]
    assert schema["properties"]["mode"]["enum"] == ["line", "dots"]
    assert schema["properties"]["mode"]["default"] == "line"
    assert schema["properties"]["points"]["items"] == {"$ref": "#/$defs/Point"}
    assert schema["$defs"]["Point"]["required"] == ["x"]
    assert {"type": "null"} in schema["properties"]["title"]["anyOf"]
    assert run(plot, points=[{"x": 1}]).text == "1 line None 80 0"
    with pytest.raises(ValidationError):
        plot.Args.model_validate({"points": [{"x": 1}], "mode": "bars"})


def test_field_defaults_keep_their_constraints_and_descriptions():
    @tool
    def sample(n: int = Field(3, ge=1, description="How many."), _seed: int = 0) -> list[int]:
        """Sample.

        Args:
            n: ignored, since Field(description=...) wins.
            _seed: The seed.
        """
        return [_seed] * n

    schema = sample.json_schema()
    assert schema["properties"]["n"] == {
        "default": 3,
        "description": "How many.",
        "minimum": 1,
        "title": "N",
        "type": "integer",
    }
    assert schema["properties"]["_seed"]["description"] == "The seed."
    assert run(sample, n=2, _seed=7).text == "[7, 7]"
    with pytest.raises(ValidationError):
        sample.Args.model_validate({"n": 0})


def test_unknown_arguments_are_rejected():
    with pytest.raises(ValidationError, match="extra"):
        add.Args.model_validate({"a": 1, "b": 2, "c": 3})


def test_name_and_description_can_be_given():
    @tool(name="sum-two", description="Sum.")
    def f(a: int, b: int) -> int:
        return a + b

    assert (f.name, f.description) == ("sum-two", "Sum.")
    assert tool(lambda x: x, name="ident").name == "ident"


def test_numpy_and_sphinx_docstrings_give_argument_descriptions():
    numpy_doc = """Scale a value.

    Parameters
    ----------
    x : float
        The value.
    k : int, optional
        The factor,
        default 2.

    Returns
    -------
    float
    """
    sphinx_doc = """Scale a value.

    :param x: The value.
    :param int k: The factor.
    :returns: the product
    """
    assert parse_docstring(numpy_doc) == (
        "Scale a value.",
        {"x": "The value.", "k": "The factor, default 2."},
    )
    assert parse_docstring(sphinx_doc) == (
        "Scale a value.",
        {"x": "The value.", "k": "The factor."},
    )


def test_description_is_the_docstring_summary_paragraph():
    assert parse_docstring("Find things\nin the index.\n\nLong text.\n\nArgs:\n    q: query")[
        0
    ] == ("Find things in the index.")
    assert parse_docstring(None) == ("", {})


def test_string_result_is_text_and_other_results_are_json():
    @tool
    def info(kind: str) -> object:
        """Info."""
        return {"str": "plain", "dict": {"a": [1, 2], "é": None}, "model": Point(x=1)}[kind]

    assert run(info, kind="str") == ToolResult("plain")
    assert run(info, kind="dict").text == '{"a": [1, 2], "é": null}'
    assert run(info, kind="model").text == '{"x": 1, "y": 0}'


def test_exception_becomes_an_error_result_without_traceback():
    @tool
    def divide(a: float, b: float) -> float:
        """Divide."""
        if b == 0:
            raise ValueError("b must not be zero")
        return a / b

    result = run(divide, a=1, b=0)
    assert result.is_error
    assert result.text == "Error: divide raised ValueError: b must not be zero"
    assert "Traceback" not in result.text


def test_async_function_tool_is_awaited():
    @tool
    async def slow_echo(text: str) -> str:
        """Echo."""
        await asyncio.sleep(0)
        return text.upper()

    assert run(slow_echo, text="hi").text == "HI"
    assert asyncio.run(slow_echo("x")) == "X"


def test_sync_function_runs_off_the_event_loop_thread():
    loop_thread = []

    @tool
    def where() -> str:
        """Name the thread."""
        return threading.current_thread().name

    async def main() -> str:
        loop_thread.append(threading.current_thread().name)
        return (await where.call(where.Args())).text

    assert asyncio.run(main()) != loop_thread[0]

    inline = tool(where.fn, thread=False)
    assert asyncio.run(inline.call(inline.Args())).text == threading.current_thread().name


def test_function_may_return_a_tool_result():
    @tool
    def check(ok: bool) -> ToolResult:
        """Check."""
        return ToolResult("fine" if ok else "bad input", is_error=not ok)

    assert run(check, ok=False) == ToolResult("bad input", is_error=True)


def test_bad_definitions_raise_clear_tool_errors():
    def star(*args: int) -> int:
        return 0

    with pytest.raises(ToolError, match=r"\*args/\*\*kwargs"):
        tool(star)
    with pytest.raises(ToolError, match="not valid"):
        tool(lambda x: x)  # '<lambda>' is not a function name OpenAI accepts
    with pytest.raises(ToolError, match="needs a function"):
        FunctionTool(42)  # type: ignore[arg-type]


def test_parallel_safe_flag_and_deepcopy():
    import copy

    @tool(parallel_safe=False)
    def step(n: int) -> int:
        """Step."""
        return n + 1

    twin = copy.deepcopy(step)
    assert step.parallel_safe is False and twin.parallel_safe is False
    assert twin is not step and twin.clone().name == "step"
    assert run(twin, n=1).text == "2"
