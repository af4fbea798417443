"""Opt-in partial credit pays no junk: a sweep over every reasoning-gym dataset and every
toolworld category, with partial credit on and off.

The rule (docs/security.md): with partial credit on, an answer that does not depend on the
item (a constant, an echo of the question, junk shaped like an answer, a hedge) earns no more
than it does with partial credit off, and a value that does not exist earns nothing for its
slot. On the code before, `time_intervals` paid `00:00:00` 0.36 on average, `rectangle_count`
paid `0` 0.15, `word_sorting` paid the question's last line 0.10, `countdown` and
`palindrome_generation` paid `0` 0.05 on every item, two-candidate hedges earned 0.4-0.93,
and a meeting on a day that does not exist earned 0.78.
"""

from __future__ import annotations

import importlib.util
import json
import warnings

import pytest

import gemkit

needs_rg = pytest.mark.skipif(
    importlib.util.find_spec("reasoning_gym") is None,
    reason="reasoning-gym is an optional extra (pip install gemkit[rg])",
)

if importlib.util.find_spec("reasoning_gym") is not None:
    from reasoning_gym.factory import DATASETS

    RG = sorted(n for n in DATASETS if n != "composite")  # composite mixes the others
else:
    RG = []

#: answers no item asks for, the same for every item
CONSTANTS = ["0", "1", "-1", "00:00:00", "a", "yes", "True", "[]", "x", "1 2 3"]
#: datasets whose items or scorers are slow (seconds per item): fewer items in the sweep
SLOW = {
    "futoshiki", "intermediate_integration", "knight_swap", "puzzle24", "quantum_lock",
    "rubiks_cube", "simple_integration", "sokoban", "zebra_puzzles",
}  # fmt: skip
SIZE = 64


def junk(entry: dict, other: str) -> dict[str, str]:
    """Every kind of answer that does no work on `entry`; `other` is another item's answer."""
    from gemkit.envs.reasoning_gym.scoring import reference_answer

    ref = reference_answer(entry) or ""
    lines = [line.strip() for line in entry["question"].splitlines() if line.strip()]
    out = {f"constant {c!r}": c for c in CONSTANTS}
    out |= {
        "the question's last line": lines[-1],
        "the question's first line": lines[0],
        "what follows the last colon": lines[-1].rsplit(":", 1)[-1].strip(),
        "another item's answer": other,
    }
    if ref:
        out |= {
            "hedge 'A or B'": f"{ref} or {other}",
            "hedge 'B or A'": f"{other} or {ref}",
            "hedge 'A, B'": f"{ref}, {other}",
            "hedge on two lines": f"{ref}\n{other}",
            "hedge 'A B'": f"{ref} {other}",
        }
    return {k: v for k, v in out.items() if v and v != ref}


def rewards(name: str, items: range) -> dict[str, list[tuple[float, float]]]:
    """Per kind of junk, `(reward with partial credit off, on)` on each item."""
    from gemkit.envs.reasoning_gym.items import item_at
    from gemkit.envs.reasoning_gym.scoring import reference_answer, reward

    dataset = gemkit.make(f"rg:{name}", size=SIZE).unwrapped.dataset
    out: dict[str, list[tuple[float, float]]] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in items:
            entry = item_at(dataset, i)
            other = reference_answer(item_at(dataset, (i + 17) % SIZE)) or "0"
            for kind, answer in junk(entry, other).items():
                off = reward(dataset, answer, entry, i, name, False)[0]
                on = reward(dataset, answer, entry, i, name, True)[0]
                out.setdefault(kind, []).append((off, on))
    return out


#: junk made from the item itself: partial credit pays it nothing on every single item
PER_ITEM = ("the question's", "what follows", "hedge")


