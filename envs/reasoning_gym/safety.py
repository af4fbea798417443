"""Screening answers before reasoning-gym scorers that `eval` them.

A few upstream `score_answer` methods pass the model's text to Python's `eval` or to sympy's
`parse_expr` (which calls `eval`): a model could run code in the trainer (`__import__('os')`) or
stall it (`9**9**9**9`). Answers to those datasets must fit the shape the task asks for, or they
score 0 without reaching the scorer. Every other dataset parses answers without `eval`.
"""

from __future__ import annotations

import re

#: datasets whose scorer runs `eval(answer)` to read a list or a grid
LIST_EVAL = frozenset({"binary_matrix", "spiral_matrix", "string_insertion", "n_queens"})
#: datasets whose scorer runs sympy `parse_expr(answer)` on an arithmetic expression
ARITHMETIC_EVAL = frozenset({"countdown", "puzzle24"})
#: datasets whose scorer runs sympy `parse_expr(answer)` on an expression in variables
SYMBOLIC_EVAL = frozenset(
    {"polynomial_multiplication", "simple_integration", "intermediate_integration"}
)
SCREENED = LIST_EVAL | ARITHMETIC_EVAL | SYMBOLIC_EVAL

MAX_CHARS = 2000
_FUNCTIONS = frozenset(
    "sin cos tan cot sec csc asin acos atan sinh cosh tanh asinh acosh atanh exp log ln sqrt "
    "pi E I oo Abs Integral".split()
)
# a power of a power, or a power with a long literal exponent, can take forever to evaluate
_TOWER = re.compile(r"\*\*\s*\(?\s*[\w.]+\s*\)?\s*\*\*|\*\*\s*\(?\s*\d{3,}")


def refusal(dataset: str, answer: str) -> str | None:
    """Why `answer` must not reach `dataset`'s scorer, or None when it is safe to score."""
    if dataset not in SCREENED:
        return None
    if len(answer) > MAX_CHARS:
        return f"more than {MAX_CHARS} characters"
    if dataset in LIST_EVAL:
        # without calls, `**` or `*` an eval'd literal can neither act nor explode
        if re.search(r"[()*]|__|\blambda\b", answer):
            return "code, not a plain list or grid"
        return None
    if "**" in answer and _TOWER.search(answer):
        return "a power tower or a huge exponent"
    if dataset in ARITHMETIC_EVAL:
        if not re.fullmatch(r"[\d\s+\-*/().]*", answer) or re.search(r"\d{7,}", answer):
            return "something other than numbers, + - * / and brackets"
        return None
    if re.search(r"[_'\"\[\]{};:=\\@`$]|\.\s*[A-Za-z]", answer):
        return "code, not a math expression"
    if any(int(e) > 30 for e in re.findall(r"\*\*\s*\(?\s*(\d+)", answer)):
        return "an exponent above 30"  # expanding (x+y+z)**99 takes minutes
    unknown = {w for w in re.findall(r"[A-Za-z]+", answer) if len(w) > 1} - _FUNCTIONS
    if unknown:
        return f"unknown names {sorted(unknown)[:3]}"
    return None
