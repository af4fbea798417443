"""`qa:Synth-v0`: a search agent's env over a synthesized set and its corpus."""

from __future__ import annotations

import pytest

import gemkit
from gemkit.envs.qa.synthesized import load_synth_records
from gemkit.errors import GemkitError
from gemkit.synth.qa.builtin_set import register_synth
from gemkit.synth.qa.run import RunConfig, read_records, run


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    register_synth()
    out = tmp_path_factory.mktemp("synth-env")
    run(out, RunConfig(n=2, world_size=400, seed=5, min_inject=2, min_fuzz=1), export=False)
    return out


def test_env_asks_a_synthesized_question_and_rewards_the_right_answer(run_dir):
    env = gemkit.make("qa:Synth-v0", path=str(run_dir))
    obs, info = env.reset(seed=0)
    record = next(r for r in read_records(run_dir) if r["id"] == info["id"])
    assert record["question"] in obs
    _, reward, terminated, _, step_info = env.step(f"\\boxed{{{record['answer']}}}")
    assert reward == 1.0 and terminated and step_info["success"]


def test_env_gives_the_agent_search_over_the_run_corpus(run_dir):
    env = gemkit.make("qa:Synth-v0", path=str(run_dir))
    env.reset(seed=0)
    record = read_records(run_dir)[0]
    fact = record["supporting_facts"][0]["text"]
    subject = fact.split(" was ")[0].split(" is ")[0]
    obs, reward, terminated, _, _ = env.step(f"<search>{subject}</search>")
    assert not terminated and reward == 0.0
    assert "1." in obs  # numbered search results


def test_f1_reward_gives_partial_credit(run_dir):
    env = gemkit.make("qa:Synth-v0", path=str(run_dir), reward="f1", tools=False)
    records = read_records(run_dir)
    index = next(i for i, r in enumerate(records) if len(r["answer"].split()) > 1)
    env.reset(options={"index": index})
    first_word = records[index]["answer"].split()[0]
    _, reward, *_ = env.step(f"\\boxed{{{first_word}}}")
    assert 0.0 < reward < 1.0
    # padding a part of the gold with another word earns nothing (the F1 precision rule)
    env.reset(options={"index": index})
    _, padded, *_ = env.step(f"\\boxed{{{first_word} Unrelated}}")
    assert padded == 0.0


def test_a_path_that_is_not_a_run_is_explained(tmp_path):
    with pytest.raises(GemkitError, match="not a synth QA run"):
        load_synth_records(tmp_path / "nothing")


def test_without_a_path_a_small_default_set_is_built_once_and_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("GEMKIT_CACHE_DIR", str(tmp_path))
    register_synth()
    env = gemkit.make("qa:Synth-v0", n=2, world_size=400, min_inject=1, min_fuzz=1)
    obs, _ = env.reset(seed=1)
    assert obs.strip()
    (folder,) = (tmp_path / "synth-qa").iterdir()
    size = (folder / "qa.jsonl").stat().st_size
    gemkit.make("qa:Synth-v0", n=2, world_size=400, min_inject=1, min_fuzz=1)
    assert (folder / "qa.jsonl").stat().st_size == size
