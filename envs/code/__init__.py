"""Programming tasks (`code:` family): code from the model runs in the sandbox against tests."""

from __future__ import annotations

from gemkit.registry import register

register(
    "code:Builtin-v0",
    "gemkit.envs.code.env:BuiltinCodeEnv",
    description="Small built-in Python problems checked by asserts or stdin/stdout tests.",
    tags=("code", "single-turn", "sandbox"),
    expert="gemkit.envs.code.env:CodeExpert",
)
register(
    "code:Jsonl-v0",
    "gemkit.envs.code.env:JsonlCodeEnv",
    description="Python problems from a JSONL of {question, tests} (pass path=).",
    tags=("code", "single-turn", "sandbox"),
    expert="gemkit.envs.code.env:CodeExpert",
)
