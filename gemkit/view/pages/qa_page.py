"""A QA record: the seed question, each inject and fuzz edit as a diff, the supporting facts
in their documents, and each verification stage."""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from typing import Any

from gemkit.view.catalog import Catalog
from gemkit.view.collection import Collection
from gemkit.view.markup import Markup, escape, fmt, join
from gemkit.view.pages.parts import badge, kv, message, outcome, section
from gemkit.view.side_data import Corpus

_TOKEN = re.compile(r"\S+\s*|\s+")


def word_diff(a: str, b: str) -> Markup:
    """`b` with the words not in `a` marked inserted and those of `a` not in `b` deleted."""
    x, y = _TOKEN.findall(a), _TOKEN.findall(b)
    out = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, x, y, autojunk=False).get_opcodes():
        if op in ("delete", "replace"):
            out.append(fmt("<del>{t}</del>", t="".join(x[i1:i2])))
        if op in ("insert", "replace"):
            out.append(fmt("<ins>{t}</ins>", t="".join(y[j1:j2])))
        if op == "equal":
            out.append(escape("".join(x[i1:i2])))
    return join(out)


def corpus_for(cat: Catalog, coll: Collection) -> Corpus | None:
    """The `corpus.jsonl` of the collection's folder or the nearest folder above it."""
    rel = coll.rel
    while True:
        if rel in cat.corpora:
            return cat.corpora[rel]
        if not rel:
            return None
        rel = rel.rpartition("/")[0]


def qa_view(qa: Mapping[str, Any], corpus: Corpus | None) -> tuple[str, Markup]:
    """The title and body of a QA page (`corpus`: where the facts' documents are)."""
    status = (
        badge("kept", "ok") if qa["stage"] == "kept" else badge(f"rejected at {qa['stage']}", "bad")
    )
    steps = [
        fmt(
            '<li class="step seed"><div class="label">seed question</div><p class="q">{q}</p>'
            '<p class="muted">answer: {a}</p></li>',
            q=qa["seed"]["question"] or "(not recorded)",
            a=qa["seed"]["answer"] or "–",
        )
    ]
    for i, s in enumerate(qa["steps"], 1):
        fact = s["fact"]
        if s["at"] >= 0:
            q, at = s["question_before"], s["at"]
            question = fmt(
                "{a}<del>{b}</del><ins>{n}</ins>{c}",
                a=q[:at],
                b=s["before"],
                n=s["after"],
                c=q[at + len(s["before"]) :],
            )
        else:
            question = fmt(
                '<span class="muted">(the phrase is not in the question before it)</span>'
            )
        steps.append(
            fmt(
                '<li class="step {op}"><div class="label">{i}. {op}</div><p class="phrase">'
                "<del>{b}</del> → <ins>{a}</ins></p><p class='q'>{q}</p>{f}</li>",
                i=i,
                op=s["op"],
                b=s["before"],
                a=s["after"],
                q=question,
                f=fmt(
                    '<p class="fact">fact <a href="#doc-{d}">{d}</a>: {t}</p>',
                    d=fact.get("doc_id", "?"),
                    t=fact.get("text", ""),
                )
                if fact
                else Markup(""),
            )
        )
    if qa["final_wording"]:
        a, b = qa["final_wording"]
        steps.append(
            fmt(
                '<li class="step final"><div class="label">final wording (from the logical '
                'form)</div><p class="q">{q}</p></li>',
                q=word_diff(a, b),
            )
        )
    rejected = ""
    if qa["rejected_edits"]:
        rows = join(
            fmt(
                "<tr><td>{o}</td><td>{b}</td><td>{a}</td><td>{s}</td><td>{r}</td></tr>",
                o=e.get("op", ""),
                b=e.get("before", ""),
                a=e.get("after", ""),
                s=e.get("stage", ""),
                r=e.get("reason", ""),
            )
            for e in qa["rejected_edits"]
        )
        rejected = section(
            f"edits tried and rejected ({len(qa['rejected_edits'])})",
            fmt(
                '<table class="grid"><tr><th>op</th><th>before</th><th>after</th><th>stage</th>'
                "<th>reason</th></tr>{r}</table>",
                r=rows,
            ),
        )
    docs: dict[str, list[str]] = {}
    for f in qa["facts"]:
        docs.setdefault(str(f.get("doc_id", "?")), []).append(str(f.get("text", "")))
    doc_parts = []
    for doc_id, facts in docs.items():
        doc = corpus.get(doc_id) if corpus is not None else None
        if doc is None:
            text = Markup('<p class="muted">document not found next to these records</p>')
        else:
            body = str(doc.get("text", ""))
            text = fmt(
                '<p class="doc-title">{t}</p><div class="doc">{b}</div>',
                t=doc.get("title", doc_id),
                b=_highlight_all(body, facts),
            )
        doc_parts.append(
            fmt(
                '<div class="docbox" id="doc-{d}"><div class="docid">{d}</div><ul>{f}</ul>'
                "<details><summary>document</summary>{t}</details></div>",
                d=doc_id,
                f=join(fmt("<li>{x}</li>", x=x) for x in facts),
                t=text,
            )
        )
    stages = []
    for name, v in qa["verification"]:
        passed = v.get("passed")
        figures = {k: x for k, x in v.items() if k not in ("passed", "reason")}
        stages.append(
            fmt(
                '<div class="stage"><h3>{n} {ok}</h3>{r}{f}</div>',
                n=name,
                ok=outcome(passed if isinstance(passed, bool) else None, "passed", "failed"),
                r=message(v["reason"], "warn") if v.get("reason") else Markup(""),
                f=kv(figures),
            )
        )
    answer = qa["answer"] or "–"
    aliases = f" (also: {', '.join(qa['answer_aliases'])})" if qa["answer_aliases"] else ""
    body = fmt(
        '<h1>{id} {status}</h1>{reason}<p class="question">{q}</p><p class="answer">answer: '
        "<strong>{a}</strong>{al}</p>{counts}"
        "{edits}{rejected}{facts}{ver}{extra}",
        id=qa["id"] or "QA record",
        status=status,
        reason=message(qa["reason"], "warn") if qa["reason"] else Markup(""),
        q=qa["question"],
        a=answer,
        al=aliases,
        counts=kv({"injects": qa["n_inject"], "fuzzes": qa["n_fuzz"]}, "kv facts"),
        edits=section(
            f"edits ({len(qa['steps'])})", fmt('<ol class="steps">{s}</ol>', s=join(steps))
        ),
        rejected=rejected,
        facts=section(f"supporting facts ({len(qa['facts'])})", join(doc_parts))
        if doc_parts
        else Markup(""),
        ver=section("verification", join(stages) or message("not verified", "info")),
        extra=section("other fields", kv(qa["extra"]), open_=False) if qa["extra"] else Markup(""),
    )
    return qa["id"] or "QA record", body


def _highlight_all(text: str, facts: Sequence[str]) -> Markup:
    """`text` with every fact sentence in it marked."""
    spans = sorted((i, i + len(f)) for f in set(facts) if f for i in [text.find(f)] if i >= 0)
    out, at = [], 0
    for a, b in spans:
        if a < at:
            continue
        out.append(escape(text[at:a]))
        out.append(fmt("<mark>{m}</mark>", m=text[a:b]))
        at = b
    out.append(escape(text[at:]))
    return join(out)
