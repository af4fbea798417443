"""The final answer of a model's reply: every `\\boxed{}` and `<answer>` in it, read in plain text.

Shared by the text task families (`math:`, `qa:`). A reply may state its answer more than once,
but every statement must agree: an env that graded only the last (or first) one would let a
policy write several candidates and rely on the grader to pick. `read_reply` returns them all
and what the reply says after the last one, and the env decides what "agree" means.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from typing import NamedTuple

from gemkit.answers import BOXED, extract_boxed

#: a reply with more answers than this is a list of candidates, whatever they say
MAX_ANSWERS = 8

_TAG = re.compile(r"<(/?)answer>", re.IGNORECASE)
# "final answer: 20", "the final answer is $20$", "final answer 20": an answer stated in prose
# after the last box (without "is" or ":" only a value that starts like a number or formula)
_STATED = re.compile(
    r"final\s+answer\s*(?:(?:is|was|would\s+be|should\s+be|=|:)\s*|(?=[-+$\\\d]))"
    r"((?:[^\n.!?;]|\.(?=\d)){1,120})",
    re.IGNORECASE,
)
# look-alikes NFKC leaves alone but a reader takes for ASCII
_ASCII_LIKE = str.maketrans({"\u2212": "-", "\u2013": "-", "\u2014": "-", "\u00a0": " "})


def plain_text(text: str) -> str:
    """`text` as a reader sees it: NFKC (fullwidth, ligatures), no invisible format characters.

    Zero-width spaces, joiners, bidi controls and soft hyphens (Unicode category Cf) are
    dropped, so they can neither hide a separator nor split a word; the minus sign and dashes
    become `-`.
    """
    if text.isascii():  # NFKC leaves ASCII as it is, and it holds no format characters
        return text
    text = unicodedata.normalize("NFKC", text).translate(_ASCII_LIKE)
    return "".join(c for c in text if unicodedata.category(c) != "Cf")


class Reply(NamedTuple):
    """The answers a reply states, in order, and the text after the last one."""

    answers: list[str]
    tail: str
    #: True when the reply holds more than `MAX_ANSWERS` answers (the list is cut there)
    too_many: bool = False

    def stated_after(self) -> str | None:
        """What a "final answer: ..." sentence after the last answer says, if there is one."""
        m = _STATED.search(plain_text(self.tail))
        return m[1].strip() if m else None


def read_reply(text: str, *, tags: bool = True) -> Reply:
    """Every `\\boxed{...}` (and, with `tags`, `<answer>...</answer>`) in `text`, in order.

    Boxes inside an answer tag are the tag's answers; a box inside a box counts once (as the
    outer box's content). The scan is linear in the text and stops after `MAX_ANSWERS + 1`
    answers. Every answer is in `plain_text`.
    """
    found = _tagged(text) if tags else []
    covered = [(s, e) for s, e, _ in found]
    for span in _boxes(text):
        if len(found) > MAX_ANSWERS:
            break
        if not any(s <= span[0] < e for s, e in covered):
            found.append(span)
    found.sort(key=lambda f: f[0])  # stable: boxes of one tag keep their order
    tail = text[found[-1][1] :] if found else ""
    answers = [plain_text(a) for _, _, a in found[:MAX_ANSWERS]]
    return Reply(answers, tail, len(found) > MAX_ANSWERS)


def _boxes(text: str) -> Iterator[tuple[int, int, str]]:
    """`(start, end, content)` of each top-level `\\boxed{...}`, left to right."""
    start = text.find(BOXED)
    while start >= 0:
        inner = extract_boxed(text[start:], last=False)
        if inner is None:
            return  # unbalanced: no answer here or after
        # extract_boxed strips the content; where it ends tells which boxes are nested in it
        end = text.find("}", text.find(inner, start + len(BOXED)) + len(inner)) + 1
        yield start, end, inner
        start = text.find(BOXED, end)


def _tagged(text: str) -> list[tuple[int, int, str]]:
    """`(start, end, content)` of each `<answer>` tag, paired with the next closing tag.

    A tag whose content holds boxes gives one entry per box.
    """
    out: list[tuple[int, int, str]] = []
    opened = -1
    for m in _TAG.finditer(text):
        if not m[1]:
            opened = m.start() if opened < 0 else opened
            continue
        if opened < 0:
            continue
        inner = text[text.index(">", opened) + 1 : m.start()]
        boxed = [a for _, _, a in _boxes(inner)] if BOXED in inner else []
        out.extend((opened, m.end(), a) for a in boxed or [inner.strip()])
        opened = -1
        if len(out) > MAX_ANSWERS:
            break
    return out
