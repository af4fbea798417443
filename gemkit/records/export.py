"""The Hugging Face `datasets` form of a record model: features, rows, and back.

The features follow the model field by field: text, numbers and flags become typed columns,
lists become lists, nested parts become structs, so a dataset row holds what the JSONL line
holds, in the same shape. Only fields typed `Json` (free-form: a recursive logical form, a
category's spec, an env's info) are JSON text, since Arrow needs one type per column.
"""

from __future__ import annotations

import json
import types
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar, Union

from pydantic import BaseModel

from gemkit.records.base import JsonText, Record

R = TypeVar("R", bound=Record)

_SCALARS = {str: "string", int: "int64", float: "float64", bool: "bool"}


def _is_json(annotation: Any, metadata: Iterable[Any]) -> bool:
    if any(isinstance(m, JsonText) for m in metadata):
        return True
    if typing.get_origin(annotation) is typing.Annotated:
        return any(isinstance(m, JsonText) for m in typing.get_args(annotation)[1:])
    return False


def _strip_optional(annotation: Any) -> Any:
    if typing.get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0]
        raise TypeError(f"a record field may be one type or None, not {annotation}")
    return annotation


def _feature(annotation: Any, metadata: Iterable[Any] = ()) -> Any:
    import datasets

    listing = getattr(datasets, "List", None) or datasets.Sequence
    if _is_json(annotation, metadata):
        return datasets.Value("string")
    annotation = _strip_optional(annotation)
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return datasets.Value("string")
    if origin is list:
        (item,) = typing.get_args(annotation)
        return listing(_feature(item))
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return features_of(annotation)
    if annotation in _SCALARS:
        return datasets.Value(_SCALARS[annotation])
    raise TypeError(f"no datasets feature for a field of type {annotation!r}")


def features_of(model: type[BaseModel]) -> dict[str, Any]:
    """The struct of a model: field name -> feature."""
    return {
        name: _feature(field.annotation, field.metadata)
        for name, field in model.model_fields.items()
    }


def features(model: type[Record]) -> Any:
    """The `datasets.Features` of a record model: its fields, then its attachments (binary
    columns a dataset carries beside the record, such as a task's database)."""
    import datasets

    attached = {name: datasets.Value("binary") for name in model.ATTACHMENTS}
    return datasets.Features({**features_of(model), **attached})


def _json_fields(model: type[BaseModel]) -> dict[str, Any]:
    """Per field: True (JSON text), a nested dict of the same (a part or a list of parts)."""
    out: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        if _is_json(field.annotation, field.metadata):
            out[name] = True
            continue
        inner = _strip_optional(field.annotation)
        if typing.get_origin(inner) is list:
            inner = _strip_optional(typing.get_args(inner)[0])
        if isinstance(inner, type) and issubclass(inner, BaseModel):
            nested = _json_fields(inner)
            if nested:
                out[name] = nested
    return out


def _convert(value: Any, plan: dict[str, Any], leaf: Callable[[Any], Any]) -> Any:
    """`value` with `leaf` applied to each field the plan marks as JSON text (`True`)."""
    if isinstance(value, list):
        return [_convert(v, plan, leaf) for v in value]
    if not isinstance(value, dict):
        return value
    out = dict(value)
    for name, sub in plan.items():
        if name not in out:
            continue
        if sub is True:
            out[name] = leaf(out[name])
        elif out[name] is not None:
            out[name] = _convert(out[name], sub, leaf)
    return out


def _encode(value: Any, plan: dict[str, Any]) -> Any:
    return _convert(value, plan, lambda v: json.dumps(v, ensure_ascii=False))


def _decode(value: Any, plan: dict[str, Any]) -> Any:
    return _convert(value, plan, _loads)


def _loads(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except ValueError:  # not JSON text: a column of another writer, kept as it is
        return value


def decode_json_fields(model: type[BaseModel], row: Any) -> dict[str, Any]:
    """A dataset row with the model's JSON-text fields decoded and its attachments left out
    (the record's JSONL shape)."""
    attached = set(getattr(model, "ATTACHMENTS", ()))
    return _decode({k: v for k, v in dict(row).items() if k not in attached}, _json_fields(model))


def to_row(record: Record) -> dict[str, Any]:
    """One dataset row of a record (its `Json` fields as JSON text; every field a column, those
    a record leaves out of its JSON line as None)."""
    row = record.to_json()
    for name in type(record).model_fields:
        row.setdefault(name, None)
    return _encode(row, _json_fields(type(record)))


def from_row(model: type[R], row: dict[str, Any], where: str = "") -> R:
    """The record of a dataset row written by `save_dataset`."""
    return model.parse(decode_json_fields(model, row), where)


def as_dataset(
    records: Iterable[Record],
    model: type[Record],
    attachments: Mapping[str, Sequence[bytes | None]] | None = None,
) -> Any:
    """The records as an in-memory `datasets.Dataset`, with the model's features; each of
    the model's `ATTACHMENTS` columns holds `attachments[name]` (one value per record)."""
    import datasets

    rows = [to_row(r) for r in records]
    datasets.disable_progress_bars()  # the CLI shows its own progress; a library stays quiet
    schema = features(model)
    attached = dict(attachments or {})
    # from_list([]) builds a table with no columns, which then disagrees with the features
    columns = {
        name: list(attached.get(name) or [None] * len(rows))
        if name in model.ATTACHMENTS
        else [row[name] for row in rows]
        for name in schema
    }
    return datasets.Dataset.from_dict(columns, features=schema)


def save_dataset(
    records: Iterable[Record],
    model: type[Record],
    path: str | Path,
    attachments: Mapping[str, Sequence[bytes | None]] | None = None,
) -> Path:
    """Save records as a `datasets` folder at `path`, with the model's features (and its
    attachment columns, `as_dataset`)."""
    dataset = as_dataset(records, model, attachments)
    # no records make no shard unless one is asked for (load_from_disk then fails)
    dataset.save_to_disk(str(path), num_shards=None if dataset.num_rows else 1)
    return Path(path)


def save_splits(
    splits: Mapping[str, Iterable[Record]], model: type[Record], path: str | Path
) -> Path:
    """Save named splits of records as one `datasets.DatasetDict` folder at `path`."""
    import datasets

    parts = {name: as_dataset(records, model) for name, records in splits.items()}
    shards = {name: 1 for name, part in parts.items() if not part.num_rows}
    datasets.DatasetDict(parts).save_to_disk(str(path), num_shards=shards or None)
    return Path(path)
