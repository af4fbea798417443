"""Solvers that measure difficulty: closed-book baselines (no corpus) and a scripted search agent.

The tool solver reads the question's logical form and resolves it the way a search agent
would: it looks up the named entities with the `search` tool, reads their articles with the
`access` tool, follows the relations the question states, and checks every candidate against
every constraint by reading its article. It never touches the fact store; the number of tool
calls it needed is the question's hardness figure.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gemkit.synth.qa.logic import Node, depth, holds
from gemkit.synth.world.schema import (
    LABEL,
    LABELS,
    NUMBER,
    RELATIONS,
    TYPES,
    YEAR,
    format_number,
    search_key,
)
from gemkit.synth.world.world import URL_ROOT, World, slug, split_sentences
from gemkit.tools.search import AccessArgs, AccessTool, SearchArgs, SearchTool

_STOP = frozenset(
    "a an and the of in on at by to which what who was is were for with that than "
    "more less fewer between".split()
)


def norm(name: str) -> str:
    """A name compared without case or a leading article."""
    n = name.strip().lower()
    return n[4:] if n.startswith("the ") else n


# -- reading sentences --------------------------------------------------------------------------


def _pattern(
    template: str, obj: str, nouns: tuple[str, ...], labels: tuple[str, ...]
) -> re.Pattern[str]:
    rx = re.escape(template)
    rx = rx.replace(re.escape("{S}"), r"(?P<S>(?:the )?[A-Z].*?)")
    rx = rx.replace(re.escape("{aN}"), r"an? (?:" + "|".join(nouns) + ")")
    rx = rx.replace(re.escape("{aO}"), r"an? (?P<O>" + "|".join(map(re.escape, labels)) + ")")
    obj_rx = {YEAR: r"(?P<O>\d{4})", NUMBER: r"(?P<O>\d[\d,]*)"}.get(
        obj, r"(?P<O>(?:the )?[A-Z].*?)"
    )
    rx = rx.replace(re.escape("{O}"), obj_rx)
    return re.compile(rx + r"$")


def _compile() -> list[tuple[str, str, re.Pattern[str]]]:
    pats = []
    for rel in RELATIONS.values():
        templates = {rel.sentence} | ({rel.inverse} if rel.inverse else set())
        for t in templates:
            nouns = tuple(TYPES[s].noun for s in rel.subjects)
            # the longest fixed words of the template: a cheap `in` test before the regex
            key = max(re.split(r"\{\w+\}", t), key=len).strip(" .")
            pats.append((rel.key, key, _pattern(t, rel.obj, nouns, LABELS.get(rel.key, ()))))
    # numbers and years before names: "was born in 1901" must not read 1901 as a city
    pats.sort(key=lambda p: RELATIONS[p[0]].obj not in (YEAR, NUMBER))
    return pats


_PATTERNS = _compile()


@functools.lru_cache(maxsize=65536)
def parse_sentence(sentence: str) -> list[tuple[str, str, Any]]:
    """The `(relation, subject name, object)` triples a sentence of the world's grammar states."""
    out = []
    for rel, key, rx in _PATTERNS:
        if key not in sentence:
            continue
        m = rx.match(sentence)
        if not m:
            continue
        obj_kind = RELATIONS[rel].obj
        o: Any = m["O"]
        if obj_kind in (YEAR, NUMBER):
            o = int(o.replace(",", ""))
        elif obj_kind == LABEL:
            o = o.strip()
        out.append((rel, m["S"], o))
        if obj_kind in (YEAR, NUMBER):
            break  # a year sentence reads one way only
    return out


@functools.lru_cache(maxsize=4096)
def parse_text(text: str) -> list[tuple[str, str, Any]]:
    """Every triple an article states (cached: popular articles are read again and again)."""
    out: list[tuple[str, str, Any]] = []
    for s in split_sentences(text):
        out.extend(parse_sentence(s))
    return out


# -- the tool solver ----------------------------------------------------------------------------


class BudgetExceeded(Exception):
    """The solver ran out of tool calls."""


@dataclass
class Article:
    """An article the solver has read: its entity type (from the url) and what it states."""

    name: str
    type: str
    triples: list[tuple[str, str, Any]]


@dataclass
class SolveResult:
    """What the tool solver answered and what it cost."""

    answer: str | None
    candidates: list[str]
    tool_calls: int
    exhausted: bool = False
    queries: list[str] = field(default_factory=list)


