"""Pulling answers out of model text: `\\boxed{...}` and friends."""

from __future__ import annotations

import re

BOXED = "\\boxed{"
_BOXED_LEN = len(BOXED)


def extract_boxed(text: str, *, last: bool = True) -> str | None:
    """Return the content of the last (or first) `\\boxed{...}`, braces balanced, or None."""
    start = text.rfind(BOXED) if last else text.find(BOXED)
    if start < 0:
        return None
    i = start + _BOXED_LEN
    close = text.find("}", i)
    if close >= 0:
        inner = text[i:close]
        if "{" not in inner:  # fast path: no nested braces
            return inner.strip()
    depth = 1
    for j in range(i, len(text)):
        c = text[j]
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return text[i:j].strip()
    return None


_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)


def extract_answer(text: str) -> str | None:
    """The last `\\boxed{...}` or `<answer>...</answer>` in `text`, whichever comes later."""
    boxed = extract_boxed(text)
    tags = list(_ANSWER_TAG.finditer(text))
    if tags and (boxed is None or tags[-1].start() > text.rfind(BOXED)):
        return tags[-1][1].strip()
    return boxed
