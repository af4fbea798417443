"""`extract_answer`: the last boxed or tagged answer, found in one pass over the reply."""

from __future__ import annotations

import signal

import pytest

from gemkit.answers import extract_answer


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("so <answer> 5 </answer>.", "5"),
        ("<ANSWER>a</answer> then \\boxed{b}", "b"),
        ("\\boxed{b} then <answer>a</answer>", "a"),
        ("<answer>a</answer><answer>b</answer>", "b"),
        ("<answer>never closed", None),
        ("</answer> stray close, then <answer>x</answer>", "x"),
        ("no answer at all", None),
    ],
)
def test_the_last_answer_wins(text, expected):
    assert extract_answer(text) == expected


def test_a_reply_full_of_unclosed_tags_is_read_in_one_pass():
    # a regex that rescans from every unclosed tag needs minutes for this (about 21 s for
    # 20,000 tags on a 2-core VM); one pass needs milliseconds, so the alarm is far off
    def too_slow(signum, frame):
        raise TimeoutError("extract_answer is not linear in the number of tags")

    old = signal.signal(signal.SIGALRM, too_slow)
    signal.alarm(60)
    try:
        assert extract_answer("<answer>" * 100_000 + "\\boxed{7}") == "7"
        assert extract_answer("<answer>" * 100_000) is None
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
