"""Context strategies on long synthetic search-agent trajectories.

A search agent answers a question after `--turns` tool calls; each search returns ~600 tokens
of result text and each assistant turn carries ~120 tokens of reasoning. The window is
`--window` tokens. For each strategy the script reports how many turns the agent reaches
before the chat no longer fits the window, the tokens in the chat at the end, the mean
tokens the model reads per turn (the prefill cost), and how many edits were made.

Run: `python bench/context.py [--turns 120] [--window 32000]`.
"""

from __future__ import annotations

import argparse
import asyncio
import json

import numpy as np

from gemkit.core import Env
from gemkit.llm.token_counters import HeuristicTokenCounter
from gemkit.tools.function import tool
from gemkit.tools.wrapper import ToolEnvWrapper
from gemkit.wrappers import (
    ChatHistory,
    DiscardAllContext,
    DiscardContext,
    SummaryContext,
    ThinkingRetention,
)

WORDS = np.array("river station founded railway mayor valley bridge museum council".split())


class Question(Env):
    """A one-step QA task: the final answer ends the episode."""

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return "Which railway reached the valley town first? Search, then answer.", {}

    def step(self, action):
        return "Thanks.", 1.0, True, False, {"success": True}


@tool
def search(query: str) -> str:
    """Search the corpus."""
    rng = np.random.default_rng(abs(hash(query)) % 2**32)
    return " ".join(rng.choice(WORDS, 450))


def action(turn: int) -> dict:
    """An assistant turn: reasoning, then a search call."""
    thought = " ".join(["consider"] * 90)
    call = {"name": "search", "arguments": {"query": f"railway {turn}"}}
    return {
        "role": "assistant",
        "content": f"<think>{thought}</think>\n<tool_call>{json.dumps(call)}</tool_call>",
    }


def summarize(messages) -> str:
    return "Summary of the search so far: " + " ".join(["fact"] * 150)


STRATEGIES = {
    "none": [],
    "thinking retention": [ThinkingRetention],
    "discard-75%": [lambda e, w: DiscardContext(e, max_context=w, fraction=0.75)],
    "discard-all": [lambda e, w: DiscardAllContext(e, max_context=w)],
    "summary": [lambda e, w: SummaryContext(e, summarizer=summarize, max_context=w)],
}


async def run(strategy: str, turns: int, window: int) -> dict:
    counter = HeuristicTokenCounter()
    env = ChatHistory(ToolEnvWrapper(Question(), [search], max_tool_uses=turns + 1))
    for make in STRATEGIES[strategy]:
        env = make(env) if make is ThinkingRetention else make(env, window)
    obs, _ = await env.areset(seed=0)
    reached, read, edits = 0, [], 0
    for t in range(turns):
        tokens = counter.count_messages(obs)
        if tokens > window:
            break
        read.append(tokens)
        reached = t + 1
        obs, _, _, _, info = await env.astep(action(t))
        edits += len(info.get("context_edits", []))
    return {
        "reached": reached,
        "final": counter.count_messages(obs),
        "mean_read": float(np.mean(read)) if read else 0.0,
        "edits": edits,
    }


def main() -> None:
    """Print the table."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--turns", type=int, default=120)
    ap.add_argument("--window", type=int, default=32_000)
    args = ap.parse_args()
    print(f"{args.turns}-turn search trajectories, window {args.window:,} tokens")
    print(
        f"{'strategy':<20} {'turns reached':>14} {'tokens at end':>14} "
        f"{'mean tokens read/turn':>22} {'edits':>6}"
    )
    for name in STRATEGIES:
        r = asyncio.run(run(name, args.turns, args.window))
        print(
            f"{name:<20} {r['reached']:>14} {r['final']:>14,} {r['mean_read']:>22,.0f} "
            f"{r['edits']:>6}"
        )


if __name__ == "__main__":
    main()
