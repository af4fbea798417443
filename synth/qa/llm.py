"""`--llm` mode: an OpenAI-compatible model chooses each edit and rewrites the question.

The state, the tools and the verification are the rule agent's: candidates (injections found
with the search tool, fuzzes) are computed the same way and shown to the model as numbered
options; the model replies `{"choice": n, "question": "..."}`. The chosen option updates the
logical form, the model's text becomes the question, and the edit is kept only if the text
passes the form checks (and no longer states what it replaced) and the form stays unique.
Difficulty adds k closed-book samples of the model, graded against the answer.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

import numpy as np

from gemkit.synth.qa.agent import AgentConfig, QAState, RuleAgent, edit_texts
from gemkit.synth.qa.edits import Candidate
from gemkit.synth.qa.logic import mentions
from gemkit.synth.qa.solver import grade
from gemkit.synth.world.world import World
from gemkit.tools.search import SearchTool

logger = logging.getLogger(__name__)

EDIT_SYSTEM = (
    "You make trivia questions harder without making them ambiguous. You are shown a question, "
    "its answer (never write the answer), and numbered edit options. Each option replaces one "
    "phrase of the question: INJECT replaces a name by a description taken from a fact, FUZZ "
    "blurs a detail. Pick one option and rewrite the whole question with that replacement, as "
    "one natural, grammatical English question ending with '?'. Keep every other detail. "
    'Reply with JSON only: {"choice": <option number>, "question": "<rewritten question>"}'
)
CLOSED_BOOK_SYSTEM = "Answer the question with the name only, no explanation. Guess if unsure."
_JSON = re.compile(r"\{.*\}", re.DOTALL)


def option_lines(state: QAState, options: list[Candidate], refs: dict[str, str]) -> list[str]:
    """The numbered options as the model sees them: op, phrase replaced, replacement, fact."""
    lines = []
    for i, c in enumerate(options, 1):
        before, after = edit_texts(state.lf, c, refs)
        fact = f" (fact: {c.mention[1]})" if c.mention else ""
        lines.append(f'{i}. {c.op.upper()}: replace "{before}" with "{after}"{fact}')
    return lines


def parse_reply(text: str, n_options: int) -> tuple[int, str] | None:
    """`(option index, question)` from the model's JSON reply, or None when it is unusable.

    Small models often break the JSON (quotes inside the question left unescaped, the closing
    brace missing); the two fields are then read by pattern. Whatever is read, the text
    checks decide whether the rewrite is kept.
    """
    read = read_reply(text, n_options)
    return read if isinstance(read, tuple) else None


def read_reply(text: str, n_options: int) -> tuple[int, str] | str:
    """`parse_reply`, or what was wrong with the reply, in words (the rejection's reason)."""
    m = _JSON.search(text or "")
    if not m:
        m = _LOOSE_START.search(text or "")
        if not m:
            return 'it holds no JSON object {"choice": <option number>, "question": "..."}'
    try:
        data = json.loads(m.group(0))
    except json.JSONDecodeError as e:
        loose = _loose_fields(m.group(0))
        if loose is None:
            return (
                f'its JSON is invalid ({e.msg} at column {e.colno}) and no "choice" and '
                '"question" fields could be read from it'
            )
        choice, question = loose
    else:
        if not isinstance(data, dict):
            return f"its JSON is a {type(data).__name__}, not an object"
        missing = [k for k in ("choice", "question") if k not in data]
        if missing:
            return "its JSON has no " + " and no ".join(f'"{k}"' for k in missing)
        try:
            choice, question = int(data["choice"]), str(data["question"]).strip()
        except (TypeError, ValueError):
            return f'its "choice" is {json.dumps(data["choice"])[:40]}, not an option number'
    if not 1 <= choice <= n_options:
        return f"choice {choice} is not one of the options 1-{n_options}"
    if not question:
        return 'its "question" is empty'
    return choice - 1, question


_LOOSE_START = re.compile(r"\{.*", re.DOTALL)
_LOOSE_CHOICE = re.compile(r'"choice"\s*:\s*"?(\d{1,4})"?')
_LOOSE_QUESTION = re.compile(r'"question"\s*:\s*"(.*)', re.DOTALL)


def _loose_fields(text: str) -> tuple[int, str] | None:
    choice, question = _LOOSE_CHOICE.search(text), _LOOSE_QUESTION.search(text)
    if choice is None or question is None:
        return None
    body = question.group(1).rstrip()
    body = re.sub(r'"?\s*\}?\s*$', "", body)  # the closing quote and brace, when present
    return int(choice.group(1)), body.replace('\\"', '"').strip()


class LLMAgent(RuleAgent):
    """The rule agent's state and tools, with a model choosing and rewriting each edit."""

    def __init__(
        self,
        world: World,
        search: SearchTool,
        base_url: str,
        model: str | None,
        config: AgentConfig | None = None,
        *,
        client: Any = None,
        options: int = 6,
        temperature: float = 0.7,
        timeout: float | None = None,
    ):
        super().__init__(world, search, config)
        if client is None:
            from gemkit.llm import LLMClient

            client = LLMClient(base_url=base_url, model=model, max_retries=3, timeout=timeout)
        self.client = client
        self.options = options
        self.temperature = temperature
        self.llm_calls = 0
        self.bad_replies = 0

    async def _ask(self, messages: list[dict[str, str]], temperature: float) -> str:
        self.llm_calls += 1
        response = await self.client.chat(messages, temperature=temperature, max_tokens=400)
        return response.content

    async def grow(self, state: QAState, rng: np.random.Generator) -> QAState:
        """Offer options each step; apply the model's choice with its rewritten question."""
        cfg = self.config
        target = {
            "inject": cfg.min_inject + int(rng.random() < cfg.extra_inject),
            "fuzz": cfg.min_fuzz + int(rng.random() < cfg.extra_fuzz),
        }
        failures = 0
        for _ in range(cfg.max_steps):
            need_inject = target["inject"] - state.n_inject
            need_fuzz = target["fuzz"] - state.n_fuzz
            if (need_inject <= 0 and need_fuzz <= 0) or failures >= 4:
                break
            options: list[Candidate] = []
            if need_inject > 0:
                options += (await self.inject_options(state, rng, want_entity=need_inject > 1))[
                    : self.options // 2
                ]
            if need_fuzz > 0:
                keep = 1 if need_inject > 0 else 0
                options += self.fuzz_options(state, rng, keep)[: self.options - len(options)]
            if not options:
                break
            lines = option_lines(state, options, self.refs)
            prompt = (
                f"Question: {state.question}\nAnswer (do not reveal): {state.answer}\n\n"
                "Options:\n" + "\n".join(lines)
            )
            text = await self._ask(
                [{"role": "system", "content": EDIT_SYSTEM}, {"role": "user", "content": prompt}],
                self.temperature,
            )
            parsed = read_reply(text, len(options))
            if isinstance(parsed, str):
                self.bad_replies += 1
                failures += 1
                state.rejected.append(
                    {
                        "op": "?",
                        "before": "",
                        "after": "",
                        "fact": None,
                        "stage": "quality",
                        # the whole reply (bounded by max_tokens): what the model wrote and why
                        # it could not be used, for whoever tunes the prompt or the model
                        "reason": f"unusable model reply: {parsed}; the reply: {text!r}",
                    }
                )
                continue
            choice, question = parsed
            cand = options[choice]
            before, after = edit_texts(state.lf, cand, self.refs)
            if mentions(question, before):
                failures += 1
                state.rejected.append(
                    {
                        "op": cand.op,
                        "before": before,
                        "after": after,
                        "fact": None,
                        "stage": "quality",
                        "reason": f"the rewrite still states the replaced phrase {before!r} "
                        f"(option {choice + 1} replaces it with {after!r})",
                        "question": question,
                    }
                )
                continue
            if not self.try_edit(state, cand, question=question):
                failures += 1
        return state

    async def closed_book(self, state: QAState, difficulty: dict[str, Any]) -> dict[str, Any]:
        """Add k closed-book samples of the model to the difficulty stage (all must be wrong)."""
        k = self.config.closed_book_samples
        answers = []
        for _ in range(k):
            answers.append(
                await self._ask(
                    [
                        {"role": "system", "content": CLOSED_BOOK_SYSTEM},
                        {"role": "user", "content": state.question},
                    ],
                    1.0,
                )
            )
        correct = sum(
            grade(a, state.aliases) or any(mentions(a, x) for x in state.aliases) for a in answers
        )
        out = dict(difficulty)
        out["closed_book_correct"] = difficulty["closed_book_correct"] + correct
        out["closed_book_tries"] = difficulty["closed_book_tries"] + k
        out["llm_closed_book"] = {"samples": answers, "correct": correct}
        if correct:
            out["passed"] = False
            out["reason"] = out.get("reason") or "the model answered it without tools"
        return out
