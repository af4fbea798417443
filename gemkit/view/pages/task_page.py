"""A task tuple: the task, its tools, the database, the reference answer and solution, and
the verifier's verdict on that answer, rule by rule."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from gemkit.view.catalog import Catalog
from gemkit.view.collection import Collection
from gemkit.view.files import ViewError
from gemkit.view.markup import Markup, fmt, join
from gemkit.view.pages.parts import as_json, badge, kv, message, num, outcome, pre, section
from gemkit.view.records import shorten
from gemkit.view.side_data import database_summary, find_database

#: the constraints every task verifier checks before its rules (see `synth.tasks.base`)
GATES = {
    "format": "the answer has the asked shape (any failure here zeroes partial credit)",
    "unknown_item": "every item the answer names exists in the database",
}

#: `(record, database) -> {verdict, verifier, note, solution_source}`: see `gemkit.cli.view`
TaskCheck = Callable[[Mapping[str, Any], Path | None], Mapping[str, Any]]


def _plan_table(answer: Any) -> Markup:
    if isinstance(answer, list) and answer and all(isinstance(d, dict) for d in answer):
        keys = list(dict.fromkeys(k for d in answer for k in d))
        head = join(fmt("<th>{k}</th>", k=k) for k in keys)
        rows = join(
            fmt("<tr>{c}</tr>", c=join(fmt("<td>{v}</td>", v=num(d.get(k))) for k in keys))
            for d in answer
        )
        return fmt(
            '<div class="scroll"><table class="grid"><tr>{h}</tr>{r}</table></div>', h=head, r=rows
        )
    return pre(as_json(answer), "json")


def _database(cat: Catalog, coll: Collection, rel: str | None) -> Markup:
    """The summary of the task's database, or why it is not shown."""
    if not rel:
        return message("this record names no database", "info")
    path, why = find_database(cat.allowed, coll.folder, rel)
    if path is None:
        return message(why, "error" if "outside" in why else "warn")
    try:
        return _db_summary(database_summary(path))
    except ViewError as e:
        return message(str(e), "error")


def _db_summary(summary: Mapping[str, Any]) -> Markup:
    parts = []
    for t in summary["tables"]:
        head = join(fmt("<th>{c}</th>", c=c) for c in t["columns"])
        rows = join(
            fmt("<tr>{c}</tr>", c=join(fmt("<td>{v}</td>", v=shorten(str(v), 60)) for v in r))
            for r in t["sample"]
        )
        parts.append(
            fmt(
                '<h4>{n} <span class="muted">{k} rows</span></h4><div class="scroll">'
                '<table class="grid small"><tr>{h}</tr>{r}</table></div>',
                n=t["name"],
                k=f"{t['rows']:,}",
                h=head,
                r=rows,
            )
        )
    if summary.get("more_tables"):
        parts.append(message(f"{summary['more_tables']} more tables not shown", "info"))
    return join(parts)


