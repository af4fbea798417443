"""The record base class: strict fields, a schema version, and one-line errors."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from gemkit.errors import GemkitError


class RecordError(GemkitError):
    """A record that is not of the expected kind, shape or schema version."""


class JsonText:
    """Marks a free-form JSON field (a nested logical form, a category's own spec).

    Its shape varies from record to record, so the `datasets` export stores it as JSON text;
    every other field is a typed column.
    """


#: a field of any JSON value, kept as JSON text in the `datasets` export
Json = Annotated[Any, JsonText()]

R = TypeVar("R", bound="Record")
T = TypeVar("T")


class Part(BaseModel):
    """A nested part of a record: fixed fields, unknown ones refused."""

    model_config = ConfigDict(extra="forbid")


class Record(Part):
    """A top-level record: a kind, a schema version, and strict fields.

    `schema_version` is written on every record; a record without one was written before
    versions existed, in the shape of version 1. `READS` lists older versions whose records
    are a subset of this one's (fields added since, with defaults): they read as they are,
    keeping their version. `ATTACHMENTS` names what a `datasets` export carries beside the
    fields (a task's database file), so the export stands alone.
    """

    KIND: ClassVar[str] = "record"
    VERSION: ClassVar[int] = 1
    READS: ClassVar[tuple[int, ...]] = ()
    #: binary columns a `datasets` export carries beside the fields (`records.export`)
    ATTACHMENTS: ClassVar[tuple[str, ...]] = ()

    schema_version: int = 1

    @classmethod
    def parse(cls: type[R], data: Any, where: str = "") -> R:
        """Validate one raw record (a JSON object); `where` (file, line) prefixes any error."""
        prefix = f"{where}: " if where else ""
        kind = f"{'an' if cls.KIND[:1] in 'aeiou' else 'a'} {cls.KIND} record"
        if not isinstance(data, dict):
            raise RecordError(f"{prefix}not {kind}: expected a JSON object")
        version = data.get("schema_version", 1)
        if version != cls.VERSION and version not in cls.READS:
            known = " and ".join(str(v) for v in sorted({*cls.READS, cls.VERSION}))
            raise RecordError(
                f"{prefix}{kind} of schema version {version!r}; this gemkit reads version "
                f"{known}: use the gemkit that wrote it, or write it again"
            )
        try:
            record = cls.model_validate({**data, "schema_version": cls.VERSION})
        except ValidationError as e:
            raise RecordError(f"{prefix}not {kind}: {describe(e)}") from None
        record.schema_version = version
        return record

    def to_json(self) -> dict[str, Any]:
        """The record as a JSON-ready dict (the form written to a JSONL line)."""
        # a value JSON cannot hold (an env's numpy number in `info`) is written as its text
        return self.model_dump(mode="json", fallback=str)


def describe(error: ValidationError, limit: int = 3) -> str:
    """The first problems of a validation error, in one line: `field 'x.y': what is wrong`."""
    parts = []
    for item in error.errors()[:limit]:
        where = ".".join(str(p) for p in item["loc"]) or "record"
        what = "missing" if item["type"] == "missing" else item["msg"].lower()
        if item["type"] == "extra_forbidden":
            what = "not a field of this record"
        parts.append(f"field {where!r}: {what}")
    more = error.error_count() - limit
    return "; ".join(parts) + (f" (and {more} more)" if more > 0 else "")


_PER_FILE: OrderedDict[tuple[str, int, int], Any] = OrderedDict()
_PER_FILE_LOCK = threading.Lock()
#: file versions whose parsed records are kept (a vector of envs loads one file many times)
PER_FILE_KEPT = 16


def per_file(path: Path, load: Callable[[Path], T]) -> T:
    """`load(path)`, run once per version of the file (its path, size and mtime).

    Records are checked against their model as they are read; a vector of 1,024 envs over one
    folder reads and checks its file once. Callers must treat the result as read-only: every
    env made from the same file version shares it.
    """
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    with _PER_FILE_LOCK:
        if key in _PER_FILE:
            _PER_FILE.move_to_end(key)
            return _PER_FILE[key]
    value = load(path)
    with _PER_FILE_LOCK:
        _PER_FILE[key] = value
        while len(_PER_FILE) > PER_FILE_KEPT:
            _PER_FILE.popitem(last=False)
    return value
