"""Record readers: what each gemkit output file holds, as the viewer shows it.

One reader per record kind (`read_episode`, `read_qa`, `read_task`, `read_turn_rows`) turns a
raw record (a JSONL line, or a row of a `datasets` export) into a plain dict for a page, and
one `*_columns` function per kind gives the few values the list filters and sorts on. The
kinds are the models of `gemkit.records`: a dataset row is first given back its JSONL shape
(`Kind.arrow`, which decodes the model's JSON-text fields; an export of an older gemkit kept
every nested field as JSON text, which the readers decode too). Readers take what they know
and keep the rest under `extra`: unknown fields are shown, never an error; a missing field
is shown as missing. The viewer shows a damaged or foreign record; it does not refuse it.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gemkit.records.base import RecordError
from gemkit.records.episodes import EpisodeRecord
from gemkit.records.export import decode_json_fields
from gemkit.records.qa import QARecord
from gemkit.records.tasks import TaskRecord

# -- the list's columns ---------------------------------------------------------------------


@dataclass(frozen=True)
class Column:
    """A value the list filters and sorts on: `cat` (a label), `num` or `bool`."""

    name: str
    label: str
    type: str


@dataclass(frozen=True)
class Kind:
    """A record kind: its columns, the raw fields they need, and its reader."""

    name: str
    title: str
    columns: tuple[Column, ...]
    fields: tuple[str, ...]  # top-level raw fields `columns_of` reads (a dataset reads only these)
    columns_of: Callable[[Mapping[str, Any]], dict[str, Any]]
    preview: Callable[[Mapping[str, Any]], str]
    read: Callable[[Mapping[str, Any]], dict[str, Any]]
    #: a `datasets` row back in its JSONL shape (the record model's JSON-text fields decoded)
    arrow: Callable[[Mapping[str, Any]], dict[str, Any]] = dict


def _arrow_of(model: type[Any]) -> Callable[[Mapping[str, Any]], dict[str, Any]]:
    fields = set(model.model_fields)

    def decode(row: Mapping[str, Any]) -> dict[str, Any]:
        data = decode_json_fields(model, row)
        if not fields <= data.keys():  # the few columns a list scan reads
            return data
        try:  # a whole row of our export: exactly its JSONL line (Arrow fills absent keys)
            return model.parse(data).to_json()
        except RecordError:  # another writer's dataset: shown as it is
            return data

    return decode


def _num(value: Any) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)) and math.isfinite(value):
        return float(value)
    return None


def _text(value: Any) -> str | None:
    if value is None or isinstance(value, (dict, list)):
        return None
    return str(value)


def _decoded(value: Any, *, kinds: tuple[type, ...] = (dict, list)) -> Any:
    """A `datasets` export stores nested fields as JSON text: decode those, keep the rest."""
    if isinstance(value, str) and value[:1] in "[{":
        try:
            out = json.loads(value)
        except ValueError:
            return value
        return out if isinstance(out, kinds) else value
    return value


def _seq(value: Any) -> list[Any]:
    """A list field (anything else, from a record that does not follow the format: empty)."""
    return value if isinstance(value, list) else []


def _dict(value: Any) -> dict[str, Any]:
    value = _decoded(value)
    return dict(value) if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    value = _decoded(value)
    return list(value) if isinstance(value, list) else []


def shorten(text: str, limit: int = 160) -> str:
    """One line of at most `limit` characters."""
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


# -- episodes -------------------------------------------------------------------------------

_THINK = re.compile(r"<think>(.*?)</think>", re.S)
#: episode fields the reader shows in its own sections (the others go to `extra`)
_EPISODE_FIELDS = set(EpisodeRecord.model_fields)
#: info fields the turn view shows in its own sections
_TURN_INFO = {
    "tool_calls", "tool_results", "parsed_calls", "context_edits", "context_warnings",
}  # fmt: skip


def _turns(raw: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [t for t in _list(raw.get("turns")) if isinstance(t, Mapping)]


def episode_columns(raw: Mapping[str, Any]) -> dict[str, Any]:
    """List values of one episode: env id, success, reward, turns, tool calls, error."""
    turns = raw.get("turns")
    count = len(turns) if isinstance(turns, list) else None
    reward = _num(raw.get("total_reward"))
    if reward is None and isinstance(turns, list):
        reward = sum(_num(t.get("reward")) or 0.0 for t in turns if isinstance(t, Mapping))
    tokens = _dict(raw.get("tokens"))
    return {
        "env_id": _text(raw.get("env_id")),
        "success": raw.get("success") if isinstance(raw.get("success"), bool) else None,
        "reward": reward,
        "turns": _num(raw.get("num_turns")) if count is None else float(count),
        "tool_calls": _num(raw.get("tool_calls")),
        "tokens": _num(sum(v for v in tokens.values() if _num(v) is not None)) if tokens else None,
        "error": bool(raw.get("error")),
    }


def episode_preview(raw: Mapping[str, Any]) -> str:
    """The error, or the last action."""
    if raw.get("error"):
        return f"error: {shorten(raw['error'])}"
    turns = raw.get("turns")
    if isinstance(turns, list) and turns and isinstance(turns[-1], Mapping):
        return shorten(_action_text(turns[-1].get("action")))
    return ""


def _action_text(action: Any) -> str:
    if isinstance(action, Mapping):
        content = action.get("content")
        return content if isinstance(content, str) else ""
    return "" if action is None else str(action)


def _message(m: Any) -> dict[str, Any]:
    """A chat message as the page shows it: role, text, reasoning, calls, other fields."""
    if not isinstance(m, Mapping):
        return {"role": "?", "content": str(m), "reasoning": [], "calls": [], "extra": {}}
    content = m.get("content")
    if isinstance(content, list):  # content parts: keep their text
        content = "\n".join(
            str(p.get("text", "")) if isinstance(p, Mapping) else str(p) for p in content
        )
    text = "" if content is None else str(content)
    reasoning = [str(m["reasoning_content"])] if m.get("reasoning_content") else []
    reasoning += [r.strip() for r in _THINK.findall(text)]
    calls = []
    for c in _seq(m.get("tool_calls")):
        if isinstance(c, Mapping):
            function = c.get("function")
            fn = function if isinstance(function, Mapping) else c
            calls.append(
                {"id": c.get("id"), "name": fn.get("name"), "arguments": fn.get("arguments")}
            )
    known = {"role", "content", "reasoning_content", "tool_calls"}
    return {
        "role": str(m.get("role", "?")),
        "content": _THINK.sub("", text).strip() if reasoning else text,
        "reasoning": reasoning,
        "calls": calls,
        "extra": {k: v for k, v in m.items() if k not in known},
    }


def _calls(info: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The turn's tool calls paired with their results (by id, else by position)."""
    parsed = [c for c in _seq(info.get("parsed_calls")) if isinstance(c, Mapping)]
    results = [r for r in _seq(info.get("tool_results")) if isinstance(r, Mapping)]
    by_id = {r.get("tool_call_id"): r for r in results if r.get("tool_call_id") is not None}
    out = []
    for i, c in enumerate(parsed or results):
        result = by_id.get(c.get("id") if parsed else c.get("tool_call_id"))
        if result is None and i < len(results):
            result = results[i]
        out.append(
            {
                "id": c.get("id") if parsed else c.get("tool_call_id"),
                "name": c.get("name") or (result or {}).get("name") or "",
                "arguments": c.get("arguments") if parsed else None,
                "format": c.get("format") if parsed else None,
                "raw": c.get("raw") if parsed else None,
                "result": None if result is None else result.get("content"),
                "is_error": bool((result or {}).get("is_error")),
            }
        )
    return out


