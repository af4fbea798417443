"""How a tool is shown to a model: its signature, its tag argument and an example call."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, Union, get_args, get_origin

from gemkit.tools.base import Tool


def tool_map(tools: Mapping[str, Tool] | Iterable[Tool]) -> dict[str, Tool]:
    """Tools by name."""
    if isinstance(tools, Mapping):
        return dict(tools)
    return {t.name: t for t in tools}


def _is_str_annotation(annotation: Any) -> bool:
    if annotation is str:
        return True
    if get_origin(annotation) is Union or type(annotation).__name__ == "UnionType":
        args = [a for a in get_args(annotation) if a is not type(None)]
        return args == [str]
    return False


def tag_field(tool: Tool) -> str | None:
    """The argument a `<NAME>content</NAME>` tag fills: the tool's one (required) str field.

    A tool may choose it by setting a `tag_field` attribute.
    """
    explicit = getattr(tool, "tag_field", None)
    if isinstance(explicit, str) and explicit:
        return explicit
    fields = tool.Args.model_fields
    required = [n for n, f in fields.items() if f.is_required()]
    candidates = required or list(fields)
    if len(candidates) != 1:
        return None
    info = fields[candidates[0]]
    return (info.alias or candidates[0]) if _is_str_annotation(info.annotation) else None


def _sample(prop: dict[str, Any]) -> Any:
    if "enum" in prop and prop["enum"]:
        return prop["enum"][0]
    kind: Any = prop.get("type")
    if kind is None and "anyOf" in prop:
        kinds = [p.get("type") for p in prop["anyOf"] if p.get("type") != "null"]
        kind = kinds[0] if kinds else None
    return {"string": "...", "integer": 0, "number": 0.0, "boolean": False, "array": []}.get(
        kind, {}
    )


def example_call(tool: Tool, fmt: str = "hermes") -> str:
    """A well-formed call of `tool` in format `fmt`, with placeholder argument values."""
    field_name = tag_field(tool)
    if fmt == "tag" and field_name is not None:
        return f"<{tool.name}>...</{tool.name}>"
    if fmt == "fence":
        return "```python\n...\n```"
    schema = tool.json_schema()
    required = schema.get("required", [])
    props = schema.get("properties", {})
    args = {name: _sample(props.get(name, {})) for name in required}
    args_json = json.dumps(args, ensure_ascii=False)
    if fmt == "tag":
        return f"<{tool.name}>{args_json}</{tool.name}>"
    if fmt == "openai":
        return (
            '{"type": "function", "function": {"name": "'
            + tool.name
            + '", "arguments": '
            + json.dumps(args_json, ensure_ascii=False)
            + "}}"
        )
    return '<tool_call>{"name": "' + tool.name + '", "arguments": ' + args_json + "}</tool_call>"


def _type_name(prop: dict[str, Any]) -> str:
    if "enum" in prop:
        return " | ".join(json.dumps(v, ensure_ascii=False) for v in prop["enum"])
    if "anyOf" in prop:
        return " | ".join(_type_name(p) for p in prop["anyOf"])
    if "$ref" in prop:
        return str(prop["$ref"]).rsplit("/", 1)[-1]
    kind = prop.get("type", "any")
    if kind == "array" and isinstance(prop.get("items"), dict):
        return f"list[{_type_name(prop['items'])}]"
    return str(kind)


def signature(tool: Tool) -> str:
    """`name(a: integer, b: string = "x")`: the tool's arguments in one line."""
    schema = tool.json_schema()
    required = set(schema.get("required", []))
    parts = []
    for name, prop in schema.get("properties", {}).items():
        part = f"{name}: {_type_name(prop)}"
        if name not in required and "default" in prop:
            part += f" = {json.dumps(prop['default'], ensure_ascii=False)}"
        elif name not in required:
            part += " (optional)"
        parts.append(part)
    return f"{tool.name}({', '.join(parts)})"
