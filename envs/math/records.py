"""Question records from a JSONL file or a `datasets` folder, and the read-only set that holds them.

Shared by the text task families (`math:`, `qa:`): each record is a dict with at least a question
and an answer field, whose names are configurable.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from gemkit.errors import GemkitError


class RecordsError(GemkitError, ValueError):
    """A record file or folder that cannot be read as questions and answers."""


class RecordSet(Sequence[dict[str, Any]]):
    """An immutable list of records, shared (never copied) when an env is cloned."""

    def __init__(self, records: Sequence[dict[str, Any]], source: str = ""):
        if not records:
            raise RecordsError(f"no records in {source or 'the given list'}; expected at least one")
        self._records = tuple(records)
        self.source = source

    def __len__(self) -> int:
        return len(self._records)

    def __getitem__(self, index: Any) -> Any:
        return self._records[index]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self._records)

    def __deepcopy__(self, memo: dict[int, Any]) -> RecordSet:
        # records are read-only, so clones (GRPO groups, tree search) share one copy
        return self

    def __repr__(self) -> str:
        return f"RecordSet({len(self)} records from {self.source or 'memory'})"


def read_jsonl(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Read a JSONL file of objects; a bad line raises `RecordsError` naming the line."""
    records = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise RecordsError(f"{path}, line {n}: not valid JSON ({e.msg})") from None
            if not isinstance(obj, dict):
                raise RecordsError(
                    f"{path}, line {n}: expected a JSON object per line, got {type(obj).__name__}"
                )
            records.append(obj)
    return records


def _read_saved_dataset(path: Path, split: str | None) -> list[dict[str, Any]]:
    try:
        import datasets
    except ImportError:  # pragma: no cover - datasets is a core dependency
        raise RecordsError(
            f"{path} is a folder: reading it needs the `datasets` package (pip install datasets)"
        ) from None
    try:
        data = datasets.load_from_disk(str(path))
    except FileNotFoundError as e:
        raise RecordsError(
            f"{path} is a folder but not a dataset saved with `save_to_disk` ({e}); "
            "pass a .jsonl file or such a folder"
        ) from None
    if isinstance(data, datasets.DatasetDict):
        splits = list(data)
        if split is None:
            if len(splits) != 1 and "train" not in splits:
                raise RecordsError(f"{path} holds splits {splits}; choose one with split=")
            split = "train" if "train" in splits else splits[0]
        if split not in data:
            raise RecordsError(f"{path} has no split {split!r}; it holds {splits}")
        data = data[split]
    return [dict(r) for r in data]


def load_records(
    path: str | os.PathLike[str],
    *,
    fields: dict[str, str],
    split: str | None = None,
) -> RecordSet:
    """Load records from a JSONL file or a `save_to_disk` folder, renaming fields.

    `fields` maps the name the env uses to the name in the data, e.g.
    `{"question": "problem", "answer": "solution"}`; every mapped field must be present.
    """
    p = Path(path).expanduser()
    if not p.exists():
        raise RecordsError(f"{p} does not exist; expected a .jsonl file or a `save_to_disk` folder")
    raw = _read_saved_dataset(p, split) if p.is_dir() else read_jsonl(p)
    out = []
    for n, rec in enumerate(raw, 1):
        missing = [src for src in fields.values() if rec.get(src) is None]
        if missing:
            raise RecordsError(
                f"{p}, record {n}: missing field(s) {missing}; it has {sorted(rec)}. "
                "Name the fields with question_field=/answer_field=."
            )
        renamed = {k: v for k, v in rec.items() if k not in fields.values()}
        renamed.update({dst: rec[src] for dst, src in fields.items()})
        out.append(renamed)
    return RecordSet(out, source=str(p))