class ToolSolver:
    """A scripted search agent over a corpus, driven by a logical form (see module docstring)."""

    def __init__(
        self,
        search: SearchTool,
        access: AccessTool,
        *,
        max_calls: int = 120,
        fanout: int = 30,
        url_root: str | None = URL_ROOT,
    ):
        self.search = search
        self.access = access
        self.url_root = url_root
        self.max_calls = max_calls
        self.fanout = fanout

    async def solve(self, lf: Node) -> SolveResult:
        """Resolve the form through the tools; the answer is the one candidate left (or the first)."""
        self.calls = 0
        self.queries: list[str] = []
        self._articles: dict[str, Article | None] = {}
        self._checked: dict[tuple[str, int], bool] = {}
        try:
            cands = await self._candidates(lf)
            found = [c for c in sorted(cands[0] if cands else ()) if await self._check(c, lf)]
        except BudgetExceeded:
            return SolveResult(None, [], self.calls, exhausted=True, queries=self.queries)
        names = [a.name if (a := self._articles.get(c)) else c for c in found]
        return SolveResult(names[0] if names else None, names, self.calls, queries=self.queries)

    async def _call(self, tool: Any, args: Any) -> Any:
        if self.calls >= self.max_calls:
            raise BudgetExceeded
        self.calls += 1
        return await tool.call(args)

    async def _search(self, query: str, topk: int) -> list[dict[str, Any]]:
        self.queries.append(query)
        result = await self._call(self.search, SearchArgs(query=query, topk=topk))
        return list(result.metadata.get("docs") or [])

    async def article(self, name: str, type_hint: str | None = None) -> Article | None:
        """Read an entity's article: straight at its encyclopedia url when the type is known
        (one tool call, as a reader types a Wikipedia url), else search its name and read the
        matching hit (two calls)."""
        key = norm(name)
        if key in self._articles:
            return self._articles[key]
        doc = None
        if type_hint and self.url_root:
            result = await self._call(
                self.access, AccessArgs(url=f"{self.url_root}/{type_hint}/{slug(name)}")
            )
            doc = result.metadata.get("doc")
        if doc is None or norm(doc.get("title") or "") != key:
            doc = None
            for d in await self._search(search_key(name), 3):
                if norm(d.get("title") or "") == key:
                    result = await self._call(
                        self.access, AccessArgs(url=str(d.get("url") or d["id"]))
                    )
                    doc = result.metadata.get("doc")
                    break
        art = None
        if doc is not None:
            url = str(doc.get("url") or "")
            kind = url.rstrip("/").split("/")[-2] if url.count("/") >= 4 else ""
            art = Article(doc.get("title") or name, kind, parse_text(doc.get("text") or ""))
        self._articles[key] = art
        return art

    async def _candidates(self, q: Node) -> tuple[set[str], bool] | None:
        """Names that may answer `q`, and whether the set is complete.

        A set reached from a named entity through its article is complete; one found by
        searching literal values (years, labels) is a sample. The smallest complete set wins;
        without one, every sample is pooled.
        """
        options: list[tuple[set[str], bool]] = []
        # Cheapest first: a named entity costs one page read; nested descriptions cost more,
        # the deeper they go. The first complete answer set ends the exploration.
        ranked = sorted(
            (c for c in q["where"] if c["value"]["kind"] in ("entity", "query")),
            key=lambda c: depth(c["value"]),
        )
        for c in ranked:
            v = c["value"]
            if v["kind"] == "entity":
                anchors, complete = {norm(v["name"])}, True
            else:
                inner = await self._candidates(v)
                if inner is None or len(inner[0]) > self.fanout:
                    continue
                anchors = {a for a in sorted(inner[0]) if await self._check(a, v)}
                complete = inner[1]
            found = await self._follow(c, anchors)
            options.append((found, complete))
            if complete and len(found) <= self.fanout:
                return found, True
        complete_sets = sorted((o for o in options if o[1]), key=lambda o: len(o[0]))
        if complete_sets:
            return complete_sets[0]
        pooled: set[str] = set()
        for found, _ in options:
            pooled |= found
        literal = await self._literal_candidates(q)
        if literal is not None:
            pooled |= literal
        elif not options:
            return None
        return pooled, False

    async def _follow(self, c: dict[str, Any], anchors: set[str]) -> set[str]:
        out: set[str] = set()
        for a in sorted(anchors)[: self.fanout]:
            art = await self.article(a, c["value"].get("type"))
            if art is None:
                continue
            for rel, s, o in art.triples:
                if rel != c["rel"] or not isinstance(o, str):
                    continue
                if c["dir"] == "out" and norm(o) == a:
                    out.add(norm(s))
                elif c["dir"] == "in" and norm(s) == a:
                    out.add(norm(o))
        return out

    async def _literal_candidates(self, q: Node) -> set[str] | None:
        """Candidates found by searching the stated values themselves ("1934", "shipping").

        Only the value is searched: the verb and noun around it ("founded", "city") occur in
        thousands of articles, which makes a query slow and buries the few that matter.
        """
        queries: list[str] = []
        for c in q["where"]:
            v, rel = c["value"], RELATIONS[c["rel"]]
            if c["dir"] != "out":
                continue
            if v["kind"] == "literal":
                queries.append(format_number(v["value"]) if rel.obj == NUMBER else str(v["value"]))
            elif (
                v["kind"] == "range"
                and rel.obj == YEAR
                and v["lo"] is not None
                and v["hi"] is not None
                and v["hi"] - v["lo"] <= 9
            ):
                queries += [str(y) for y in range(v["lo"], v["hi"] + 1)]
        if not queries:
            return None
        out: set[str] = set()
        for query in queries[:10]:
            for d in await self._search(query, 20):
                url = str(d.get("url") or "")
                if f"/{q['type']}/" in url:
                    out.add(norm(d.get("title") or ""))
        return out

    async def _check(self, name: str, q: Node) -> bool:
        key = (name, id(q))
        if key in self._checked:
            return self._checked[key]
        art = await self.article(name, q["type"])
        ok = art is not None and art.type == q["type"]
        if ok:
            # plain values first: they are read off this page, and most candidates fail on them
            for c in sorted(q["where"], key=lambda c: depth(c["value"])):
                if not await self._holds(name, art, c):  # type: ignore[arg-type]
                    ok = False
                    break
        self._checked[key] = ok
        return ok

    async def _holds(self, name: str, art: Article, c: dict[str, Any]) -> bool:
        v, rel = c["value"], c["rel"]
        if c["dir"] == "out":
            values = [o for r, s, o in art.triples if r == rel and norm(s) == name]
        else:
            values = [
                s for r, s, o in art.triples if r == rel and isinstance(o, str) and norm(o) == name
            ]
        if v["kind"] in ("literal", "range"):
            return any(holds(v, o) for o in values)
        if v["kind"] == "entity":
            return any(norm(str(o)) == norm(v["name"]) for o in values)
        for o in values[: self.fanout]:
            if isinstance(o, str) and await self._check(norm(o), v):
                return True
        return False