@needs_rg
@pytest.mark.parametrize("name", RG)
def test_no_junk_earns_more_with_partial_credit_on_than_off(name):
    """An echo or a hedge earns no more on any item. An answer the same for every item can
    land near one item's reference by chance, and a decoy's as often: its partial reward
    averages at most 0, so over the items here it may not exceed 0 by more than twice the
    standard error of its mean (the old rule paid such answers on most items)."""
    items = range(6 if name in SLOW else 12)
    for kind, pairs in rewards(name, items).items():
        gains = [on - off for off, on in pairs]
        if kind.startswith(PER_ITEM):
            assert max(gains) <= 1e-9, f"rg:{name}: {kind} earns more with partial credit on"
            continue
        mean = sum(gains) / len(gains)
        spread = (sum((g - mean) ** 2 for g in gains) / (len(gains) - 1)) ** 0.5
        noise = 2 * spread / len(gains) ** 0.5
        assert mean <= noise + 1e-9, (
            f"rg:{name}: {kind} gains {mean:.3f} on average (noise {noise:.3f})"
        )


@needs_rg
@pytest.mark.parametrize(
    ("name", "answer", "paid_before"),
    [
        ("time_intervals", "00:00:00", 0.36),
        ("rectangle_count", "0", 0.15),
        ("countdown", "0", 0.05),
        ("palindrome_generation", "0", 0.05),
    ],
)
def test_the_constants_that_were_paid_earn_nothing_over_forty_items(name, answer, paid_before):
    from gemkit.envs.reasoning_gym.items import item_at
    from gemkit.envs.reasoning_gym.scoring import reward

    dataset = gemkit.make(f"rg:{name}", size=SIZE).unwrapped.dataset
    on = [reward(dataset, answer, item_at(dataset, i), i, name, True)[0] for i in range(40)]
    off = [reward(dataset, answer, item_at(dataset, i), i, name, False)[0] for i in range(40)]
    assert sum(on) <= sum(off) and sum(on) / 40 < paid_before


@needs_rg
@pytest.mark.parametrize(
    "name", ["products", "chain_sum", "manipulate_matrix", "quantum_lock", "tsumego"]
)
def test_two_candidate_hedges_earn_nothing_with_partial_credit(name):
    from gemkit.envs.reasoning_gym.items import item_at
    from gemkit.envs.reasoning_gym.scoring import reference_answer, reward

    dataset = gemkit.make(f"rg:{name}", size=SIZE).unwrapped.dataset
    for i in range(6):
        entry = item_at(dataset, i)
        ref, other = reference_answer(entry), reference_answer(item_at(dataset, i + 20))
        for hedge in (f"{ref} or {other}", f"{other} or {ref}", f"{ref}, {other}", f"{ref}\n{other}"):  # fmt: skip
            assert reward(dataset, hedge, entry, i, name, True)[0] <= 0.0, (i, hedge)


@needs_rg
def test_an_echo_of_the_question_earns_nothing_on_word_sorting():
    env = gemkit.make("rg:word_sorting", size=SIZE, partial_credit=True)
    for index in range(20):
        env.reset(options={"index": index})
        last = env.unwrapped.entry["question"].strip().splitlines()[-1]
        for echo in (last, last.rsplit(":", 1)[-1].strip()):
            env.reset(options={"index": index})
            assert env.step(f"<answer>{echo}</answer>")[1] <= 0.0


def near_miss(ref: str) -> str:
    """The reference with one small thing wrong: one more, a digit off, two words swapped."""
    if ref.lstrip("-").isdigit():
        return str(int(ref) + 1)
    if ", " in ref:
        words = ref.split(", ")
        words[0], words[1] = words[1], words[0]
        return ", ".join(words)
    return ref[:-1] + ("a" if ref[-1] != "a" else "b")


