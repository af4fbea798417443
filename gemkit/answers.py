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


_ANSWER_TAG = re.compile(r"<(/?)answer>", re.IGNORECASE)


def _last_answer_tag(text: str) -> tuple[int, str] | None:
    """(start, content) of the last `<answer>...</answer>`, each opening paired with the next close.

    One pass over the tags: a regex `<answer>(.*?)</answer>` would rescan the rest of the text
    from every unclosed opening tag (quadratic in a reply full of them).
    """
    last = None
    opened = -1
    for m in _ANSWER_TAG.finditer(text):
        if not m[1]:
            if opened < 0:
                opened = m.start()
        elif opened >= 0:
            last = (opened, text[opened + len("<answer>") : m.start()])
            opened = -1
    return last


def extract_answer(text: str) -> str | None:
    """The last `\\boxed{...}` or `<answer>...</answer>` in `text`, whichever comes later."""
    boxed = extract_boxed(text)
    tag = _last_answer_tag(text)
    if tag is not None and (boxed is None or tag[0] > text.rfind(BOXED)):
        return tag[1].strip()
    return boxed
