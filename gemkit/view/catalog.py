"""The catalog of one folder: discovery walks it and groups what gemkit wrote into collections.

The records under one folder are read from disk on demand, by concern: `files` (opening a
file under the folder safely), `sources` (a JSONL file or a `datasets` export), `index` (the
column index), `query` (a list page's query), `collection` (records of one kind, indexed
once) and `side_data` (a corpus or database beside the records).

`discover(root)` finds what gemkit wrote under a folder (JSONL files and `datasets` exports)
and groups them into collections: the episodes of a folder, its QA records (kept and
rejected), its task tuples. A collection is indexed lazily, once: per record, a byte offset
(or a row number, for Arrow) and the few values the list filters on, kept in flat arrays
(`ColumnIndex`, under 100 bytes a record), never the records. A page reads only the records
it shows. Files that grow (a run still writing) are indexed from where the index stopped.

Everything here reads; nothing opens a file for writing. Paths come only from walking the
folder; a record or a request never names a file that is opened without a check that it
lies under the folder.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gemkit.view.collection import Collection
from gemkit.view.files import (
    DATASET_JSON_BYTES,
    ViewError,
    inside,
    is_plain,
    open_plain,
    parse_line,
    read_plain,
)
from gemkit.view.records import KINDS, Kind, sniff_kind
from gemkit.view.side_data import Corpus
from gemkit.view.sources import ArrowSource, JsonlSource, Source

#: how much of a file's first line is read to tell its kind
SNIFF_BYTES = 4 * 1024 * 1024
#: how deep, and over how many entries, discovery looks
MAX_DEPTH = 6
MAX_ENTRIES = 20_000


@dataclass
class Catalog:
    """What a folder holds: collections, side files (summaries, settings, logs), problems."""

    root: Path
    allowed: Path  # what the viewer may open: the folder, or the one file it was given
    collections: dict[str, Collection] = field(default_factory=dict)
    corpora: dict[str, Corpus] = field(default_factory=dict)  # folder rel -> corpus
    side: dict[str, list[Path]] = field(default_factory=dict)  # folder rel -> side files
    skipped: list[str] = field(default_factory=list)  # files seen, not shown, and why

    def collection(self, key: str) -> Collection:
        """A collection by key; an unknown key names the known ones."""
        if key not in self.collections:
            known = ", ".join(self.collections) or "none"
            raise ViewError(f"no record collection {key[:80]!r} here; known: {known}")
        return self.collections[key]


#: kept records first, then the others, rejected ones and failed episodes last
ROLE_ORDER = {"kept": 0, "": 1, "rejected": 2, "errors": 3}
#: files shown beside the records of their folder: figures, the run's manifest, logs, and the
#: work items a model server failed (`synth qa`'s failed.jsonl, run again on resume)
SIDE_FILES = ("summary.json", "run.json", "progress.log", "failed.jsonl")


def _first_keys(path: Path) -> list[str] | None:
    try:
        with open_plain(path, path.name, 0) as f:  # discovery checked where a link leads
            line = f.readline(SNIFF_BYTES)
    except (OSError, ViewError):
        return None
    raw, _ = parse_line(line, 1) if line.endswith(b"\n") or len(line) < SNIFF_BYTES else (None, "")
    return list(raw) if raw else None


def _dataset_kind(folder: Path) -> str | None:
    try:
        info = json.loads(
            read_plain(folder / "dataset_info.json", "dataset_info.json", DATASET_JSON_BYTES)
        )
        return sniff_kind(list((info.get("features") or {}).keys()))
    except (OSError, ValueError, AttributeError, ViewError):
        return None


def _classify(names: set[str]) -> dict[str, tuple[str, str] | None]:
    """File name -> (kind, role) for the names that say what they hold."""
    out: dict[str, tuple[str, str] | None] = {}
    qa_dir = "qa.jsonl" in names
    tasks_dir = "tasks.jsonl" in names
    for n in names:
        if n == "qa.jsonl":
            out[n] = ("qa", "kept")
        elif n == "tasks.jsonl":
            out[n] = ("tasks", "kept")
        elif n == "rejected.jsonl" and (qa_dir or tasks_dir):
            out[n] = ("qa" if qa_dir else "tasks", "rejected")
        elif n == "errors.jsonl":
            out[n] = ("episodes", "errors")
        elif n.startswith("episodes") and n.endswith(".jsonl"):
            out[n] = ("episodes", "")
    return out


#: the export folders `gemkit synth qa` and `gemkit synth tasks` write inside their run folders
EXPORT_NAMES = ("dataset", "datasets")


def _export_of_its_run(folder: Path, kind: str) -> bool:
    """Whether a datasets folder is a run's export (or one split of it, `dataset/train`), next
    to the JSONL records it was made from."""
    if folder.name not in EXPORT_NAMES and is_plain(folder.parent / "dataset_dict.json"):
        folder = folder.parent  # a split of a DatasetDict export
    if folder.name not in EXPORT_NAMES:
        return False
    try:
        beside = {p.name for p in folder.parent.iterdir() if p.is_file()}
    except OSError:
        return False
    return any(k == kind for k, _ in filter(None, _classify(beside).values()))


def discover(path: Path, catalog: Catalog | None = None) -> Catalog:
    """Find the record files under `path` (a folder, or one JSONL file); keep known indexes."""
    path = Path(path)
    if not path.exists():
        raise ViewError(f"{path} does not exist; pass a folder or file written by gemkit")
    path = path.resolve()
    cat = catalog or Catalog(path.parent if path.is_file() else path, allowed=path)
    cat.skipped = []
    found: dict[str, tuple[Kind, Path, str, list[Source]]] = {}

    def add(kind: str, folder: Path, source: Source) -> None:
        rel = _rel(cat.root, folder)
        key = f"{rel}/{kind}" if rel else kind
        found.setdefault(key, (KINDS[kind], folder, rel, []))[3].append(source)

    if path.is_file():
        kind, role = _classify({path.name}).get(path.name) or (None, "")
        kind = kind or sniff_kind(_first_keys(path) or [])
        if not path.name.endswith(".jsonl") or kind is None:
            raise ViewError(
                f"{path.name} holds no gemkit records: expected a JSONL file of episodes, "
                "QA records or task tuples, or a folder written by gemkit"
            )
        add(kind, path.parent, JsonlSource(path, path.name, role))
    else:
        _walk(cat, add)
    for key, (record_kind, folder, rel, sources) in found.items():
        sources.sort(key=lambda s: (ROLE_ORDER.get(s.role, 1), s.rel))
        if key in cat.collections:
            for s in sources:
                cat.collections[key].add_source(s)
        else:
            cat.collections[key] = Collection(key, record_kind, folder, rel, sources)
    return cat


def _rel(root: Path, p: Path) -> str:
    return p.relative_to(root).as_posix() if p != root else ""


def _walk(cat: Catalog, add: Any) -> None:
    root = cat.root
    entries = 0
    for folder, dirs, files in os.walk(root, followlinks=False):
        here = Path(folder)
        rel = _rel(root, here)
        entries += len(dirs) + len(files)
        if entries > MAX_ENTRIES:
            cat.skipped.append(f"stopped looking after {MAX_ENTRIES:,} files and folders")
            break
        depth = len(here.relative_to(root).parts)
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and depth < MAX_DEPTH)
        if "state.json" in files and "dataset_info.json" in files:
            links = [n for n in ("state.json", "dataset_info.json") if not is_plain(here / n)]
            kind = None if links else _dataset_kind(here)
            if links:
                cat.skipped.append(
                    f"{rel}/: {' and '.join(links)} is a link or not a regular file; not read"
                )
            elif kind is None:
                cat.skipped.append(f"{rel}/: a datasets folder of records not known here")
            elif here != root and _export_of_its_run(here, kind):
                pass  # the run's own export: the same records as its JSONL, listed once
            elif here != root and is_plain(here.parent / "dataset_dict.json"):
                add(kind, here.parent, ArrowSource(here, rel))  # a split: one collection for all
            else:
                add(kind, here, ArrowSource(here, rel))
            dirs[:] = []
            continue
        names = set(files)
        known = _classify(names)
        for n in sorted(names):
            p = here / n
            prel = _rel(root, p)
            if p.is_symlink() and not inside(root, p):
                cat.skipped.append(f"{prel}: a link to a file outside the folder")
                continue
            if not p.is_file():  # a FIFO (opening it blocks), a socket, a device, a dangling link
                if n.endswith(".jsonl") or n in SIDE_FILES:
                    cat.skipped.append(f"{prel}: not a regular file; not read")
                continue
            if n in SIDE_FILES:
                if p not in cat.side.setdefault(rel, []):
                    cat.side[rel].append(p)
                continue
            if not n.endswith(".jsonl"):
                continue
            if n == "corpus.jsonl":
                if rel not in cat.corpora:
                    cat.corpora[rel] = Corpus(JsonlSource(p, prel))
                continue
            kind_role = known.get(n)
            if kind_role is None:
                kind = sniff_kind(_first_keys(p) or [])
                if kind is None:
                    cat.skipped.append(f"{prel}: not episodes, QA records or task tuples")
                    continue
                kind_role = (kind, "")
            add(kind_role[0], here, JsonlSource(p, prel, kind_role[1]))