def _edits(
    info: Mapping[str, Any], before: Sequence[dict[str, Any]], own: int
) -> list[dict[str, Any]]:
    """Context edits, with the removed messages looked up in the chat they were cut from.

    Indices count in the chat before the edit: the observation of this turn, then this
    turn's own action and results (`own` of them), which the record does not repeat.
    """
    out = []
    for e in _seq(info.get("context_edits")):
        if not isinstance(e, Mapping):
            continue
        removed: list[tuple[int, Any]] = []
        for j in _seq(e.get("removed_messages")):
            if isinstance(j, int) and 0 <= j < len(before):
                removed.append((j, before[j]))
            elif isinstance(j, int) and j < len(before) + own:
                removed.append((j, None))  # this turn's own call or result
        inserted = [
            _message(x.get("message") if isinstance(x, Mapping) and "message" in x else x)
            for x in _seq(e.get("inserted_messages"))
        ]
        shown = {"strategy", "step", "removed_messages", "inserted_messages"}
        out.append(
            {
                "strategy": str(e.get("strategy", "?")),
                "step": e.get("step"),
                "removed": removed,
                "inserted": inserted,
                "figures": {k: v for k, v in e.items() if k not in shown},
            }
        )
    return out


def read_turn(t: Mapping[str, Any], n: int) -> dict[str, Any]:
    """One turn: what the model saw (new messages and full context), did, and got back."""
    info = _dict(t.get("info"))
    obs = _decoded(t.get("observation"), kinds=(list,))
    action = _decoded(t.get("action"), kinds=(dict,))
    chat = isinstance(obs, list)
    context = [_message(m) for m in obs] if chat else []
    last_assistant = max((i for i, m in enumerate(context) if m["role"] == "assistant"), default=-1)
    act = _message(action if isinstance(action, Mapping) else {"content": _action_text(action)})
    calls = _calls(info)
    return {
        "n": n,
        "reward": _num(t.get("reward")),
        "terminated": bool(t.get("terminated")),
        "truncated": bool(t.get("truncated")),
        "observation": None if chat else ("" if obs is None else str(obs)),
        "new_messages": context[last_assistant + 1 :],
        "context": context,
        "reasoning": act["reasoning"],
        "action": act["content"],
        "native_calls": act["calls"],
        "calls": calls,
        "edits": _edits(info, context, 1 + len(calls)),
        "warnings": [w for w in _seq(info.get("context_warnings")) if isinstance(w, Mapping)],
        "usage": _dict(t.get("usage")),
        "info": {k: v for k, v in info.items() if k not in _TURN_INFO},
    }


