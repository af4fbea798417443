"""A QA env over a synthesized question set: a `gemkit synth qa` run folder, or its qa.jsonl.

The env is a `QAEnv` over the run's records (answer + aliases, exact match or F1) wrapped
with the `search` and `access` tools over the run's own corpus, so the facts a question
needs are one search away and nowhere else. Records are `gemkit.records.qa.QARecord`s;
`qa:Synth-v0`, which plays the default set, is registered by `gemkit.synth.qa.builtin_set`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from gemkit.errors import GemkitError
from gemkit.records.base import RecordError, per_file
from gemkit.records.qa import QARecord
from gemkit.records.splits import SPLITS, TEST_FRACTION, answer_split, first_of_each
from gemkit.runstore import read_lines


def load_synth_records(path: str | os.PathLike[str]) -> tuple[list[dict[str, Any]], Path | None]:
    """Records of a run folder or qa.jsonl file as `{id, question, answer, aliases}`, and its corpus.

    Each line is checked against `QARecord`; a line of another kind or schema version is an
    error naming the file and line. A torn last line (a run still writing) is skipped. Each
    version of the file is read once per process (the records are shared, read-only).
    """
    path = Path(path).expanduser()
    qa = path / "qa.jsonl" if path.is_dir() else path
    if not qa.is_file():
        raise GemkitError(
            f"{str(path)!r} is not a synth QA run: expected a folder made by `gemkit synth qa "
            "--out DIR` (holding qa.jsonl and corpus.jsonl) or a qa.jsonl file"
        )
    records = per_file(qa, _read_questions)
    corpus = qa.parent / "corpus.jsonl"
    return records, corpus if corpus.is_file() else None


def _read_questions(qa: Path) -> list[dict[str, Any]]:
    try:
        parsed = [QARecord.parse(raw, f"{qa}, line {n}") for n, raw in read_lines(qa)]
    except RecordError as e:
        raise GemkitError(str(e)) from None
    return [
        {"id": r.id, "question": r.question, "answer": r.answer, "aliases": r.answer_aliases}
        for r in parsed
    ]


def split_records(
    records: list[dict[str, Any]], split: str | None, test_fraction: float = TEST_FRACTION
) -> list[dict[str, Any]]:
    """The records of one side of the answer-disjoint split the `datasets` export writes
    (`gemkit.records.splits`): one per normalised question, every answer on one side only.
    `split=None` keeps every record."""
    if split is None:
        return records
    if split not in SPLITS:
        raise GemkitError(
            f"split must be one of {', '.join(SPLITS)} (or None for all), got {split!r}"
        )
    unique = first_of_each(records, key=lambda r: r["question"])
    kept = [r for r in unique if answer_split(r["answer"], test_fraction) == split]
    if not kept:
        raise GemkitError(
            f"the {split} split of this set is empty ({len(unique)} records); "
            "synthesize more records or pass split=None"
        )
    return kept


def synthesized_env(
    path: str | os.PathLike[str],
    *,
    corpus: str | os.PathLike[str] | None = None,
    reward: str = "f1",
    tools: bool = True,
    topk: int = 3,
    max_tool_uses: int = 20,
    split: str | None = None,
    test_fraction: float = TEST_FRACTION,
) -> Any:
    """A QA env over the records at `path` (all, or one side of the answer-disjoint split:
    `split="train"` / `"test"`, as the run's `datasets` export made with the same
    `test_fraction` holds them), with search/access over their corpus."""
    from gemkit.envs.qa.env import QAEnv

    records, found = load_synth_records(path)
    records = split_records(records, split, test_fraction)
    corpus = corpus or found
    env = QAEnv(records, reward=reward, corpus_path=corpus)
    if not tools:
        return env
    if corpus is None:
        raise GemkitError(
            f"no corpus.jsonl next to {path}; pass corpus='docs.jsonl' or tools=False"
        )
    from gemkit.tools.search import search_tools
    from gemkit.tools.wrapper import ToolEnvWrapper

    return ToolEnvWrapper(env, search_tools(corpus, topk=topk), max_tool_uses=max_tool_uses)
