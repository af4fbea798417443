"""QA synthesis on an outside corpus (`--corpus`) from seed questions (`--seeds`), with a model.

No fact store exists here, so the model does what the world's templates and logical form do
for the offline agent, and every judgement is recorded:

- inject: the model names an entity of the question; the `search` tool fetches articles about
  it; the model picks one of the sentences found (numbered) and rewrites the question with a
  description taken from it; the sentence becomes a supporting fact;
- fuzz: the model blurs one detail it quotes verbatim (`1934` -> `the early 1930s`);
- quality: one question, bounded length, answer not leaked, the replaced text gone, every
  supporting sentence found in its doc (through the index), and the model, shown only the
  supporting facts, agrees they lead to the answer;
- difficulty: k closed-book samples of the model must all miss; the model with the `search`
  and `access` tools must find the answer (its tool calls are the hardness figure);
- uniqueness: each distinct wrong answer from those attempts is checked against the
  supporting facts by the model; if one also fits, the question is ambiguous;
- shortcut: the model with tools needed at least one call per injection (hop); without a
  fact store, shallower sub-questions cannot be evaluated here.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gemkit.errors import GemkitError
from gemkit.synth.qa.agent import AgentConfig, EditCounts, choose_op
from gemkit.synth.qa.logic import mentions
from gemkit.synth.qa.solver import grade
from gemkit.synth.qa.verify import check_form
from gemkit.synth.world.world import split_sentences
from gemkit.tools.search import AccessTool, SearchArgs, SearchTool

# Each system prompt starts with a TASK tag: it tells a scripted test model what is asked, and
# costs a real model nothing.
PICK_SYSTEM = (
    "TASK: pick_entity. You make trivia questions harder. Name one specific entity (a person, "
    "place, organisation, work or event) that appears verbatim in the question and is not the "
    'answer. Reply with JSON only: {"entity": "<exact text from the question>"}'
)
INJECT_SYSTEM = (
    "TASK: inject. Replace the given entity in the question by a description of it taken from "
    "one of the numbered facts, so the question no longer names it. Keep everything else; write "
    "one natural, grammatical question ending with '?', and never mention the answer. Reply with "
    'JSON only: {"fact": <fact number>, "question": "<rewritten question>"}'
)
FUZZ_SYSTEM = (
    "TASK: fuzz. Blur one specific detail of the question (a year, a number, a place or a "
    "name) into a vaguer one that is still true, e.g. 1934 -> the early 1930s, 43,817 -> more "
    "than 40,000. Quote the detail exactly as it appears. Reply with JSON only: "
    '{"before": "<exact detail>", "after": "<vaguer phrase>", "question": "<rewritten question>"}'
)
FOLLOWS_SYSTEM = (
    "TASK: follows. Given only the facts listed, decide whether they show that the proposed "
    'answer is the answer to the question. Reply with JSON only: {"follows": true|false}'
)
FITS_SYSTEM = (
    "TASK: fits. A question has a known answer. Decide whether another candidate also "
    "satisfies every condition of the question, judging by the facts listed and what you know. "
    'Reply with JSON only: {"fits": true|false}'
)
CLOSED_SYSTEM = "TASK: closed_book. Answer the question with the name only, no explanation."
SOLVER_SYSTEM = (
    "TASK: solve. Answer the question using the search and access tools to look things up. When "
    "you know the answer, reply with the name only."
)
_JSON = re.compile(r"\{.*\}", re.DOTALL)


def read_seeds(path: str | Path) -> list[dict[str, Any]]:
    """Seed questions from a JSONL file of `{"question", "answer", "aliases"?}` objects."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise GemkitError(
            f"seed file {str(path)!r} does not exist; expected JSONL with "
            '{"question": ..., "answer": ...} per line'
        )
    seeds = []
    for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            q, a = str(obj["question"]).strip(), str(obj["answer"]).strip()
        except (json.JSONDecodeError, KeyError, TypeError):
            raise GemkitError(
                f"{p}, line {n}: expected a JSON object with 'question' and 'answer' strings"
            ) from None
        if not q or not a:
            raise GemkitError(f"{p}, line {n}: 'question' and 'answer' must not be empty")
        seeds.append({"question": q, "answer": a, "aliases": list(obj.get("aliases") or [])})
    if not seeds:
        raise GemkitError(f"{p} holds no seed questions")
    return seeds


