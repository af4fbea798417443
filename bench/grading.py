"""Answer grading cost: time per graded answer for the math and qa envs on their built-in data.

Each built-in problem is answered in several forms (the gold itself, an equivalent form, a wrong
number, a hedge between two values, a long reasoning text before the box), stepped through
`env.step` on the main thread after a warm-up, and timed. Prints microseconds per answer (median
and mean) per form and the rewards, so a change to the graders shows its cost next to what it
catches. Run: `python bench/grading.py [--repeat N]`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable

import gemkit
from gemkit.envs.math.arithmetic import ArithmeticProblems
from gemkit.envs.math.grading import grade

REASONING = "Let me think step by step. " * 200  # about 5 kB of text before the answer


def math_forms(gold: str) -> dict[str, str]:
    """Replies to one math problem, by the form of the answer."""
    return {
        "gold": f"\\boxed{{{gold}}}",
        "x = gold": f"\\boxed{{x = {gold}}}",
        "$gold$ after 5 kB": f"{REASONING}so \\boxed{{${gold}$}}",
        "wrong number": "\\boxed{-12345}",
        "hedge: gold or 7": f"\\boxed{{{gold} \\text{{ or }} 7}}",
        "two boxes": f"\\boxed{{7}} or \\boxed{{{gold}}}",
    }


def qa_forms(gold: str) -> dict[str, str]:
    """Replies to one qa question, by the form of the answer."""
    return {
        "gold": f"<answer>{gold}</answer>",
        "gold after 5 kB": f"{REASONING}<answer>{gold}</answer>",
        "wrong": "<answer>Nobody Atall</answer>",
        "hedge: gold or London": f"<answer>{gold} or London</answer>",
        "two tags": f"<answer>London</answer> <answer>{gold}</answer>",
    }


def time_forms(
    env_id: str, forms: Callable[[str], dict[str, str]], repeat: int, **kwargs: object
) -> dict[str, tuple[list[float], list[float]]]:
    """Per form: the seconds each `step` took and the rewards, over every problem, `repeat` times."""
    env = gemkit.make(env_id, **kwargs)
    inner = env.unwrapped
    n = len(inner.records if hasattr(inner, "records") else inner.problems)
    env.reset(options={"index": 0})
    env.step(forms("1")["gold"])
    grade("(x+1)^2", "x^2+2x+1")  # imports and checker warm-up (once a process) are not counted
    out: dict[str, tuple[list[float], list[float]]] = {}
    for _ in range(repeat):
        for i in range(n):
            env.reset(options={"index": i})
            gold = str(inner.golds()[0] if hasattr(inner, "golds") else inner.problem["answer"])
            for name, reply in forms(gold).items():
                env.reset(options={"index": i})
                t0 = time.perf_counter()
                reward = env.step(reply)[1]
                dt = time.perf_counter() - t0
                times, rewards = out.setdefault(name, ([], []))
                times.append(dt)
                rewards.append(reward)
    return out


def report(title: str, results: dict[str, tuple[list[float], list[float]]]) -> None:
    """One table: form, median and mean microseconds per answer, mean reward."""
    print(f"\n{title}")
    print(f"{'form':24} {'median us':>10} {'mean us':>10} {'mean reward':>12}")
    for name, (times, rewards) in results.items():
        med, mean = statistics.median(times) * 1e6, statistics.fmean(times) * 1e6
        print(f"{name:24} {med:10.1f} {mean:10.1f} {statistics.fmean(rewards):12.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="passes over each data set")
    args = parser.parse_args()
    report("math:Builtin-v0 (65 problems)", time_forms("math:Builtin-v0", math_forms, args.repeat))
    report(
        "math:Arithmetic-v0-hard (first 65 problems)",
        time_forms("math:Jsonl-v0", math_forms, args.repeat, path=_arith_file()),
    )
    report("qa:Builtin-v0 (41 questions, EM)", time_forms("qa:Builtin-v0", qa_forms, args.repeat))


def _arith_file() -> str:
    """The first 65 hard arithmetic problems in a temporary JSONL file (same set every run)."""
    problems = ArithmeticProblems("hard")
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        for i in range(65):
            f.write(json.dumps(problems[i]) + "\n")
    return f.name


if __name__ == "__main__":
    main()
