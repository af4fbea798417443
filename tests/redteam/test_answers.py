"""Attacks on the answer verifiers of the `qa:` and `math:` envs: junk, hedges, forged forms.

A policy that wants the reward without the answer tries empty or junk answers, answers that
name several candidates and let the grader pick, several boxes or tags, a box followed by
another "final answer", Unicode look-alikes, and inputs that make a symbolic checker hang.
Each one must score 0 with the real graders (math-verify and sympy), while the legitimate
equivalent forms in the tables below keep scoring 1.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time

import pytest

import gemkit
from gemkit.envs.math import grading
from gemkit.envs.math.grading import grade, math_verify_available
from gemkit.envs.math.records import RecordsError
from gemkit.envs.qa.metrics import best_score, exact_match, f1_score

BACKENDS = ["none", "sympy", "auto"] + (["math_verify"] if math_verify_available() else [])


def qa_env(tmp_path, records, **kwargs):
    path = tmp_path / "qa.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return gemkit.make("qa:Jsonl-v0", path=path, **kwargs)


def math_env(tmp_path, answer, **kwargs):
    path = tmp_path / "math.jsonl"
    path.write_text(json.dumps({"question": "q?", "answer": answer}) + "\n")
    return gemkit.make("math:Jsonl-v0", path=path, **kwargs)


def play(env, reply):
    env.reset(options={"index": 0})
    _, reward, _, _, info = env.step(reply)
    return reward, info


# -- qa: golds that SQuAD normalisation empties ---------------------------------------------

EMPTYING_GOLDS = ["A", "The", "an", "a"]
JUNK = ["", " ", "the", "a", "an", "The A", "...", "?!", "\u200b", "(", "-"]


@pytest.mark.parametrize("gold", EMPTYING_GOLDS)
@pytest.mark.parametrize("junk", JUNK)
def test_junk_never_matches_a_gold_that_normalises_to_nothing(gold, junk):
    if junk.strip().casefold() == gold.casefold():
        pytest.skip("the junk is this gold itself")
    assert exact_match(junk, gold) == 0.0
    assert f1_score(junk, gold) == 0.0


@pytest.mark.parametrize("reward", ["em", "f1"])
def test_a_multiple_choice_letter_is_scored_on_the_letter(tmp_path, reward):
    env = qa_env(tmp_path, [{"question": "Pick A, B, C or D.", "answer": "A"}], reward=reward)
    for junk in ["\\boxed{the}", "<answer>an</answer>", "\\boxed{.}", "\\boxed{B}"]:
        assert play(env, junk)[0] == 0.0, junk
    for right in ["\\boxed{A}", "<answer>(a)</answer>", "\\boxed{A.}"]:
        assert play(env, right)[0] == 1.0, right


@pytest.mark.parametrize("gold", ["...", "?", "—", "  "])
def test_a_gold_with_no_letter_or_digit_is_refused_at_load(tmp_path, gold):
    with pytest.raises(RecordsError, match="record 1: .*no letter or digit"):
        qa_env(tmp_path, [{"question": "q", "answer": gold}])
    with pytest.raises(RecordsError, match="record 1: .*no letter or digit"):
        qa_env(tmp_path, [{"question": "q", "answer": "Paris", "aliases": [gold]}])


# -- qa: candidates, hedges, padding --------------------------------------------------------

QA_HEDGES = [
    ("Paris or Lyon", "Paris"),
    ("Paris, Lyon", "Paris"),
    ("Paris/Lyon", "Paris"),
    ("Paris; Lyon", "Paris"),
    ("Paris | Lyon", "Paris"),
    ("Paris & Lyon", "Paris"),
    ("Paris\nLyon", "Paris"),
    ("either Paris", "Paris"),
    ("not Paris", "Paris"),
    ("maybe Paris", "Paris"),
    ("Paris ｏｒ Lyon", "Paris"),  # fullwidth "or"
    ("Paris\u200b,\u200bLyon", "Paris"),  # zero-width spaces around the comma
    ("Ysolde Marrach or Tewe", "Ysolde Marrach"),
    ("Ysolde Marrach, Brannoc Tewe", "Ysolde Marrach"),
]
QA_LISTS = [
    ("A B C D", "A"),
    ("Paris London Rome", "Paris"),
    ("Paris London", "Paris"),
    ("the answer is probably the city of Paris in France", "Paris"),
    ("Orlent " * 50 + "Paris", "Paris"),
]


@pytest.mark.parametrize("pred, gold", QA_HEDGES + QA_LISTS)
def test_hedges_and_candidate_lists_earn_no_f1_and_no_em(pred, gold):
    assert exact_match(pred, gold) == 0.0
    assert f1_score(pred, gold) == 0.0


def test_listing_candidates_never_beats_a_guess():
    # plain F1 pays 2/(k+1) for k listed one-token candidates, a guess expects 1/k
    options = ["Paris", "Lyon", "Nice", "Lille"]
    for k in range(2, 5):
        listed = " ".join(options[:k])
        assert best_score(f1_score, listed, ["Paris"]) == 0.0


@pytest.mark.parametrize(
    "reply",
    [
        "<answer>Tewe</answer> <answer>Marrach</answer>",
        "\\boxed{Tewe} then <answer>Marrach</answer>",
        "<answer>\\boxed{Tewe}\\boxed{Marrach}</answer>",
        "<answer>Marrach</answer> My final answer: Tewe.",
        "<answer>Marrach</answer>" * 9,  # past the cap on answers in one reply
        "<answer>Marrach</answer> <answer></answer>",
    ],
)
@pytest.mark.parametrize("reward", ["em", "f1"])
def test_several_different_answers_in_one_reply_score_nothing(reply, reward):
    env = gemkit.make("qa:Builtin-v0", reward=reward)
    env.reset(options={"index": 2})  # Ysolde Marrach, alias Marrach
    obs, reward_, terminated, _, info = env.step(reply)
    assert (reward_, terminated, info["success"]) == (0.0, True, False)
    assert info.get("hedged") or info.get("invalid")
    assert "Marrach" not in obs  # the message never gives the gold away


QA_LEGIT = [
    ("Marrach", 2),
    ("ysolde marrach", 2),
    ("Ysolde Marrach.", 2),
    ("<answer>Marrach</answer> so \\boxed{Marrach}", 2),
    ("Ｍａｒｒａｃｈ", 2),  # fullwidth
    ("Mar\u200brach", 2),  # a zero-width space inside
    ("Márrach", 2),  # an accent
    ("2,306", 4),
    ("2306 m", 4),
    ("green and white", 27),
]


@pytest.mark.parametrize("answer, index", QA_LEGIT)
def test_legitimate_forms_of_the_answer_still_score(answer, index):
    env = gemkit.make("qa:Builtin-v0")
    env.reset(options={"index": index})
    reply = answer if "<answer>" in answer else f"<answer>{answer}</answer>"
    assert env.step(reply)[1] == 1.0, (answer, env.unwrapped.golds())


def test_homoglyph_answers_are_a_different_answer():
    # Cyrillic Р and а look like Latin P and a: never folded into them, so never a match
    assert exact_match("\u0420\u0430ris", "Paris") == 0.0


# -- math: hedges between candidates --------------------------------------------------------

MATH_HEDGES = [
    "19 \\lor 20",
    "19 \\vee 20",
    "19 \\text{ or } 20",
    "19 \\textbf{ or } 20",
    "19 or 20",
    "\\text{19 or 20}",
    "19, 20",
    "19,20",
    "19; 20",
    "\\{19, 20\\}",
    "x \\in \\{19,20\\}",
    "19 = 20",
    "20 = 19",
    "x = 19 = 20",
    "x = 19 \\text{ or } x = 20",
    "x = 19 \\lor x = 20",
    "x=19, x=20",
    "19 \\pm 1",
    "20 \\mp 1",
    "[19, 20]",
    "(19, 20)",
    "19 \\le x \\le 20",
    "18 < x < 21",
    "x \\ge 19",
    "x > 18",
    "19 \\neq 20",
    "19 \\ne 20",
    "19 \\approx 20",
    "19 \\sim 20",
    "\\text{either } 19 \\text{ or } 20",
    "\\text{either } 19",
    "\\text{either } 20",
    "19 (or maybe 20)",
    "19 \\text{ (or maybe 20)}",
    "20 \\text{ (or maybe 19)}",
    "19 \\text{(20)}",
    "19 \\\\ 20",
    "20 \\\\ 19",
    "19 \\land 20",
    "19 \\to 20",
    "19 \\implies 20",
    "19 \\mid 20",
    "19 | 20",
    "\\{19\\} \\cup \\{20\\}",
    "19 \\ldots 20",
    "19 \\text{ and } 20",
    "\\boxed{19} \\boxed{20}",
    "19 \\boxed{20}",
    "\\fbox{19} 20",
    "\\color{red}{19} 20",
    "\\cancel{19} 20",
    "\\tag{19} 20",
    "\\begin{cases} 19 \\\\ 20 \\end{cases}",
    "\\substack{19 \\\\ 20}",
    "\\operatorname{either}(19, 20)",
    "\\text{about } 19",
    "19 \\text{ approximately}",
    "19 \\text{ probably}",
    "\\neg 19",
    "\\text{not } 20",
    "19?",
    "20 \\bmod 19",
    "19_{20}",
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("pred", MATH_HEDGES)
def test_a_hedge_between_candidates_is_wrong_for_either(pred, backend):
    assert not grade(pred, "19", backend=backend)
    assert not grade(pred, "20", backend=backend)


def test_a_hedge_in_the_env_scores_zero(tmp_path):
    for gold in ("19", "20"):
        env = math_env(tmp_path, gold)
        for hedge in ["19 \\lor 20", "19 = 20", "19 \\text{ or } 20", "19, 20", "19 \\pm 1"]:
            reward, info = play(env, f"\\boxed{{{hedge}}}")
            assert (reward, info["success"]) == (0.0, False), hedge


@pytest.mark.parametrize(
    "reply",
    [
        "\\boxed{20} no, \\boxed{19}",
        "\\boxed{19} or \\boxed{20}",
        "\\boxed{19}\\boxed{20}\\boxed{19}",
        "\\boxed{19} ... so the final answer is 20.",
        "\\boxed{19}. Final answer: $20$",
        "\\boxed{19} final answer 20",
        "\\boxed{19}" * 9,  # past the cap on boxes in one reply
        "\\boxed{\\boxed{19}}",
    ],
)
def test_several_different_boxes_or_a_later_final_answer_score_zero(tmp_path, reply):
    for gold in ("19", "20"):
        reward, info = play(math_env(tmp_path, gold), reply)
        assert (reward, info["success"]) == (0.0, False), gold


@pytest.mark.parametrize(
    "reply",
    [
        "\\boxed{19}",
        "First \\boxed{19}, and again \\boxed{19.0}.",
        "\\boxed{x = 19} so \\boxed{19}",
        "\\boxed{19}. The final answer is $19$.",
        "\\boxed{19} is my final answer, I am sure.",
    ],
)
def test_a_repeated_answer_or_a_closing_sentence_still_scores(tmp_path, reply):
    assert play(math_env(tmp_path, "19"), reply)[0] == 1.0


# -- math: legitimate equivalent forms keep scoring -----------------------------------------

MATH_LEGIT = [
    ("19", "19"),
    ("x = 19", "19"),
    ("x_1 = 19", "19"),
    ("\\text{Area} = 19", "19"),
    ("19.0", "19"),
    ("19.00", "19"),
    ("\\frac{38}{2}", "19"),
    ("19\\%", "19"),
    ("19", "19\\%"),
    ("19 \\text{ cm}", "19"),
    ("19 \\text{ in}", "19"),
    ("\\$19", "19"),
    ("19^\\circ", "19"),
    ("1,000", "1000"),
    ("1,000 \\text{ dollars}", "1000"),
    ("1{,}000", "1000"),
    ("\\$1,000.50", "1000.5"),
    ("2 + 17 = 19", "19"),
    ("x = 2 + 17 = 19", "19"),
    ("\u221219", "-19"),  # the Unicode minus sign
    ("１９", "19"),  # fullwidth digits
    ("19\u200b", "19"),
    ("|-19|", "19"),
    ("\\sqrt[3]{6859}", "19"),
    ("1.9 \\times 10^1", "19"),
    ("\\{1, 2\\}", "\\{2, 1\\}"),
    ("(1, 2)", "(1,2)"),
    ("x = 3, y = 4", "(3, 4)"),
    ("[19, 20]", "[19,20]"),
    ("(19, 20]", "(19,20]"),
    ("x \\in [1, 2]", "[1,2]"),
    ("x \\in (3, \\infty)", "(3,\\infty)"),
    ("(-\\infty, 1) \\cup (2, \\infty)", "(-\\infty,1)\\cup(2,\\infty)"),
    ("-2, 2", "\\pm 2"),
    ("x = \\pm 2", "\\pm 2"),
    ("x > 3", "x > 3"),
    ("3 < x", "x > 3"),
    ("x = 1 \\text{ or } x = 2", "x = 1 \\text{ or } x = 2"),
    ("x^2 - 2x - 15", "(x-5)(x+3)"),
    ("y = 4x + 1", "4x + 1"),
    ("f(x) = x^2", "x^2"),
    ("7\\sqrt{2}", "\\sqrt{98}"),
    ("25\\pi", "25 \\pi"),
    ("\\dfrac{3}{8}", "0.375"),
    ("\\binom{5}{2}", "10"),
    ("5!", "120"),
    ("\\theta = \\frac{\\pi}{2}", "\\frac{\\pi}{2}"),
]


@pytest.mark.skipif(not math_verify_available(), reason="math-verify is an optional extra")
@pytest.mark.parametrize("pred, gold", MATH_LEGIT)
def test_legitimate_equivalent_forms_still_grade_correct(pred, gold):
    assert grade(pred, gold, backend="auto"), (pred, gold)


def test_every_builtin_and_arithmetic_answer_survives_the_hedge_rules():
    for env_id, n in [("math:Builtin-v0", 65), ("math:Arithmetic-v0-hard", 200)]:
        env = gemkit.make(env_id)
        for i in range(n):
            env.reset(options={"index": i})
            gold = env.unwrapped.problem["answer"]
            for reply in (f"\\boxed{{{gold}}}", f"\\boxed{{x = {gold}}}", f"$\\boxed{{{gold}}}$"):
                env.reset(options={"index": i})
                assert env.step(reply)[1] == 1.0, (env_id, i, reply)
            env.reset(options={"index": i})
            assert env.step(f"\\boxed{{{gold} \\text{{ or }} 7}}")[1] == 0.0, (env_id, i)


# -- math: junk that a checker might call equal to anything ---------------------------------

MATH_JUNK = [
    "\\text{}",
    "\\text{ }",
    "$$",
    ".",
    "\\,",
    "\\quad",
    "\\phantom{19}",
    "\\mathrm{}",
    "\\boxed{}",
    "nan",
    "\\text{nan}",
    "0/0",
    "\\frac{0}{0}",
    "1/0",
    "\\infty - \\infty",
    "\\text{undefined}",
    "\\text{any}",
    "\\text{all real numbers}",
    "\\text{the answer}",
    "\\text{correct}",
    "?",
    "\\ldots",
]
GOLDS = ["19", "0", "-3", "\\frac{3}{8}", "2.25", "x^2 - 2x - 15", "7\\sqrt{2}", "(1, 2)"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("junk", MATH_JUNK)
def test_junk_matches_no_gold(junk, backend):
    assert not [g for g in GOLDS if grade(junk, g, backend=backend)]


@pytest.mark.parametrize("gold", ["", "$$", "\\text{}", " . "])
def test_a_gold_that_normalises_to_nothing_is_refused_and_never_matched(tmp_path, gold):
    assert not grade("\\text{ }", gold) and not grade("$ $", gold)
    if gold.strip():
        with pytest.raises(RecordsError, match="record 1: the answer .* is empty"):
            math_env(tmp_path, gold)


@pytest.mark.parametrize("backend", ["sympy", "auto"])
def test_an_interval_is_not_the_tuple_with_the_same_ends(backend):
    assert not grade("(1, 2)", "[1, 2]", backend=backend)
    assert not grade("[1, 2]", "(1, 2)", backend=backend)


# -- math: checks that run long -------------------------------------------------------------

SLOW = ["(a+b+c+d+e)^{20}", "((x+y+z)^{6}+w)^{6}", "(x+y+z)^{3 \\cdot 33}", "(20!)!", "10^{99!}"]


@pytest.mark.parametrize("pred", SLOW)
def test_inputs_that_expand_for_minutes_never_reach_a_checker(pred):
    assert grading.grading_plan(pred, "x + 1") is False


def test_a_symbolic_check_in_astep_leaves_the_event_loop_running(tmp_path, monkeypatch):
    # a slow input the guards let through (as if they missed one): the env's astep must wait
    # for it in a thread, so other coroutines run meanwhile, and the late check scores 0
    monkeypatch.setattr(grading, "SYMBOLIC_TIMEOUT_S", 1.0)
    monkeypatch.setattr(grading, "MAX_EXPANSION_TERMS", 10**9)
    env = math_env(tmp_path, "x^2 + 2x + 1")

    async def run(reply: str) -> tuple[float, int]:
        ticks = 0
        stop = False

        async def tick() -> None:
            nonlocal ticks
            while not stop:
                ticks += 1
                await asyncio.sleep(0)

        ticker = asyncio.ensure_future(tick())
        await asyncio.sleep(0)
        before = ticks
        env.reset(options={"index": 0})
        reward = (await env.astep(reply))[1]
        stop = True
        await ticker
        return reward, ticks - before

    assert asyncio.run(run("\\boxed{(x+1)^2}"))[0] == 1.0  # symbolic, off the loop
    reward, ticks = asyncio.run(run("\\boxed{(a+b+c+d+e)^{20}}"))
    assert reward == 0.0 and ticks > 0


def test_a_check_that_answers_after_its_limit_never_passes(monkeypatch):
    # fault injection: a checker that swallows the interrupt and then says "equal"
    def stubborn(pred, gold, backend):
        try:
            time.sleep(5)
        except BaseException:
            pass
        return True

    monkeypatch.setattr(grading, "SYMBOLIC_TIMEOUT_S", 0.3)
    monkeypatch.setattr(grading, "_symbolic_equal", stubborn)
    assert not grading.symbolic_equal("(x+1)^2", "x^2+2x+1")


def test_the_helper_process_cannot_be_answered_by_printed_text():
    # a checker that prints what looks like a verdict: only the reply channel counts
    code = (
        "from gemkit.envs.math import grading as g\n"
        "g._load_checkers = lambda: None\n"
        "g._symbolic_equal = lambda p, q, b: print('1 true', flush=True) or False\n"
        "g.serve()\n"
    )
    request = json.dumps({"id": 1, "pred": "1", "gold": "2", "backend": "auto"}) + "\n"
    out = subprocess.run(
        [sys.executable, "-c", code], input=request, capture_output=True, text=True, timeout=300
    )
    assert out.stdout.splitlines() == ["ready", "1 false"]
    assert "1 true" in out.stderr


def test_arithmetic_env_refuses_hedges_and_several_boxes():
    env = gemkit.make("math:Arithmetic-v0-easy")
    for i in range(100):
        env.reset(options={"index": i})
        gold = int(env.unwrapped.problem["answer"])
        for reply in (
            f"\\boxed{{{gold} \\lor {gold + 1}}}",
            f"\\boxed{{{gold - 1}, {gold}, {gold + 1}}}",
            f"\\boxed{{{gold} \\pm 1}}",
            f"\\boxed{{{gold + 1}}} \\boxed{{{gold}}}",
            f"\\boxed{{{gold}}} final answer: {gold + 1}",
        ):
            env.reset(options={"index": i})
            assert env.step(reply)[1] == 0.0, (i, reply)


def test_megabytes_of_padding_that_normalisation_drops_do_not_make_the_gold():
    # `\,` and punctuation vanish in normalisation: a huge reply would equal the gold after
    # seconds of work; an answer ten times longer than the gold (plus 200) is wrong at once
    assert not grade("19" + "\\," * 500_000, "19")
    assert exact_match("Paris" + "." * 1_000_000, "Paris") == 0.0
    assert f1_score("Paris" + "!" * 1_000_000, "Paris") == 0.0
    env = gemkit.make("math:Builtin-v0")
    env.reset(options={"index": 0})
    assert env.step("\\boxed{26" + "\\," * 500_000 + "}")[1] == 0.0