def read_episode(raw: Mapping[str, Any]) -> dict[str, Any]:
    """An episode (`gemkit eval`, `gemkit run --out`, a per-episode `datasets` row)."""
    turns = [read_turn(t, i + 1) for i, t in enumerate(_turns(raw))]
    cols = episode_columns({**raw, "turns": _turns(raw)})
    return {
        "env_id": _text(raw.get("env_id")) or "",
        "seed": raw.get("seed"),
        "key": raw.get("key"),
        "index": raw.get("index"),
        "success": cols["success"],
        "total_reward": cols["reward"],
        "num_turns": len(turns),
        "tool_calls": cols["tool_calls"]
        if cols["tool_calls"] is not None
        else sum(len(t["calls"]) for t in turns),
        "tokens": _dict(raw.get("tokens")),
        "token_sources": _dict(raw.get("token_sources")),
        "error": _text(raw.get("error")) or None,
        "turns": turns,
        "extra": {k: v for k, v in raw.items() if k not in _EPISODE_FIELDS},
    }


# -- turn rows (a per-turn `datasets` export of rollouts) -------------------------------------


def turn_row_columns(raw: Mapping[str, Any]) -> dict[str, Any]:
    """List values of one turn row: env id, episode, turn, reward, terminated."""
    return {
        "env_id": _text(raw.get("env_id")),
        "episode": _num(raw.get("episode")),
        "turn": _num(raw.get("turn")),
        "reward": _num(raw.get("reward")),
        "return": _num(raw.get("return")),
        "terminated": raw.get("terminated") if isinstance(raw.get("terminated"), bool) else None,
    }


def turn_row_preview(raw: Mapping[str, Any]) -> str:
    """The row's action."""
    return shorten(_action_text(_decoded(raw.get("action"), kinds=(dict,))))


