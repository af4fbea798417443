"""`qa:` envs: SQuAD-style exact match / F1 over aliases, and a corpus that holds the answers."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
from gymnasium.utils.env_checker import check_env

import gemkit
from gemkit.envs.math.records import RecordsError
from gemkit.envs.math.replies import read_reply
from gemkit.envs.qa.metrics import best_score, exact_match, f1_score, normalize_answer

QA_IDS = ["qa:Builtin-v0"]


@pytest.mark.parametrize(
    "pred, gold, em, f1",
    [
        ("Paris", "Paris", 1.0, 1.0),
        ("the Paris.", "paris", 1.0, 1.0),
        ("An  apple", "apple", 1.0, 1.0),
        ("Grey-Heron", "Grey Heron", 0.0, 0.0),  # punctuation is dropped, not split on
        ("Ysolde", "Ysolde Marrach", 0.0, 2 / 3),
        ("Marrach Ysolde", "Ysolde Marrach", 0.0, 1.0),  # F1 ignores order
        ("Ysolde Marrach Tewe", "Ysolde Marrach", 0.0, 0.8),  # 2 of 3 tokens are gold
        ("the city of Orlent", "Orlent", 0.0, 0.0),  # 1 of 3 tokens: padding earns nothing
        ("London", "Paris", 0.0, 0.0),
        ("", "Paris", 0.0, 0.0),
        ("A", "A", 1.0, 1.0),  # a multiple-choice letter keeps its article-like letter
        ("the", "a", 0.0, 0.0),  # SQuAD would empty both and call them equal
        ("Ｐａｒｉｓ", "Paris", 1.0, 1.0),  # fullwidth letters
        ("Zürich", "Zurich", 1.0, 1.0),  # accents
        ("2,306", "2306", 1.0, 1.0),
    ],
)
def test_exact_match_and_f1(pred, gold, em, f1):
    assert exact_match(pred, gold) == em
    assert f1_score(pred, gold) == pytest.approx(f1)


def test_normalisation_is_squad_style():
    assert normalize_answer("  The  Quick, brown FOX!  ") == "quick brown fox"
    assert normalize_answer("an atlas") == "atlas"
    assert normalize_answer("theatre") == "theatre"  # articles only as whole words


def test_best_score_takes_the_best_alias():
    golds = ["harbour master of Orlent", "harbour master"]
    assert best_score(exact_match, "Harbour master", golds) == 1.0
    assert best_score(f1_score, "master", golds) == pytest.approx(2 / 3)
    assert best_score(exact_match, "x", []) == 0.0


@pytest.mark.parametrize(
    "text, answers",
    [
        ("\\boxed{Orlent}", ["Orlent"]),
        ("<answer> Orlent </answer>", ["Orlent"]),
        ("<answer>Tamsk</answer> no wait \\boxed{Orlent}", ["Tamsk", "Orlent"]),
        ("\\boxed{Tamsk} no wait <ANSWER>Orlent</ANSWER>", ["Tamsk", "Orlent"]),
        ("<answer>\\boxed{Orlent}</answer>", ["Orlent"]),  # one answer, not two
        ("Orlent", []),
    ],
)
def test_a_reply_states_every_box_and_tag_in_order(text, answers):
    assert read_reply(text).answers == answers


def test_a_repeated_answer_counts_once_a_changed_one_scores_nothing():
    env = gemkit.make("qa:Builtin-v0")
    env.reset(options={"index": 2})
    obs, reward, _, _, info = env.step("<answer>Marrach</answer> so: \\boxed{marrach}")
    assert reward == 1.0 and info["success"]
    env.reset(options={"index": 2})
    obs, reward, _, _, info = env.step("<answer>Tewe</answer> no wait <answer>Marrach</answer>")
    assert (reward, info["success"], info["hedged"]) == (0.0, False, True)
    assert "different answers" in obs


@pytest.mark.parametrize("env_id", QA_IDS)
def test_passes_gymnasium_env_checker(env_id):
    env = gemkit.make(env_id)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env, skip_render_check=True)


def test_episode_with_an_alias_is_correct():
    env = gemkit.make("qa:Builtin-v0")
    obs, info = env.reset(options={"index": 2})
    assert obs.startswith("Who founded the city of Orlent?")
    obs, reward, terminated, truncated, info = env.step("It was <answer>Marrach</answer>")
    assert (reward, terminated, truncated, info["success"]) == (1.0, True, False, True)
    assert info["answer"] == "Ysolde Marrach" and "Marrach" in info["aliases"]


def test_f1_reward_gives_partial_credit_em_does_not():
    em_env = gemkit.make("qa:Builtin-v0")
    f1_env = gemkit.make("qa:Builtin-v0", reward="f1")
    for env in (em_env, f1_env):
        env.reset(options={"index": 2})
    assert em_env.step("\\boxed{Ysolde}")[1] == 0.0
    _, reward, _, _, info = f1_env.step("\\boxed{Ysolde}")
    assert reward == pytest.approx(2 / 3) and not info["success"] and info["em"] == 0.0


def test_unknown_reward_is_refused():
    with pytest.raises(ValueError, match="'em', 'f1'"):
        gemkit.make("qa:Builtin-v0", reward="bleu")


def test_missing_answer_explains_the_format():
    env = gemkit.make("qa:Builtin-v0")
    env.reset(seed=0)
    obs, reward, terminated, _, info = env.step("Orlent, I think")
    assert reward == 0.0 and terminated and info["invalid"]
    assert "\\boxed{}" in obs and "<answer>" in obs


def test_builtin_answers_are_in_the_corpus_not_common_knowledge():
    env = gemkit.make("qa:Builtin-v0")
    corpus = Path(env.unwrapped.corpus_path)
    docs = {d["id"]: d for d in map(json.loads, corpus.read_text().splitlines())}
    assert all({"id", "title", "text", "url"} <= set(d) for d in docs.values())
    records = env.unwrapped.records
    assert len(records) >= 40
    for r in records:
        support = " ".join(docs[i]["text"] for i in r["support"])
        assert normalize_answer(r["answer"]) in normalize_answer(support), r


def test_every_builtin_question_accepts_its_answer_and_aliases():
    env = gemkit.make("qa:Builtin-v0")
    for i, r in enumerate(env.unwrapped.records):
        for gold in [r["answer"], *r["aliases"]]:
            env.reset(options={"index": i})
            assert env.step(f"\\boxed{{{gold}}}")[1] == 1.0, (i, gold)


def test_jsonl_questions_with_renamed_fields_and_corpus(tmp_path):
    path = tmp_path / "q.jsonl"
    path.write_text(json.dumps({"q": "Capital of France?", "a": "Paris", "alt": ["Paris, France"]}))
    env = gemkit.make(
        "qa:Jsonl-v0",
        path=path,
        question_field="q",
        answer_field="a",
        aliases_field="alt",
        corpus=tmp_path / "corpus.jsonl",
    )
    assert env.reset(seed=0)[0].startswith("Capital of France?")
    assert env.step("\\boxed{paris france}")[1] == 1.0
    assert env.unwrapped.corpus_path == str(tmp_path / "corpus.jsonl")


def test_jsonl_without_path_is_explained():
    with pytest.raises(RecordsError, match="path="):
        gemkit.make("qa:Jsonl-v0")


def test_same_seed_same_question():
    assert gemkit.make("qa:Builtin-v0").reset(seed=9) == gemkit.make("qa:Builtin-v0").reset(seed=9)
