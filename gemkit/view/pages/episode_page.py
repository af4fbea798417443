"""An episode: each turn's observation, reasoning, action, tool calls, rewards and the
context edits made (what was cut, what was inserted)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np

from gemkit.view import plots
from gemkit.view.markup import Markup, fmt, join
from gemkit.view.pages.parts import (
    as_json,
    badge,
    items,
    kv,
    message,
    num,
    outcome,
    pre,
    section,
    url,
)
from gemkit.view.records import shorten

#: turns per episode page
TURNS_PER_PAGE = 100


def _message_block(m: Mapping[str, Any], *, index: int | None = None) -> Markup:
    calls = join(
        fmt(
            '<div class="call"><span class="call-name">{n}</span> <span class="muted">{i}</span>'
            "{a}</div>",
            n=c.get("name") or "?",
            i=c.get("id") or "",
            a=pre(_pretty_args(c.get("arguments")), "json"),
        )
        for c in m.get("calls") or []
    )
    reasoning = join(pre(r, "reasoning") for r in m.get("reasoning") or [])
    extra = m.get("extra") or {}
    return fmt(
        '<div class="message role-{r}"><div class="role">{idx}{r}{x}</div>{reason}{c}{calls}</div>',
        r=m.get("role", "?"),
        idx=f"#{index} " if index is not None else "",
        x=fmt(
            ' <span class="muted">{t}</span>',
            t=", ".join(f"{k}={shorten(str(v), 40)}" for k, v in extra.items()),
        )
        if extra
        else Markup(""),
        reason=fmt('<div class="label">reasoning</div>{r}', r=reasoning)
        if reasoning
        else Markup(""),
        c=pre(m.get("content")) if m.get("content") else Markup(""),
        calls=calls,
    )


def _pretty_args(args: Any) -> str:
    if isinstance(args, str):
        try:
            return as_json(json.loads(args))
        except ValueError:
            return args
    return as_json(args)


def _turn(t: Mapping[str, Any]) -> Markup:
    tags = [badge(f"reward {num(t['reward'])}", "reward")]
    if t["terminated"]:
        tags.append(badge("terminated", "ok"))
    if t["truncated"]:
        tags.append(badge("truncated", "warn"))
    if t["calls"]:
        tags.append(badge(f"{len(t['calls'])} tool call(s)", "tool"))
    if t["edits"]:
        tags.append(badge("context edited", "edit"))
    if t["warnings"]:
        tags.append(badge("context over budget", "warn"))
    parts = []
    if t["observation"] is not None:
        parts.append(fmt('<div class="label">observation</div>{o}', o=pre(t["observation"])))
    else:
        new = join(_message_block(m) for m in t["new_messages"])
        full = join(_message_block(m, index=i) for i, m in enumerate(t["context"]))
        parts.append(
            fmt(
                '<div class="label">observation: new messages</div>{n}'
                '<details class="context"><summary>full context the model saw ({k} messages)'
                "</summary>{f}</details>",
                n=new,
                k=len(t["context"]),
                f=full,
            )
        )
    if t["reasoning"]:
        parts.append(
            fmt(
                '<div class="label">reasoning</div>{r}',
                r=join(pre(r, "reasoning") for r in t["reasoning"]),
            )
        )
    parts.append(fmt('<div class="label">action</div>{a}', a=pre(t["action"], "action")))
    if t["calls"]:
        parts.append(
            fmt('<div class="label">tool calls</div>{c}', c=join(_call(c) for c in t["calls"]))
        )
    elif t["native_calls"]:
        parts.append(
            fmt(
                '<div class="label">tool calls</div>{c}',
                c=join(_call({**c, "result": None, "is_error": False}) for c in t["native_calls"]),
            )
        )
    for e in t["edits"]:
        parts.append(_edit(e))
    for w in t["warnings"]:
        parts.append(message(f"context {w.get('strategy', '?')}: {w.get('reason', '')}", "warn"))
    rest = dict(t["info"])
    if t["usage"]:
        rest["usage"] = t["usage"]
    if rest:
        parts.append(section("info", kv(rest), open_=False, cls="info"))
    return fmt(
        '<section class="turn" id="t{n}"><h3><a href="#t{n}">turn {n}</a> {tags}</h3>{b}</section>',
        n=t["n"],
        tags=join(tags, " "),
        b=join(parts),
    )


def _call(c: Mapping[str, Any]) -> Markup:
    result = c.get("result")
    return fmt(
        '<div class="call{err}"><div><span class="call-name">{n}</span> '
        '<span class="muted">{meta}</span></div>{a}{r}</div>',
        err=" error" if c.get("is_error") else "",
        n=c.get("name") or "?",
        meta=" · ".join(str(x) for x in (c.get("id"), c.get("format")) if x),
        a=pre(_pretty_args(c.get("arguments")), "json")
        if c.get("arguments") is not None
        else pre(c.get("raw") or "", "json"),
        r=Markup("")
        if result is None
        else fmt(
            '<div class="label">{l}</div>{t}',
            l="result (error)" if c.get("is_error") else "result",
            t=pre(result, "result"),
        ),
    )


def _edit(e: Mapping[str, Any]) -> Markup:
    figures = dict(e["figures"])
    before, after = figures.pop("tokens_before", None), figures.pop("tokens_after", None)
    mb, ma = figures.pop("messages_before", None), figures.pop("messages_after", None)
    line = f"context edit: {e['strategy']}"
    if before is not None:
        line += f" · tokens {num(before)} → {num(after)}"
    if mb is not None:
        line += f" · messages {num(mb)} → {num(ma)}"
    removed = join(
        _message_block(m, index=j)
        if m is not None
        else fmt('<p class="muted">#{j}: this turn\'s own call or result</p>', j=j)
        for j, m in e["removed"]
    )
    inserted = join(_message_block(m) for m in e["inserted"])
    return fmt(
        '<div class="ctx-edit"><div class="ctx-edit-head">{l}</div>{r}{i}{f}</div>',
        l=line,
        r=section(f"removed: {len(e['removed'])} message(s)", removed, open_=False)
        if e["removed"]
        else Markup(""),
        i=section("inserted", inserted) if e["inserted"] else Markup(""),
        f=kv(figures) if figures else Markup(""),
    )


def episode_view(ep: Mapping[str, Any], params: Mapping[str, Any]) -> tuple[str, Markup]:
    """The title and body of an episode page (`tp` or `turn` pick the page of turns)."""
    turns = ep["turns"]
    pages = max(1, -(-len(turns) // TURNS_PER_PAGE))
    try:
        tp = int(params.get("tp", 1))
        wanted = params.get("turn")
        if wanted:
            tp = (int(wanted) - 1) // TURNS_PER_PAGE + 1
    except (TypeError, ValueError):
        tp = 1
    tp = min(max(tp, 1), pages)
    shown = turns[(tp - 1) * TURNS_PER_PAGE : tp * TURNS_PER_PAGE]
    tokens = ep["tokens"]
    facts = {
        "env id": ep["env_id"],
        "seed": ep["seed"],
        "key": ep["key"],
        "total reward": ep["total_reward"],
        "turns": ep["num_turns"],
        "tool calls": ep["tool_calls"],
        "prompt tokens": tokens.get("prompt_tokens"),
        "completion tokens": tokens.get("completion_tokens"),
    }
    facts = {k: v for k, v in facts.items() if v is not None}
    chips = join(
        fmt(
            '<a href="#t{n}" class="chip{c}" title="turn {n}: reward {r}">{n}</a>',
            n=t["n"],
            r=num(t["reward"]),
            c=(" tool" if t["calls"] else "")
            + (" edit" if t["edits"] else "")
            + (" pos" if (t["reward"] or 0) > 0 else ""),
        )
        for t in shown
    )
    keep = [(k, v) for k, v in items(params) if k not in ("tp", "turn")]
    jump = fmt(
        '<form class="jump" method="get" action="/record">{hidden}<label>go to turn '
        '<input name="turn" size="5" inputmode="numeric"></label></form>',
        hidden=join(fmt('<input type="hidden" name="{k}" value="{v}">', k=k, v=v) for k, v in keep),
    )
    pager = Markup("")
    if pages > 1:
        pager = fmt(
            '<nav class="pager">{links}</nav>',
            links=join(
                (
                    fmt("<strong>{p}</strong>", p=p)
                    if p == tp
                    else fmt('<a href="{u}">{p}</a>', u=url("/record", keep, tp=p), p=p)
                )
                for p in range(1, pages + 1)
            ),
        )
    rewards = [t["reward"] or 0.0 for t in turns]
    chart = (
        plots.lines(
            "cumulative reward by turn",
            [("reward", list(range(1, len(turns) + 1)), list(np.cumsum(rewards)))],
            x_label="turn",
            y_label="reward",
            plot_h=70,
        )
        if len(turns) > 1
        else Markup("")
    )
    body = fmt(
        '<h1>{env} <span class="muted">seed {seed}</span> {ok}</h1>{err}{facts}{extra}'
        '<div class="turnbar">{chips} {jump}</div>{chart}{pager}{turns}{pager}',
        env=ep["env_id"] or "episode",
        seed=num(ep["seed"]),
        ok=outcome(ep["success"]),
        err=message(f"error: {ep['error']}", "error") if ep["error"] else Markup(""),
        facts=kv(facts, "kv facts"),
        extra=section("other fields", kv(ep["extra"]), open_=False) if ep["extra"] else Markup(""),
        chips=chips,
        jump=jump,
        chart=chart,
        pager=pager,
        turns=join(_turn(t) for t in shown)
        if shown
        else message("This episode has no turns.", "info"),
    )
    return f"{ep['env_id']} seed {num(ep['seed'])}", body
