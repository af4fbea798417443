"""The three verification stages; each returns its verdict with the figures behind it."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from gemkit.synth.qa.logic import FactIndex, Node, mentions
from gemkit.synth.world.world import World

#: a question longer than this many characters fails the quality stage
MAX_CHARS = 600


def check_form(question: str, aliases: Iterable[str], max_chars: int = MAX_CHARS) -> dict[str, Any]:
    """The cheap part of quality: one question, bounded length, the answer not given away."""
    q = question.strip()
    leaked = [a for a in aliases if a and mentions(q, a)]
    one = q.count("?") == 1 and q.endswith("?") and "\n" not in q and len(q.split()) >= 4
    ok = one and not leaked and len(q) <= max_chars
    reason = ("answer leaked: " + leaked[0]) if leaked else \
        ("not a single question" if not one else ("too long" if len(q) > max_chars else ""))
    return {"passed": ok, "answer_leaked": bool(leaked), "one_question": one, "chars": len(q),
            "words": len(q.split()), "reason": reason}


def check_quality(question: str, answer_id: str, aliases: Iterable[str], lf: Node,
                  support: list[dict[str, Any]], doc_text: Callable[[str], str | None],
                  world: World | None, max_chars: int = MAX_CHARS) -> dict[str, Any]:
    """Stage 1: the form checks, every supporting sentence is in its doc, the answer follows."""
    out = check_form(question, aliases, max_chars)
    ungrounded = []
    cache: dict[str, str | None] = {}
    for s in support:
        if s["doc_id"] not in cache:
            cache[s["doc_id"]] = doc_text(s["doc_id"])
        text = cache[s["doc_id"]]
        if text is None or s["text"] not in text:
            ungrounded.append(s["doc_id"])
    out["grounded"] = f"{len(support) - len(ungrounded)}/{len(support)}"
    out["ungrounded"] = ungrounded
    follows = None
    if world is not None:
        triples = []
        for s in support:
            f = world.facts[s["fact"]] if s.get("fact") is not None else None
            if f is not None:
                triples.append((f.subject, f.relation, f.object))
        types = {e: world.entities[e].type for t in triples for e in (t[0], t[2])
                 if isinstance(e, str) and e in world.entities}
        follows = answer_id in FactIndex(triples, types).evaluate(lf)
    out["answer_follows"] = follows
    if ungrounded and not out["reason"]:
        out["reason"] = f"supporting fact not found in doc {ungrounded[0]}"
    if follows is False and not out["reason"]:
        out["reason"] = "the supporting facts do not entail the answer"
    out["passed"] = bool(out["passed"] and not ungrounded and follows is not False)
    return out


def check_uniqueness(lf: Node, answer_id: str, index: FactIndex) -> dict[str, Any]:
    """Stage 3: evaluate the form over every fact; exactly one entity, the answer, must fit."""
    found = index.evaluate(lf)
    ok = found == {answer_id}
    reason = "" if ok else (f"{len(found)} entities fit" if found else "no entity fits")
    return {"passed": ok, "candidates": len(found), "reason": reason}
