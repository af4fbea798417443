"""A replay OpenAI-protocol server: answers chat requests with replies a real model gave.

Recordings come in two shapes, both JSONL:

- *exchanges*, one HTTP exchange a line: `{"path", "status", "request", "response"}` (what a
  logging proxy in front of a model server writes);
- *episodes* of `gemkit eval` (`episodes.jsonl`): each turn's observation is the request's
  messages and its action the reply; each `summary` context edit is a reply to the summary
  prompt.

`Replay` picks, for each request, the recorded reply to the same messages when there is one
(`exact`), else the reply recorded for the most similar request of the same kind (same system
prompt, same shape of conversation; `nearest`), the least used first, so a whole run of gemkit
whose prompts have changed since the recording still meets the model's real, messy output.
`ReplayOpenAIServer` serves it on 127.0.0.1 with everything `ScriptedOpenAIServer` does:

    with ReplayOpenAIServer(["fixtures/real-model/eval-e3_qa.jsonl"]) as srv:
        ...                                # point LLMClient / gemkit eval at srv.base_url
    srv.replay.served                      # which recording answered each request, and how
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gemkit.errors import GemkitError
from gemkit.testing.openai_server import Reply, ScriptedOpenAIServer
from gemkit.wrappers.context import SUMMARY_PROMPT, SUMMARY_TEMPLATE

_WORD = re.compile(r"\w+")
#: the note `SummaryContext` inserts by default, around the model's summary
_SUMMARY_HEAD, _SUMMARY_TAIL = SUMMARY_TEMPLATE.split("{summary}")


@dataclass
class Exchange:
    """One recorded request and the reply it got; `source` says where it was read."""

    messages: list[dict[str, Any]]
    reply: Reply
    source: str
    kind: str = ""


@dataclass
class Served:
    """How one request was answered: by which exchange, exactly or by similarity."""

    exchange: int
    how: str  # "exact" or "nearest"
    score: float
    source: str


def _text(content: Any) -> str:
    if isinstance(content, list):  # OpenAI content parts
        return " ".join(p.get("text", "") for p in content if isinstance(p, Mapping))
    return content if isinstance(content, str) else ""


def request_kind(messages: Sequence[Mapping[str, Any]]) -> str:
    """What a request is, for matching: its system prompt, or `summary` for a summary call."""
    if not messages:
        return ""
    last = _text(messages[-1].get("content"))
    if messages[-1].get("role") == "user" and last == SUMMARY_PROMPT:
        return "summary"
    first = messages[0]
    return _text(first.get("content"))[:200] if first.get("role") == "system" else ""


def _key(messages: Sequence[Mapping[str, Any]]) -> str:
    slim = [
        {
            "role": m.get("role"),
            "content": _text(m.get("content")),
            "calls": [
                ((c.get("function") or {}).get("name"), (c.get("function") or {}).get("arguments"))
                for c in m.get("tool_calls") or []
            ],
        }
        for m in messages
    ]
    return json.dumps(slim, sort_keys=True, default=str)


def _words(messages: Sequence[Mapping[str, Any]]) -> frozenset[str]:
    user = [m for m in messages if m.get("role") in ("user", "tool")]
    last = _text(user[-1].get("content")) if user else ""
    return frozenset(w.lower() for w in _WORD.findall(last[:4000]))


def _reply_of(message: Mapping[str, Any], finish: Any, usage: Any) -> Reply:
    return Reply(
        content=message.get("content"),
        reasoning_content=message.get("reasoning_content"),
        tool_calls=list(message.get("tool_calls") or []) or None,
        finish_reason=finish if isinstance(finish, str) else None,
        usage=dict(usage) if isinstance(usage, Mapping) else None,
    )


def _from_exchange(row: Mapping[str, Any], source: str) -> list[Exchange]:
    request, response = row.get("request"), row.get("response")
    if not str(row.get("path", "")).endswith("/chat/completions") or row.get("status") != 200:
        return []
    if not isinstance(request, Mapping) or not isinstance(response, Mapping):
        return []
    choices = response.get("choices") or []
    if not choices or not isinstance(choices[0], Mapping):
        return []
    messages = list(request.get("messages") or [])
    first = choices[0]
    reply = _reply_of(first.get("message") or {}, first.get("finish_reason"), response.get("usage"))
    return [Exchange(messages, reply, source)]


def _summary_text(note: str) -> str:
    if note.startswith(_SUMMARY_HEAD) and note.endswith(_SUMMARY_TAIL):
        return note[len(_SUMMARY_HEAD) : -len(_SUMMARY_TAIL)]
    return note


def _from_episode(row: Mapping[str, Any], source: str) -> list[Exchange]:
    out = []
    for i, turn in enumerate(row.get("turns") or []):
        obs, action = turn.get("observation"), turn.get("action")
        messages = obs if isinstance(obs, list) else [{"role": "user", "content": str(obs)}]
        message = action if isinstance(action, Mapping) else {"content": str(action)}
        out.append(Exchange(list(messages), _reply_of(message, "stop", turn.get("usage")), source))
        for edit in (turn.get("info") or {}).get("context_edits") or ():
            if edit.get("strategy") != "summary":
                continue
            for inserted in edit.get("inserted_messages") or ():
                note = _text((inserted.get("message") or {}).get("content"))
                prompt = [{"role": "user", "content": SUMMARY_PROMPT}]
                reply = Reply(_summary_text(note), usage=edit.get("usage"))
                out.append(Exchange(prompt, reply, f"{source} turn {i} summary"))
    return out


def load_exchanges(paths: Iterable[str | Path]) -> list[Exchange]:
    """Every chat exchange recorded in exchange files and eval episode files, in order."""
    exchanges: list[Exchange] = []
    for path in paths:
        path = Path(path)
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except OSError as e:
            raise GemkitError(f"cannot read the recording {path}: {e.strerror or e}") from None
        for n, line in enumerate(lines, 1):
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue  # a torn last line of a killed recording
            if not isinstance(row, Mapping):
                continue
            source = f"{path.name}:{n}"
            found = _from_episode(row, source) if "turns" in row else _from_exchange(row, source)
            exchanges.extend(found)
    for exchange in exchanges:
        exchange.kind = request_kind(exchange.messages)
    if not exchanges:
        raise GemkitError(
            "the recordings hold no chat exchange: expected JSONL of {path, status, request, "
            "response} exchanges or gemkit eval episodes"
        )
    return exchanges


class Replay:
    """Chooses the recorded reply for each chat request (see the module docstring)."""

    def __init__(self, exchanges: Sequence[Exchange]):
        if not exchanges:
            raise GemkitError("Replay needs at least one recorded exchange")
        self.exchanges = list(exchanges)
        self.uses = [0] * len(self.exchanges)
        self.served: list[Served] = []
        self._exact: dict[str, list[int]] = {}
        self._by_kind: dict[str, list[int]] = {}
        self._words = [_words(e.messages) for e in self.exchanges]
        self._lock = threading.Lock()
        for i, e in enumerate(self.exchanges):
            self._exact.setdefault(_key(e.messages), []).append(i)
            self._by_kind.setdefault(e.kind, []).append(i)

    def pick(self, messages: Sequence[Mapping[str, Any]]) -> tuple[int, str, float]:
        """`(exchange index, how, score)` for a request's messages."""
        exact = self._exact.get(_key(messages))
        if exact:
            return min(exact, key=lambda i: self.uses[i]), "exact", 1.0
        pool = self._by_kind.get(request_kind(messages)) or range(len(self.exchanges))
        words = _words(messages)
        turns = sum(m.get("role") == "assistant" for m in messages)

        def score(i: int) -> float:
            other = self._words[i]
            union = len(words | other) or 1
            recorded_turns = sum(m.get("role") == "assistant" for m in self.exchanges[i].messages)
            # the same question at the same depth of the conversation matters most
            return len(words & other) / union + (0.25 if recorded_turns == turns else 0.0)

        best = max(pool, key=lambda i: (score(i), -self.uses[i], -i))
        return best, "nearest", score(best)

    def __call__(self, body: dict[str, Any]) -> Reply:
        """The reply to one chat-completions body."""
        messages = [m for m in body.get("messages") or [] if isinstance(m, Mapping)]
        with self._lock:
            i, how, score = self.pick(messages)
            self.uses[i] += 1
            self.served.append(Served(i, how, round(score, 4), self.exchanges[i].source))
        return self.exchanges[i].reply

    def coverage(self) -> dict[str, int]:
        """How many requests were answered exactly and by similarity, and recordings used."""
        return {
            "exact": sum(s.how == "exact" for s in self.served),
            "nearest": sum(s.how == "nearest" for s in self.served),
            "recordings_used": sum(u > 0 for u in self.uses),
            "recordings": len(self.exchanges),
        }


class ReplayOpenAIServer(ScriptedOpenAIServer):
    """A `ScriptedOpenAIServer` whose replies come from recordings (see `Replay`).

    `recordings` are paths of exchange or episode JSONL files, or `Exchange` objects.
    Faults, request records and `max_tokens` cuts work as in the scripted server.
    """

    def __init__(self, recordings: Iterable[str | Path | Exchange], **kwargs: Any):
        items = list(recordings)
        exchanges = [x for x in items if isinstance(x, Exchange)]
        paths = [x for x in items if not isinstance(x, Exchange)]
        if paths:
            exchanges += load_exchanges(paths)
        self.replay = Replay(exchanges)
        super().__init__(self.replay, **kwargs)
