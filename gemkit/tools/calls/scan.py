"""What every call scanner shares: the span type, the decoding budget, bracket matching."""

from __future__ import annotations

import ast
import json
from typing import Any

from gemkit.tools.calls.model import MalformedCall, ToolCall

_DECODER = json.JSONDecoder()
_LITERAL_LIMIT = 100_000  # longest Python-literal call text tried (literal_eval is not linear)

Span = tuple[int, int, list[ToolCall | MalformedCall]]


class _Work:
    """What one parse may still spend on decoding, and what decoding from each `{` gave.

    Decoding reads a growing window, so a broken object costs about its own size; the budget
    (a few times the text's length) bounds junk built to make every key start a decode, and
    the memo stops a long object being decoded again for each key inside it.
    """

    def __init__(self, size: int):
        self.left = 8 * size + 1_000_000
        self.memo: dict[int, tuple[Any, int] | None] = {}

    def spend(self, chars: int) -> bool:
        """Charge `chars` of reading; False once the budget is gone."""
        self.left -= chars
        return self.left >= 0

    def decode(self, body: str, pos: int, stop: int | None = None) -> tuple[Any, int] | None:
        """The JSON value starting at `pos` (after blanks) and where it ends, or None."""
        stop = len(body) if stop is None else stop
        while pos < stop and body[pos] in " \t\r\n":
            pos += 1
        window = 2048
        while True:
            end = min(stop, pos + window)
            if not self.spend(end - pos):
                return None
            chunk = body[pos:end]
            try:
                value, used = _DECODER.raw_decode(chunk)
                return value, pos + used
            except json.JSONDecodeError as e:
                # JSON fails at the same place in a prefix as in the whole text, unless the
                # failure is the prefix ending: only then is a wider window worth reading
                cut = e.pos >= len(chunk) - 1 or e.msg.startswith("Unterminated")
                if end >= stop or not cut:
                    return None
            except (RecursionError, ValueError):
                return None
            window *= 8


def _gaps(spans: list[Span], size: int) -> list[tuple[int, int]]:
    gaps, pos = [], 0
    for start, end, _ in sorted(spans, key=lambda s: s[0]):
        if start > pos:
            gaps.append((pos, start))
        pos = max(pos, end)
    if pos < size:
        gaps.append((pos, size))
    return gaps


def _balanced_end(text: str, start: int, stop: int, work: _Work) -> int | None:
    """The end of the bracketed value opening at `start` (quotes of both kinds skipped)."""
    depth, quote, i = 0, "", start
    while i < stop:
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 1
            elif ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
            if depth == 0:
                work.spend(i + 1 - start)
                return i + 1
        i += 1
    work.spend(i - start)
    return None


def _python_literal(text: str, start: int, stop: int, work: _Work) -> tuple[Any, int] | None:
    """A dict written as a Python literal (single quotes, True/None) at `start`, or None."""
    end = _balanced_end(text, start, min(stop, start + _LITERAL_LIMIT), work)
    if end is None or work.left < 0:
        return None
    try:
        value = ast.literal_eval(text[start:end])
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    return value, end
