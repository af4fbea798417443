"""Rollout throughput against the scripted OpenAI-protocol server, and gemkit's own overhead.

Prints episodes/s at 1, 64 and 512 concurrent episodes of `game:GuessTheNumber-v0-easy`
played by an LLM policy whose "model" is the scripted server (answering by binary search,
so every episode has the same few turns), and the library's overhead per turn in
microseconds: a full turn (policy call + ChatHistory + env step + bookkeeping) with a policy
that answers in-process, no HTTP. Run: `python bench/rollout.py [--quick]`.
"""

from __future__ import annotations

import argparse
import asyncio
import time

import gemkit
from gemkit.envs.games.guess_the_number import GuessTheNumberExpert
from gemkit.llm import LLMClient
from gemkit.policy import SyncPolicy
from gemkit.rollout import arun_episodes
from gemkit.testing.openai_server import ScriptedOpenAIServer
from gemkit.wrappers import ChatHistory

ENV = "game:GuessTheNumber-v0-easy"


def model(request: dict) -> str:
    """Binary search over the chat's feedback (the scripted server's answer)."""
    expert = GuessTheNumberExpert(low=1, high=20)
    action = ""
    for m in request["messages"]:
        if m["role"] == "user":
            action = expert.choose(m["content"])
    return action


class InProcessPolicy(SyncPolicy):
    """The same answers without any HTTP (a stateful expert): isolates gemkit's per-turn cost."""

    def __init__(self) -> None:
        self.expert = GuessTheNumberExpert(low=1, high=20)

    def reset(self) -> None:
        self.expert.reset()

    def choose(self, observation: str) -> str:
        return self.expert.choose(observation)


async def llm_rate(base_url: str, episodes: int, concurrency: int) -> tuple[float, int]:
    client = LLMClient(base_url, "k", "scripted", max_concurrency=concurrency, max_retries=2)
    t0 = time.perf_counter()
    eps = await arun_episodes(
        ENV,
        lambda: gemkit.make_policy("llm", ENV, client=client),
        episodes,
        concurrency=concurrency,
        make_kwargs={"wrappers": [ChatHistory]},
    )
    dt = time.perf_counter() - t0
    await client.close()
    assert all(e.success for e in eps), [e.error for e in eps if e.error][:3]
    return episodes / dt, sum(e.num_turns for e in eps)


async def overhead_us(episodes: int) -> float:
    t0 = time.perf_counter()
    eps = await arun_episodes(
        ENV, InProcessPolicy, episodes, concurrency=64, make_kwargs={"wrappers": [ChatHistory]}
    )
    dt = time.perf_counter() - t0
    return dt / sum(e.num_turns for e in eps) * 1e6


def main() -> None:
    """Run the cases and print a table."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    scale = 1 if args.quick else 3
    print(f"{'case':<40} {'episodes/s':>12} {'turns/s':>10}")
    with ScriptedOpenAIServer(model) as srv:
        for c in (1, 64, 512):
            n = {1: 20, 64: 256, 512: 1024}[c] * scale
            rate, turns = asyncio.run(llm_rate(srv.base_url, n, c))
            print(
                f"{'scripted server, concurrency ' + str(c):<40} {rate:>12,.1f} "
                f"{rate * turns / n:>10,.0f}"
            )
    us = asyncio.run(overhead_us(2000 * scale))
    print(f"{'gemkit overhead per turn (no HTTP)':<40} {us:>11.1f} µs")


if __name__ == "__main__":
    main()