def changed_span(old: str, new: str) -> str:
    """The part of `new` that replaced something in `old` (common prefix and suffix removed)."""
    i = 0
    while i < min(len(old), len(new)) and old[i] == new[i]:
        i += 1
    j = 0
    while j < min(len(old), len(new)) - i and old[-1 - j] == new[-1 - j]:
        j += 1
    # widen to whole words, so "a man" is not cut to "man"
    start = new.rfind(" ", 0, i) + 1 if i and not new[i - 1].isspace() else i
    end = len(new) - j
    if j and end < len(new) and not new[end].isspace() and new[end] not in "?,.":
        nxt = new.find(" ", end)
        end = len(new) if nxt < 0 else nxt
    return new[start:end].strip()


def parse_json(text: str) -> dict[str, Any] | None:
    """The first JSON object in a model reply, or None."""
    m = _JSON.search(text or "")
    if not m:
        return None
    try:
        data = json.loads(m.group(0))
    except json.JSONDecodeError:
        return None
    return data if isinstance(data, dict) else None


@dataclass
class OutsideState(EditCounts):
    """The state of a question grown on an outside corpus (no logical form)."""

    question: str
    answer: str
    aliases: list[str]
    seed: dict[str, str]
    support: list[dict[str, Any]] = field(default_factory=list)
    edits: list[dict[str, Any]] = field(default_factory=list)
    rejected: list[dict[str, Any]] = field(default_factory=list)
    lf: Any = None