def task_view(
    cat: Catalog, coll: Collection, task: Mapping[str, Any], check: Mapping[str, Any] | None
) -> tuple[str, Markup]:
    """The title and body of a task page (`check`: the task checker's result, if any)."""
    if task["status"] == "rejected":
        body = fmt(
            "<h1>{id} {b}</h1>{m}<p>Rejected tasks keep only their id and the reason; their "
            "database was deleted.</p>",
            id=task["id"],
            b=badge("rejected", "bad"),
            m=message(task["reason"] or "no reason recorded", "warn"),
        )
        return task["id"], body
    stats = task["stats"]
    pak = stats.get("pass_at_k") if isinstance(stats.get("pass_at_k"), dict) else {}
    facts = {
        "category": task["category"],
        "level": task["level"],
        "valid answers": stats.get("n_valid_solutions"),
        "answers in all": stats.get("n_answers"),
        "valid fraction": stats.get("valid_fraction"),
        "pass@k": f"{pak.get('passes')} of {pak.get('k')}" if pak else None,
        "tools": len(task["tools"]),
        "database": task["database"],
    }
    verdict = (check or {}).get("verdict")
    failed: dict[str, list[str]] = {}
    if isinstance(verdict, Mapping):
        for v in verdict.get("violations") or []:
            failed.setdefault(str(v).split(":", 1)[0], []).append(str(v))
    rows = []
    ids = list(verdict.get("constraints") or []) if isinstance(verdict, Mapping) else []
    texts = {c.split(":", 1)[0]: c for c in task["constraints"]}
    for cid, what in GATES.items():
        texts.setdefault(cid, f"{cid}: {what}")
    for cid in list(dict.fromkeys(ids + list(texts))):
        mark = (
            (badge("fails", "bad") if cid in failed else badge("met", "ok"))
            if isinstance(verdict, Mapping)
            else badge("not checked", "muted")
        )
        rows.append(
            fmt(
                "<tr><td>{m}</td><td><code>{i}</code></td><td>{t}{v}</td></tr>",
                m=mark,
                i=cid,
                t=texts.get(cid, "").partition(": ")[2] or texts.get(cid, ""),
                v=join(fmt('<div class="bad-text">{x}</div>', x=x) for x in failed.get(cid, [])),
            )
        )
    if isinstance(verdict, Mapping):
        head = fmt(
            "<p>The verifier on the reference answer: {o} <span class='muted'>score {s}</span></p>",
            o=outcome(bool(verdict.get("passed")), "passed", "failed"),
            s=num(verdict.get("score")),
        )
    else:
        head = message((check or {}).get("note") or "the verdict was not computed", "info")
    ran = (check or {}).get("verifier")
    note = (check or {}).get("note") if isinstance(verdict, Mapping) else None
    verifier_code = task["verifier"].get("code") if task["verifier"].get("kind") == "code" else None
    verdict_box = fmt(
        '{h}{ran}{note}<table class="grid"><tr><th></th><th>rule</th><th>what it asks</th></tr>'
        "{r}</table>{code}",
        h=head,
        ran=fmt('<p class="muted">verifier run: <code>{v}</code></p>', v=ran)
        if ran
        else Markup(""),
        note=message(note, "warn") if note else Markup(""),
        r=join(rows),
        code=section(
            "the verifier's code (written by the model)", pre(verifier_code, "code"), open_=False
        )
        if verifier_code
        else Markup(""),
    )
    db = _database(cat, coll, task["database"])
    source = (check or {}).get("solution_source") or task["solution"].get("code")
    solution = fmt(
        "<p class='muted'>{k}: <code>{r}</code></p>{s}",
        k=task["solution"].get("kind", "solution"),
        r=task["solution"].get("ref") or task["solution"].get("entry") or "",
        s=pre(source, "code") if source else Markup(""),
    )
    tools = join(
        fmt(
            '<div class="tool"><code class="call-name">{n}</code>({p}) <span>{d}</span>'
            "<details><summary>schema</summary>{s}</details></div>",
            n=t.get("name", "?"),
            p=", ".join(
                (t.get("parameters") or {}).get("properties", {}).keys()
                if isinstance((t.get("parameters") or {}).get("properties"), dict)
                else []
            ),
            d=t.get("description", ""),
            s=pre(as_json(t.get("parameters")), "json"),
        )
        for t in task["tools"]
    )
    history = join(
        fmt(
            "<tr><td>{l}</td><td>{a}</td><td>{t}</td><td>{v}</td><td>{f}</td></tr>",
            l=h.get("level"),
            a="; ".join(str(x) for x in h.get("added") or []),
            t=", ".join(str(x) for x in h.get("tools_added") or []) or "–",
            v=num(h.get("n_valid_solutions")),
            f=num(h.get("valid_fraction")),
        )
        for h in task["history"]
    )
    body = fmt(
        "<h1>{id} {b}</h1>{facts}{task}{verdict}{answer}{solution}{tools}{db}{hist}{spec}{extra}",
        id=task["id"],
        b=badge(f"level {task['level']}", "level"),
        facts=kv({k: v for k, v in facts.items() if v is not None}, "kv facts"),
        task=section(
            "task",
            fmt(
                '{p}<p class="muted">answer format: {f}</p>',
                p=pre(task["prompt"], "prompt"),
                f=task["answer_format"],
            ),
        ),
        verdict=section("verifier's verdict on the reference answer", verdict_box),
        answer=section("reference answer", _plan_table(task["reference_answer"])),
        solution=section("reference solution", solution, open_=False),
        tools=section(f"tools ({len(task['tools'])})", tools, open_=False),
        db=section("database", db, open_=False),
        hist=section(
            "hardening history",
            fmt(
                '<table class="grid"><tr><th>level</th><th>added'
                "</th><th>tools added</th><th>valid answers</th>"
                "<th>valid fraction</th></tr>{h}</table>",
                h=history,
            ),
            open_=False,
        )
        if task["history"]
        else Markup(""),
        spec=section("spec", pre(as_json(task["spec"]), "json"), open_=False)
        if task["spec"]
        else Markup(""),
        extra=section("other fields", kv(task["extra"]), open_=False)
        if task["extra"]
        else Markup(""),
    )
    return task["id"], body
