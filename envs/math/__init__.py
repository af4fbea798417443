"""Math questions (`math:` family): `\\boxed{}` answers graded for mathematical equivalence.

Registration is cheap: the grader's heavy imports (sympy, math-verify) load on first use.
"""

from __future__ import annotations

from gemkit.registry import register

_ENV = "gemkit.envs.math.env"

register(
    "math:Builtin-v0",
    f"{_ENV}:builtin",
    description="Built-in math problems: arithmetic, fractions, algebra, counting.",
    tags=("math", "single-turn"),
)
register(
    "math:Jsonl-v0",
    f"{_ENV}:from_jsonl",
    description="Math problems from your JSONL file or datasets folder (path=...).",
    tags=("math", "single-turn", "custom-data"),
)
for _level in ("easy", "hard"):
    register(
        f"math:Arithmetic-v0-{_level}",
        f"{_ENV}:arithmetic",
        kwargs={"level": _level},
        description="Endless generated arithmetic problems with exact answers.",
        tags=("math", "single-turn", "procedural", _level),
    )