@needs_rg
@pytest.mark.parametrize("name", ["rectangle_count", "word_sorting", "spell_backward", "sudoku"])
def test_an_answer_close_to_this_items_own_still_earns_partial_credit(name):
    from gemkit.envs.reasoning_gym.items import item_at
    from gemkit.envs.reasoning_gym.scoring import reference_answer, reward

    dataset = gemkit.make(f"rg:{name}", size=SIZE).unwrapped.dataset
    paid = []
    for i in range(12):
        entry = item_at(dataset, i)
        answer = near_miss(reference_answer(entry))
        value, raw, _ = reward(dataset, answer, entry, i, name, True)
        assert value <= raw  # never more than the upstream score
        paid.append(value)
    assert sum(paid) / len(paid) > 0.1  # partial credit is still a signal, not zero


@needs_rg
def test_a_right_answer_still_earns_one_with_partial_credit():
    for name in ("time_intervals", "rectangle_count", "word_sorting", "products"):
        env = gemkit.make(f"rg:{name}", size=SIZE, partial_credit=True)
        env.reset(options={"index": 3})
        answer = env.unwrapped.entry["answer"]
        assert env.step(f"<answer>{answer}</answer>")[1] == 1.0


# -- toolworld ----------------------------------------------------------------------------------

TOOLWORLD = ["TripPlanning", "MeetingScheduling", "ShoppingBasket"]
MISSING = ["Funday", "", "Nowhere", "2024-02-30"]  # values that exist nowhere in a task


def toolworld_junk(record) -> dict[str, str]:
    """Answers that do no work: constants, echoes, the format's example, doubled plans, and
    the reference with values that do not exist (one slot, and every slot)."""
    ref = record.reference_answer
    out = {
        "empty": "",
        "[]": "[]",
        "{}": "{}",
        "a refusal": "I could not find a plan.",
        "the prompt": record.task.prompt,
        "the format's example": record.task.answer_format,
        "every part twice": json.dumps(ref + ref),
    }
    if isinstance(ref[0], str):
        for bad in MISSING:
            out[f"product {bad!r}"] = json.dumps([bad, *ref[1:]])
        return out
    for key, value in ref[0].items():
        bads = [99, -1, 25, 3] if type(value) is int else MISSING  # 3: an hour outside the day
        for bad in bads:
            out[f"{key}={bad!r} in one slot"] = json.dumps([{**ref[0], key: bad}, *ref[1:]])
            out[f"{key}={bad!r} in every slot"] = json.dumps([{**d, key: bad} for d in ref])
    return out


@pytest.mark.parametrize("category", TOOLWORLD)
def test_no_toolworld_junk_earns_partial_credit(category):
    totals: dict[str, list[float]] = {}
    for partial in (False, True):
        env = gemkit.make(f"toolworld:{category}-v0", partial_credit=partial)
        try:
            for index in range(len(env.unwrapped.records)):
                env.reset(options={"index": index})
                record = env.unwrapped.record
                for kind, answer in toolworld_junk(record).items():
                    env.reset(options={"index": index})
                    _, reward, terminated, _, info = env.step(answer)
                    assert terminated
                    totals.setdefault(kind, [0.0, 0.0])[partial] += reward
                env.reset(options={"index": index})
                assert env.step(json.dumps(record.reference_answer))[1] == 1.0
        finally:
            env.close()
    for kind, (off, on) in totals.items():
        assert on <= off, f"toolworld:{category}: {kind} earns {on:.2f} on, {off:.2f} off in all"


def test_a_schedule_that_breaks_one_rule_still_earns_partial_credit():
    env = gemkit.make("toolworld:MeetingScheduling-v0", partial_credit=True)
    paid = []
    for index in range(len(env.unwrapped.records)):
        env.reset(options={"index": index})
        ref = env.unwrapped.record.reference_answer
        clash = [ref[0], {**ref[1], "day": ref[0]["day"], "hour": ref[0]["hour"], "room": ref[0]["room"]}, *ref[2:]]  # fmt: skip
        _, reward, *_ = env.step(json.dumps(clash))  # two meetings in one room at once
        paid.append(reward)
    env.close()
    assert all(r < 1.0 for r in paid) and sum(r > 0 for r in paid) > len(paid) / 2
