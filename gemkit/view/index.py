"""The column index: per record its place and the few values the list filters on, in flat arrays."""

from __future__ import annotations

from array import array
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from gemkit.view.records import Column
from gemkit.view.sources import Scanned


class ColumnIndex:
    """Per record: where it is and its list values, in flat typed arrays (no records kept).

    `cat` values are codes into a label list, `num` values floats (NaN when missing), `bool`
    values -1/0/1.
    """

    def __init__(self, columns: Sequence[Column]):
        self.columns = {c.name: c for c in columns}
        self.src = array("h")
        self.pos = array("q")
        self.size = array("q")
        self.line = array("q")
        self.bad = array("b")
        self.values: dict[str, array[Any]] = {
            c.name: array({"cat": "i", "num": "d", "bool": "b"}[c.type]) for c in columns
        }
        self.labels: dict[str, list[str]] = {c.name: [] for c in columns if c.type == "cat"}
        self._codes: dict[str, dict[str, int]] = {name: {} for name in self.labels}
        self._arrays: dict[str, np.ndarray] = {}
        self._arrays_len = -1

    def __len__(self) -> int:
        return len(self.pos)

    def code(self, name: str, label: str) -> int:
        """The code of a label of a `cat` column (-1: unseen)."""
        return self._codes[name].get(label, -1)

    def add(self, src: int, rec: Scanned, values: Mapping[str, Any] | None) -> None:
        """Append one record."""
        self.src.append(src)
        self.pos.append(rec.pos)
        self.size.append(rec.size)
        self.line.append(rec.line)
        self.bad.append(values is None)
        values = values or {}
        for name, col in self.columns.items():
            v = values.get(name)
            if col.type == "num":
                self.values[name].append(float("nan") if v is None else float(v))
            elif col.type == "bool":
                self.values[name].append(-1 if v is None else int(bool(v)))
            elif v is None:
                self.values[name].append(-1)
            else:
                codes = self._codes[name]
                label = str(v)[:200]
                if label not in codes:
                    codes[label] = len(codes)
                    self.labels[name].append(label)
                self.values[name].append(codes[label])

    def arrays(self) -> dict[str, np.ndarray]:
        """Numpy copies of every array (rebuilt only after the index grew)."""
        if self._arrays_len != len(self):
            out = {k: np.array(getattr(self, k)) for k in ("src", "pos", "size", "line", "bad")}
            out.update({f"v:{k}": np.array(v) for k, v in self.values.items()})
            self._arrays, self._arrays_len = out, len(self)
        return self._arrays

    @property
    def nbytes(self) -> int:
        """Bytes held by the index arrays (labels aside)."""
        arrays = [self.src, self.pos, self.size, self.line, self.bad, *self.values.values()]
        return sum(a.itemsize * len(a) for a in arrays)
