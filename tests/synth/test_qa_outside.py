"""`--corpus` + `--seeds` with a model: any corpus, any seed questions, the same record."""

from __future__ import annotations

import json
import re

import pytest

from gemkit.errors import GemkitError
from gemkit.synth.qa.outside import changed_span, read_seeds
from gemkit.synth.qa.run import RunConfig, read_records, run
from gemkit.testing import Reply, ScriptedOpenAIServer

DOCS = [
    {
        "id": "d1",
        "title": "Arlen Voss",
        "text": "Arlen Voss was born in Dravon. Arlen Voss founded the Kelvar Institute.",
    },
    {
        "id": "d2",
        "title": "Dravon",
        "text": "Dravon is a city in Mereth. Dravon was founded in 1402.",
    },
    {
        "id": "d3",
        "title": "Mereth Shipping",
        "text": "Mereth Shipping was founded in 1951 by Arlen Voss. Mereth Shipping is headquartered in Dravon.",
    },
]
SEED = {"question": "Which company did Arlen Voss found in 1951?", "answer": "Mereth Shipping"}
DESCRIBE = {"Arlen Voss": "a man born in Dravon", "Dravon": "a city in Mereth"}


def scripted_model(also_fits: bool = False, searches: int = 2):
    """A model that follows each TASK of the outside agent with fixed, sensible moves; it
    solves the question after `searches` searches."""

    def reply(body: dict):
        system, user = body["messages"][0]["content"], body["messages"][-1]["content"]
        task = re.match(r"TASK: (\w+)", system)[1]
        question = (re.search(r"^Question: (.*)$", user, re.M) or [None, user])[1]
        if task == "pick_entity":
            return json.dumps({"entity": next((e for e in DESCRIBE if e in question), "")})
        if task == "inject":
            entity = re.search(r"^Entity to replace: (.*)$", user, re.M)[1]
            return json.dumps({"fact": 1, "question": question.replace(entity, DESCRIBE[entity])})
        if task == "fuzz":
            year = re.search(r"\b1\d{3}\b", question)[0]
            after = f"the early {year[:3]}0s"
            return json.dumps(
                {"before": year, "after": after, "question": question.replace(year, after)}
            )
        if task == "follows":
            return json.dumps({"follows": True})
        if task == "fits":
            return json.dumps({"fits": also_fits})
        if task == "closed_book":
            return "Unknown Corp"
        if task == "solve":
            if sum(m["role"] == "tool" for m in body["messages"]) >= searches:
                return "Mereth Shipping"
            return Reply(
                tool_calls=[{"name": "search", "arguments": {"query": "Arlen Voss founded 1951"}}]
            )
        raise AssertionError(task)

    return reply


@pytest.fixture
def inputs(tmp_path):
    corpus = tmp_path / "corpus-in.jsonl"
    corpus.write_text("".join(json.dumps(d) + "\n" for d in DOCS))
    seeds = tmp_path / "seeds.jsonl"
    seeds.write_text(json.dumps(SEED) + "\n")
    return corpus, seeds


def config(srv, corpus, seeds, **kw):
    return RunConfig(
        n=1,
        corpus=str(corpus),
        seeds=str(seeds),
        llm_url=srv.base_url,
        model="m",
        min_inject=2,
        min_fuzz=1,
        max_items_factor=1,
        **kw,
    )


def test_an_outside_corpus_run_grows_and_verifies_a_seed_question(inputs, tmp_path):
    corpus, seeds = inputs
    with ScriptedOpenAIServer(scripted_model()) as srv:
        stats = run(tmp_path / "out", config(srv, corpus, seeds), export=False)
    (r,) = read_records(tmp_path / "out")
    assert stats.kept == 1
    assert (
        r["question"]
        == "Which company did a man born in a city in Mereth found in the early 1950s?"
    )
    assert r["seed"] == SEED and r["corpus"] == str(corpus)
    assert r["supporting_facts"] == [
        {"doc_id": "d1", "text": "Arlen Voss was born in Dravon."},
        {"doc_id": "d2", "text": "Dravon is a city in Mereth."},
    ]
    assert (r["n_inject"], r["n_fuzz"]) == (2, 1)
    injects = [(e["before"], e["after"]) for e in r["edits"] if e["op"] == "inject"]
    assert injects == [("Arlen Voss", "a man born in Dravon"), ("Dravon", "a city in Mereth")]
    v = r["verification"]
    assert v["quality"]["grounded"] == "2/2" and v["quality"]["answer_follows"]
    assert v["difficulty"]["closed_book_correct"] == 0 and v["difficulty"]["tool_solver_success"]
    assert v["difficulty"]["tool_calls"] == 2
    assert v["shortcut"] == {
        "passed": True,
        "hops": 2,
        "min_tool_calls": 2,
        "reason": "",
        "sub_question_candidates": None,
        "one_hop_candidates": None,
        "one_search_hit": None,
    }
    # no fact store outside the world: whether each clause does work is not known (None)
    assert v["uniqueness"] == {
        "passed": True,
        "candidates": 1,
        "checked": ["Unknown Corp"],
        "also_fit": [],
        "reason": "",
        "droppable": None,
        "vacuous_blurs": None,
    }
    assert (tmp_path / "out" / "corpus.jsonl").read_text() == corpus.read_text()


def test_a_wrong_answer_the_model_says_also_fits_makes_the_question_ambiguous(inputs, tmp_path):
    corpus, seeds = inputs
    with ScriptedOpenAIServer(scripted_model(also_fits=True)) as srv:
        stats = run(tmp_path / "out", config(srv, corpus, seeds), export=False)
    assert stats.kept == 0 and stats.rejected == {"uniqueness": 1}
    (rej,) = [json.loads(x) for x in (tmp_path / "out" / "rejected.jsonl").read_text().splitlines()]
    assert rej["reason"] == "'Unknown Corp' also fits"


def test_a_question_the_model_with_tools_solves_in_fewer_calls_than_hops_is_a_shortcut(
    inputs, tmp_path
):
    corpus, seeds = inputs
    with ScriptedOpenAIServer(scripted_model(searches=1)) as srv:
        stats = run(tmp_path / "out", config(srv, corpus, seeds), export=False)
    assert stats.kept == 0 and stats.rejected == {"shortcut": 1}
    (rej,) = [json.loads(x) for x in (tmp_path / "out" / "rejected.jsonl").read_text().splitlines()]
    assert rej["reason"] == "the model with search needed 1 call for 2 hops"


@pytest.mark.parametrize(
    "old, new, span",
    [
        (
            "Which company did Arlen Voss found?",
            "Which company did a man born in Dravon found?",
            "a man born in Dravon",
        ),
        ("Who was born in 1951?", "Who was born in the early 1950s?", "the early 1950s"),
    ],
)
def test_the_replacement_phrase_is_read_off_the_rewrite(old, new, span):
    assert changed_span(old, new) == span


def test_seed_files_are_checked_line_by_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "Who?", "answer": "X"}\n{"q": 1}\n')
    with pytest.raises(
        GemkitError, match="line 2: expected a JSON object with 'question' and 'answer'"
    ):
        read_seeds(bad)