class OutsideAgent:
    """Grows and verifies questions on any corpus with a model, the search tool and the index."""

    def __init__(
        self,
        search: SearchTool,
        access: AccessTool,
        client: Any,
        doc_text: Any,
        config: AgentConfig | None = None,
        *,
        max_solver_turns: int = 8,
    ):
        self.search = search
        self.access = access
        self.client = client
        self.doc_text = doc_text
        self.config = config or AgentConfig()
        self.max_solver_turns = max_solver_turns

    async def _json(
        self, system: str, user: str, temperature: float = 0.7
    ) -> dict[str, Any] | None:
        response = await self.client.chat(
            [{"role": "system", "content": system}, {"role": "user", "content": user}],
            temperature=temperature,
            max_tokens=400,
        )
        return parse_json(response.content)

    def _reject(
        self,
        state: OutsideState,
        op: str,
        stage: str,
        reason: str,
        before: str = "",
        after: str = "",
    ) -> None:
        state.rejected.append(
            {
                "op": op,
                "before": before,
                "after": after,
                "fact": None,
                "stage": stage,
                "reason": reason,
            }
        )

    # -- edits ----------------------------------------------------------------------------------

    async def inject(self, state: OutsideState) -> bool:
        """One injection: the model names an entity, search finds facts, the model rewrites."""
        head = f"Question: {state.question}\nAnswer (never reveal): {state.answer}"
        pick = await self._json(PICK_SYSTEM, head)
        entity = str((pick or {}).get("entity") or "").strip()
        if not entity or entity not in state.question or mentions(entity, state.answer):
            self._reject(
                state, "inject", "quality", f"no usable entity in the reply: {pick!r}"[:120]
            )
            return False
        result = await self.search.call(SearchArgs(query=entity, topk=5))
        facts: list[tuple[str, str]] = []
        for d in result.metadata.get("docs") or []:
            for sentence in split_sentences(d.get("text") or ""):
                if mentions(sentence, entity) and not any(
                    mentions(sentence, a) for a in state.aliases
                ):
                    facts.append((str(d["id"]), sentence))
        facts = facts[:8]
        if not facts:
            self._reject(
                state, "inject", "quality", f"search found no fact about {entity!r}", entity
            )
            return False
        listing = "\n".join(f"{i}. {s}" for i, (_, s) in enumerate(facts, 1))
        reply = await self._json(
            INJECT_SYSTEM, f"{head}\nEntity to replace: {entity}\nFacts:\n{listing}"
        )
        try:
            choice, question = int(reply["fact"]) - 1, str(reply["question"]).strip()  # type: ignore[index]
            doc_id, sentence = facts[choice]
        except (TypeError, KeyError, ValueError, IndexError):
            self._reject(
                state, "inject", "quality", f"unusable model reply: {reply!r}"[:120], entity
            )
            return False
        form = check_form(question, state.aliases, self.config.max_chars)
        reason = form["reason"] or (
            "the rewrite still names the entity" if mentions(question, entity) else ""
        )
        if reason:
            self._reject(state, "inject", "quality", reason, entity, question)
            return False
        after = changed_span(state.question, question)
        state.question = question
        state.support.append({"doc_id": doc_id, "text": sentence})
        state.edits.append(
            {
                "op": "inject",
                "before": entity,
                "after": after,
                "fact": {"doc_id": doc_id, "text": sentence},
                "question": question,
            }
        )
        return True

    async def fuzz(self, state: OutsideState) -> bool:
        """One fuzz: the model blurs a detail it quotes from the question."""
        reply = await self._json(
            FUZZ_SYSTEM, f"Question: {state.question}\nAnswer (never reveal): {state.answer}"
        )
        before = str((reply or {}).get("before") or "").strip()
        after = str((reply or {}).get("after") or "").strip()
        question = str((reply or {}).get("question") or "").strip()
        if not before or before not in state.question or not after or not question:
            self._reject(
                state, "fuzz", "quality", f"unusable model reply: {reply!r}"[:120], before, after
            )
            return False
        form = check_form(question, state.aliases, self.config.max_chars)
        reason = form["reason"] or (
            "the rewrite still states the detail" if mentions(question, before) else ""
        )
        if reason:
            self._reject(state, "fuzz", "quality", reason, before, after)
            return False
        state.question = question
        state.edits.append(
            {"op": "fuzz", "before": before, "after": after, "fact": None, "question": question}
        )
        return True

    async def grow(self, state: OutsideState, rng: np.random.Generator) -> OutsideState:
        """Inject and fuzz until the targets are met, or four edits in a row fail."""
        cfg = self.config
        target = cfg.edit_targets(rng)
        failures = 0
        for _ in range(cfg.max_steps):
            need = state.still_needed(target)
            ops = [op for op, k in need.items() if k > 0]
            if not ops or failures >= 4:
                break
            op = choose_op(need, ops, rng)
            ok = await (self.inject(state) if op == "inject" else self.fuzz(state))
            failures = 0 if ok else failures + 1
        return state

    # -- verification ---------------------------------------------------------------------------

    async def solve(self, question: str) -> tuple[str | None, int]:
        """The model with the search and access tools: its final answer and its tool calls."""
        tools = [self.search.openai_schema(), self.access.openai_schema()]
        by_name = {self.search.name: self.search, self.access.name: self.access}
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": SOLVER_SYSTEM},
            {"role": "user", "content": question},
        ]
        calls = 0
        for _ in range(self.max_solver_turns):
            response = await self.client.chat(
                messages, tools=tools, temperature=0.0, max_tokens=400
            )
            if not response.tool_calls:
                return response.content.strip() or None, calls
            messages.append(response.message.to_dict(include_reasoning=False))
            for call in response.tool_calls:
                calls += 1
                tool = by_name.get(call.name)
                args = call.parsed_arguments()
                if tool is None or not isinstance(args, dict):
                    text = f"unknown tool {call.name!r} or arguments not a JSON object"
                else:
                    try:
                        text = (await tool.call(tool.Args.model_validate(args))).text
                    except Exception as e:  # a bad argument is the model's problem, told to it
                        text = f"tool error: {e}"
                messages.append({"role": "tool", "tool_call_id": call.id, "content": text})
        return None, calls

    async def verify(self, state: OutsideState) -> dict[str, Any]:
        """The four stages for an outside-corpus question (see the module docstring)."""
        facts = "\n".join(f"- {s['text']}" for s in state.support)
        quality = check_form(state.question, state.aliases, self.config.max_chars)
        ungrounded = [
            s["doc_id"]
            for s in state.support
            if s["text"] not in (self.doc_text(s["doc_id"]) or "")
        ]
        follows = await self._json(
            FOLLOWS_SYSTEM,
            f"Facts:\n{facts}\nQuestion: {state.question}\nProposed answer: {state.answer}",
            0.0,
        )
        follows_ok = bool((follows or {}).get("follows"))
        quality.update(
            grounded=f"{len(state.support) - len(ungrounded)}/{len(state.support)}",
            ungrounded=ungrounded,
            answer_follows=follows_ok,
        )
        if ungrounded and not quality["reason"]:
            quality["reason"] = f"supporting fact not found in doc {ungrounded[0]}"
        if not follows_ok and not quality["reason"]:
            quality["reason"] = "the model does not find the answer in the supporting facts"
        quality["passed"] = bool(quality["passed"] and not ungrounded and follows_ok)

        samples = []
        for _ in range(self.config.closed_book_samples):
            r = await self.client.chat(
                [
                    {"role": "system", "content": CLOSED_SYSTEM},
                    {"role": "user", "content": state.question},
                ],
                temperature=1.0,
                max_tokens=60,
            )
            samples.append(r.content.strip())
        correct = sum(grade(s, [state.answer, *state.aliases]) for s in samples)
        found, tool_calls = await self.solve(state.question)
        success = found is not None and grade(found, [state.answer, *state.aliases])
        difficulty = {
            "passed": correct == 0 and success,
            "closed_book_correct": correct,
            "closed_book_tries": len(samples),
            "llm_closed_book": {"samples": samples},
            "tool_solver_success": success,
            "tool_calls": tool_calls,
            "reason": "the model answered it without tools"
            if correct
            else ("" if success else "the model with search did not find it"),
        }

        wrong = sorted(
            {
                s
                for s in [*samples, found or ""]
                if s and not grade(s, [state.answer, *state.aliases])
            }
        )
        fitting = []
        for candidate in wrong:
            verdict = await self._json(
                FITS_SYSTEM,
                f"Facts:\n{facts}\nQuestion: {state.question}\n"
                f"Known answer: {state.answer}\nCandidate: {candidate}",
                0.0,
            )
            if (verdict or {}).get("fits"):
                fitting.append(candidate)
        uniqueness = {
            "passed": not fitting,
            "candidates": 1 + len(fitting),
            "checked": wrong,
            "also_fit": fitting,
            "reason": f"{fitting[0]!r} also fits" if fitting else "",
        }
        # No fact store to evaluate shallower sub-questions over: what can be checked is that
        # the model with tools needed a call per hop (each injection is one hop to look up).
        hops = max(1, state.n_inject)
        short = tool_calls >= hops
        shortcut = {
            "passed": short,
            "hops": hops,
            "min_tool_calls": tool_calls,
            "reason": ""
            if short
            else f"the model with search needed {tool_calls} "
            f"call{'s' * (tool_calls != 1)} for {hops} hops",
        }
        return {
            "quality": quality,
            "difficulty": difficulty,
            "uniqueness": uniqueness,
            "shortcut": shortcut,
        }