# -- closed-book baselines ----------------------------------------------------------------------


def _tokens(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z]+", text.lower()) if w not in _STOP and len(w) > 2}


class ClosedBook:
    """Guesses from the question text and the world's priors alone (no corpus, no facts).

    - `popular`: the most linked entity of the asked type;
    - `lexical`: the entity of that type whose name shares the most words with the question;
    - `prior`: `samples` draws from the popularity distribution of the type.
    """

    def __init__(self, world: World, samples: int = 3):
        self.world = world
        self.samples = samples
        self._by_type: dict[str, list[str]] = {}
        self._weights: dict[str, np.ndarray] = {}
        for t, ids in world.by_type.items():
            ranked = sorted(ids, key=lambda e: -world.entities[e].popularity)
            self._by_type[t] = ranked
            w = np.array([world.entities[e].popularity + 1.0 for e in ranked])
            self._weights[t] = w / w.sum()
        self._name_tokens = {e.id: _tokens(e.name) for e in world.entities.values()}

    def guesses(
        self, question: str, answer_type: str, rng: np.random.Generator
    ) -> dict[str, list[str]]:
        """Each baseline's guesses (entity names) for the question."""
        pool = self._by_type.get(answer_type, [])
        if not pool:
            return {"popular": [], "lexical": [], "prior": []}
        q = _tokens(question)
        best, best_overlap = None, 0
        for e in pool:
            overlap = len(self._name_tokens[e] & q)
            if overlap > best_overlap:
                best, best_overlap = e, overlap
        picks = rng.choice(
            len(pool),
            size=min(self.samples, len(pool)),
            replace=False,
            p=self._weights[answer_type],
        )
        name = self.world.entities
        return {
            "popular": [name[pool[0]].name],
            "lexical": [name[best].name] if best else [],
            "prior": [name[pool[int(i)]].name for i in picks],
        }


def grade(guess: str, answers: Iterable[str]) -> bool:
    """Exact match after normalising case, articles and punctuation."""
    g = re.sub(r"[^\w ]+", "", norm(guess))
    return any(g == re.sub(r"[^\w ]+", "", norm(a)) for a in answers if a)