def read_turn_rows(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The episode a group of turn rows (same env id and episode number) makes, in turn order."""
    rows = sorted(rows, key=lambda r: _num(r.get("turn")) or 0.0)
    first = rows[0] if rows else {}
    turns = [
        {
            "observation": r.get("observation"),
            "action": r.get("action"),
            "reward": r.get("reward"),
            "terminated": r.get("terminated"),
            "truncated": r.get("truncated"),
            "info": r.get("info"),
            "usage": {
                k: r[k]
                for k in ("prompt_tokens", "completion_tokens")
                if _num(r.get(k)) is not None
            },
        }
        for r in rows
    ]
    last = _dict(turns[-1]["info"]) if turns else {}
    return read_episode(
        {
            "env_id": first.get("env_id"),
            "seed": first.get("seed"),
            "index": first.get("episode"),
            "turns": turns,
            "success": bool(last.get("success", False)),
        }
    )


# -- QA records ---------------------------------------------------------------------------

_QA_FIELDS = {
    "id", "question", "answer", "answer_aliases", "supporting_facts", "edits", "n_inject",
    "n_fuzz", "verification", "seed", "rejected_stage", "reason", "rejected_edits", "k",
    "schema_version",
}  # fmt: skip
#: the verification stages, in the order they run
STAGES = ("quality", "difficulty", "uniqueness")


def qa_columns(raw: Mapping[str, Any]) -> dict[str, Any]:
    """List values of one QA record: stage (kept or where it was rejected), edits, solver."""
    verification = _dict(raw.get("verification"))
    difficulty = _dict(verification.get("difficulty"))
    return {
        "stage": _text(raw.get("rejected_stage")) or "kept",
        "answer_type": _text(raw.get("answer_type")),
        "n_inject": _num(raw.get("n_inject")),
        "n_fuzz": _num(raw.get("n_fuzz")),
        "closed_book_correct": _num(difficulty.get("closed_book_correct")),
        "tool_calls": _num(difficulty.get("tool_calls")),
        "k": _num(raw.get("k")),
    }


def qa_preview(raw: Mapping[str, Any]) -> str:
    """The question (and why it was rejected)."""
    text = shorten(str(raw.get("question") or ""), 140)
    return f"{text} [{shorten(str(raw['reason']), 80)}]" if raw.get("reason") else text


def read_qa(raw: Mapping[str, Any]) -> dict[str, Any]:
    """A QA record (kept or rejected): seed, each edit applied in turn, facts, verification.

    Each edit's question is the previous one with `before` replaced by `after`; the agent
    then words the final question from its logical form, so a last step shows that rewording.
    """
    seed = _dict(raw.get("seed"))
    question = str(raw.get("question") or "")
    current = _text(seed.get("question"))
    steps = []
    for e in _list(raw.get("edits")):
        if not isinstance(e, Mapping):
            continue
        before, after = str(e.get("before") or ""), str(e.get("after") or "")
        at = current.find(before) if current is not None and before else -1
        new = (
            current[:at] + after + current[at + len(before) :]
            if current is not None and at >= 0
            else None
        )
        steps.append(
            {
                "op": str(e.get("op", "?")),
                "before": before,
                "after": after,
                "fact": _dict(e.get("fact")) or None,
                "question_before": current,
                "question_after": new,
                "at": at,  # where `before` was replaced in `question_before` (-1: not found)
            }
        )
        current = new
    verification = _dict(raw.get("verification"))
    stages = [(s, _dict(verification.get(s))) for s in STAGES if s in verification]
    stages += [(s, _dict(v)) for s, v in verification.items() if s not in STAGES]
    return {
        "id": _text(raw.get("id")) or "",
        "question": question,
        "answer": _text(raw.get("answer")),
        "answer_aliases": [str(a) for a in _list(raw.get("answer_aliases"))],
        "stage": _text(raw.get("rejected_stage")) or "kept",
        "reason": _text(raw.get("reason")) or "",
        "seed": {"question": _text(seed.get("question")), "answer": _text(seed.get("answer"))},
        "steps": steps,
        "final_wording": (current, question)
        if current is not None and current != question
        else None,
        "rejected_edits": [e for e in _list(raw.get("rejected_edits")) if isinstance(e, Mapping)],
        "facts": [f for f in _list(raw.get("supporting_facts")) if isinstance(f, Mapping)],
        "verification": stages,
        "n_inject": raw.get("n_inject"),
        "n_fuzz": raw.get("n_fuzz"),
        "extra": {k: _decoded(v) for k, v in raw.items() if k not in _QA_FIELDS},
    }


# -- task tuples ----------------------------------------------------------------------------

_TASK_FIELDS = {
    "id", "category", "level", "database", "tools", "task", "constraints", "verifier",
    "solution", "reference_answer", "stats", "history", "seed", "reason", "prompt",
    "answer_format", "spec", "schema_version",
}  # fmt: skip


def _task_part(raw: Mapping[str, Any]) -> dict[str, Any]:
    """`task` of a record; a `datasets` row keeps its fields at the top level."""
    task = _dict(raw.get("task"))
    for key in ("prompt", "answer_format", "spec"):
        if key not in task and key in raw:
            task[key] = _decoded(raw[key])
    return task


def task_record(raw: Mapping[str, Any]) -> dict[str, Any]:
    """A task in the `tasks.jsonl` shape, from either form (what a verifier takes)."""
    out = {k: _decoded(v) for k, v in raw.items() if k not in ("prompt", "answer_format", "spec")}
    out["task"] = _task_part(raw)
    return out


def task_columns(raw: Mapping[str, Any]) -> dict[str, Any]:
    """List values of one task: category, level, kept or rejected, valid fraction, pass@k."""
    stats = _dict(raw.get("stats"))
    pak = _dict(stats.get("pass_at_k"))
    level = raw.get("level")
    return {
        "category": _text(raw.get("category")),
        "level": str(level) if isinstance(level, int) and not isinstance(level, bool) else None,
        "status": "rejected" if "reason" in raw and "task" not in raw else "kept",
        "valid_fraction": _num(stats.get("valid_fraction")),
        "n_valid": _num(stats.get("n_valid_solutions")),
        "passes": _num(pak.get("passes")),
        "tools": float(len(_list(raw.get("tools")))) if "tools" in raw else None,
    }


def task_preview(raw: Mapping[str, Any]) -> str:
    """The task's first line, or why it was rejected."""
    if "reason" in raw and "task" not in raw:
        return f"rejected: {shorten(str(raw['reason']))}"
    return shorten(str(_task_part(raw).get("prompt") or ""), 140)


def read_task(raw: Mapping[str, Any]) -> dict[str, Any]:
    """A task tuple: the task, tools, constraints, reference answer, verifier and history."""
    task = _task_part(raw)
    cols = task_columns(raw)
    return {
        "id": _text(raw.get("id")) or "",
        "category": cols["category"] or "",
        "level": raw.get("level"),
        "status": cols["status"],
        "reason": _text(raw.get("reason")) or "",
        "prompt": _text(task.get("prompt")) or "",
        "answer_format": _text(task.get("answer_format")) or "",
        "spec": task.get("spec"),
        "tools": [t for t in _list(raw.get("tools")) if isinstance(t, Mapping)],
        "constraints": [str(c) for c in _list(raw.get("constraints"))],
        "verifier": _dict(raw.get("verifier")),
        "solution": _dict(raw.get("solution")),
        "reference_answer": _decoded(raw.get("reference_answer")),
        "stats": _dict(raw.get("stats")),
        "history": [h for h in _list(raw.get("history")) if isinstance(h, Mapping)],
        "database": _text(raw.get("database")),
        "seed": raw.get("seed"),
        "extra": {k: _decoded(v) for k, v in raw.items() if k not in _TASK_FIELDS},
    }


# -- the kinds ------------------------------------------------------------------------------

KINDS: dict[str, Kind] = {
    "episodes": Kind(
        "episodes",
        "episodes",
        (
            Column("env_id", "env id", "cat"),
            Column("success", "success", "bool"),
            Column("reward", "reward", "num"),
            Column("turns", "turns", "num"),
            Column("tool_calls", "tool calls", "num"),
            Column("tokens", "tokens", "num"),
            Column("error", "error", "bool"),
        ),
        ("env_id", "success", "total_reward", "num_turns", "tool_calls", "tokens", "error"),
        episode_columns,
        episode_preview,
        read_episode,
        _arrow_of(EpisodeRecord),
    ),
    "turns": Kind(
        "turns",
        "turn rows",
        (
            Column("env_id", "env id", "cat"),
            Column("episode", "episode", "num"),
            Column("turn", "turn", "num"),
            Column("reward", "reward", "num"),
            Column("return", "return", "num"),
            Column("terminated", "terminated", "bool"),
        ),
        ("env_id", "episode", "turn", "reward", "return", "terminated"),
        turn_row_columns,
        turn_row_preview,
        lambda raw: read_turn_rows([raw]),
    ),
    "qa": Kind(
        "qa",
        "QA records",
        (
            Column("stage", "rejected stage", "cat"),
            Column("answer_type", "answer type", "cat"),
            Column("n_inject", "injects", "num"),
            Column("n_fuzz", "fuzzes", "num"),
            Column("closed_book_correct", "closed-book correct", "num"),
            Column("tool_calls", "solver tool calls", "num"),
            Column("k", "attempt", "num"),
        ),
        ("rejected_stage", "answer_type", "n_inject", "n_fuzz", "verification", "k"),
        qa_columns,
        qa_preview,
        read_qa,
        _arrow_of(QARecord),
    ),
    "tasks": Kind(
        "tasks",
        "task tuples",
        (
            Column("category", "category", "cat"),
            Column("level", "level", "cat"),
            Column("status", "status", "cat"),
            Column("valid_fraction", "valid fraction", "num"),
            Column("n_valid", "valid answers", "num"),
            Column("passes", "pass@k passes", "num"),
            Column("tools", "tools", "num"),
        ),
        ("category", "level", "reason", "task", "stats", "tools"),
        task_columns,
        task_preview,
        read_task,
        _arrow_of(TaskRecord),
    ),
}


def sniff_kind(keys: Sequence[str]) -> str | None:
    """The kind of a record from its field names (for files whose name does not tell)."""
    k = set(keys)
    if {"observation", "action", "turn", "episode"} <= k:
        return "turns"
    if "turns" in k and ("env_id" in k or "num_turns" in k):
        return "episodes"
    if {"question", "answer"} <= k or "rejected_stage" in k:
        return "qa"
    if "category" in k and ("task" in k or "prompt" in k) and "tools" in k:
        return "tasks"
    return None
