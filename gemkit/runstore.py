"""The run store: the one durable result folder of `eval`, `run --out`, `synth qa`, `synth tasks`.

A run folder holds

    DIR/run.json     the manifest: the run's kind, the gemkit version, and every setting that
                     changes the output (`settings`, checked on resume) or does not (`info`)
    DIR/.lock        locked (flock) while a run writes, naming its pid; removed at the end
    DIR/<name>.jsonl append-only record files, one JSON object per line

and these rules, the same for every command:

- **Nothing changes before every check passed.** Opening takes the lock, reads the manifest and
  every line of every record file; a refused run (another run holds the folder, other
  settings, a damaged file, a link) leaves every byte as it was.
- **A record is durable when `append` returns**: its line goes out in one `write` and is
  fsynced. A kill tears at most the line being written.
- **A torn last line is cut** (a line without its newline: the write a kill interrupted) when
  a run resumes; any other line that is not a record (bad JSON, another kind, a key written
  twice) is an error naming the file and the line.
- **Links are never followed, and the folder cannot be redirected.** A record file, the
  manifest or the lock that is a link, not a regular file, has other hard links or belongs to
  another user is refused, never read, truncated or appended to. So is the folder itself when
  it is a link, belongs to another user or anyone may write into it, and a path to it through
  a link another user made (a link planted in a shared folder): another user cannot point a
  run at files of the user who starts it. The folder is opened once; every file of the run is
  then reached through that open folder (`/proc/self/fd/N/<name>` on Linux), so renaming the
  folder or putting a link in its place afterwards changes nothing.
- **Whole files** (the manifest, a summary, an export folder) are written under a temporary
  name, synced and renamed; a failed write removes its temporary, and a run removes those a
  killed run left behind.
- **Infrastructure failures are not results**: `fail` writes them to their own file, they are
  retried on resume, and `max_failures` of them in a row stop the run (`RunStopped`). When a
  run ends, the failures a later try settled (a resume that made the record) leave that file,
  which then holds only what is still to do (and is removed once nothing is).
- **File-system failures are one line** (`RunStoreError`): the path and what to do.
"""

from __future__ import annotations

import errno
import fcntl
import glob
import json
import os
import shutil
import sqlite3
import stat
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from gemkit.errors import GemkitError

MANIFEST = "run.json"
LOCK = ".lock"
#: a temporary of `name` is `.{name}.tmp-{pid}`: hidden, and removed on the next open
TMP_MARK = ".tmp-"
#: infrastructure failures in a row that stop a run
MAX_FAILURES = 5


class RunStoreError(GemkitError):
    """A run folder that cannot be used as asked: busy, other settings, damaged, unwritable."""


class RunStopped(RunStoreError):
    """A run stopped after too many infrastructure failures in a row (its records are kept)."""


@dataclass(frozen=True)
class RecordFile:
    """A record file of a run: its name, each line's key, and how a line is checked.

    `check(raw, where)` raises a `GemkitError` naming `where` (file, line) for a line that is
    not a record of this file. Lines of a `settles` file are results: their keys are done and
    may appear once. Lines of the failure file do not settle their key (it runs again).
    """

    name: str
    key: Callable[[dict[str, Any]], Hashable]
    check: Callable[[dict[str, Any], str], Any] | None = None
    settles: bool = True


def gemkit_version() -> str:
    """The version of the gemkit that writes a manifest."""
    from gemkit import __version__

    return __version__


def storage_error(
    e: BaseException, path: Path | str, hint: str = "", verb: str = "write"
) -> RunStoreError:
    """A one-line error for a failed file operation on `path`: what failed, and what to do."""
    code = getattr(e, "errno", None)
    if isinstance(e, sqlite3.Error):
        text = str(e)
        low = text.lower()
        if "full" in low:
            code = errno.ENOSPC
        elif "readonly" in low or "read-only" in low:
            code = errno.EROFS
    else:
        text = getattr(e, "strerror", None) or str(e) or type(e).__name__
    advice = {
        errno.ENOSPC: "free some space, then run the same command with --resume",
        errno.EDQUOT: "free some space, then run the same command with --resume",
        errno.EROFS: "the file system is read-only: choose a writable --out folder",
        errno.EACCES: "choose a folder you may write to",
        errno.EPERM: "choose a folder you may write to",
        errno.ENOTDIR: "a part of the path is a file: choose another --out folder",
        errno.ENOENT: "the folder vanished while the run wrote to it: run the same command "
        "with --resume",
    }.get(code or 0, "")
    tail = hint or advice
    return RunStoreError(f"cannot {verb} {path}: {text}" + (f"; {tail}" if tail else ""))


def is_storage_error(e: BaseException) -> bool:
    """Whether `e` is the file system failing (full, read-only, gone), not a bug."""
    if isinstance(e, (ConnectionError, TimeoutError)):  # a peer failing, not the disk
        return False
    if isinstance(e, OSError):
        return True
    if isinstance(e, sqlite3.OperationalError):
        low = str(e).lower()
        return any(w in low for w in ("full", "readonly", "read-only", "unable to open", "i/o"))
    return False


# -- files opened without following links -------------------------------------------------------


def _open_own(path: Path, flags: int, shown: Path | None = None) -> int:
    """Open `path` (never through a link) and refuse anything but a regular file of ours;
    messages name `shown` (the path as the user gave it) when given."""
    shown = shown or path
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise RunStoreError(
                f"{shown} is a link; a run folder's files are never followed: remove the link "
                "or choose another --out folder"
            ) from None
        raise
    try:
        _check_own(shown, os.fstat(fd))
    except BaseException:
        os.close(fd)
        raise
    return fd


#: how a process reaches a file in a folder it holds open, whatever happens to its path
_FD_ROOT = Path("/proc/self/fd")


def _foreign_link(st: os.stat_result) -> bool:
    """Whether a link was made by someone other than this user or root."""
    return st.st_uid not in (os.geteuid(), 0)


def open_folder(folder: Path) -> int:
    """Make `folder` (and its missing parents) and open it, refusing one that could redirect
    a run: the folder a link, of another user, or writable by anyone; or a path to it through
    a link another user made. Returns the open folder (`O_DIRECTORY`)."""
    path = Path(os.path.abspath(folder))
    for part in [*reversed(path.parents), path][1:]:  # the root itself is no link
        try:
            st = os.lstat(part)
        except FileNotFoundError:
            try:
                os.mkdir(part)
            except FileExistsError:
                pass  # made meanwhile: checked below as any other
            except OSError as e:
                # no run wrote here yet: "vanished while the run wrote" would be wrong
                hint = "choose an --out folder that can be made" if e.errno == errno.ENOENT else ""
                raise storage_error(e, folder, hint, verb="create") from None
            st = os.lstat(part)
        except NotADirectoryError as e:
            raise storage_error(e, folder) from None
        if stat.S_ISLNK(st.st_mode) and (part == path or _foreign_link(st)):
            who = "" if part == path else f" that another user (uid {st.st_uid}) made"
            raise RunStoreError(
                f"{part} is a link{who}; a run folder is never reached through a link that "
                "could point it elsewhere: choose another --out folder"
            )
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        if e.errno == errno.ELOOP:  # became a link since it was checked
            raise RunStoreError(
                f"{folder} is a link; a run folder is never reached through a link that could "
                "point it elsewhere: choose another --out folder"
            ) from None
        if e.errno == errno.ENOTDIR:
            raise RunStoreError(
                f"{folder} exists and is not a folder; choose another --out"
            ) from None
        raise storage_error(e, folder) from None
    st = os.fstat(fd)
    why = ""
    if st.st_uid != os.geteuid():
        why = f"belongs to another user (uid {st.st_uid})"
    elif st.st_mode & stat.S_IWOTH:
        why = "may be written by any user (mode o+w), who could swap its files"
    if why:
        os.close(fd)
        raise RunStoreError(
            f"{folder} {why}; a run writes only a folder of its own: choose another --out folder"
        )
    return fd


def _check_own(path: Path, st: os.stat_result) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise RunStoreError(f"{path} is not a regular file; remove it or choose another --out")
    if st.st_nlink > 1:
        raise RunStoreError(
            f"{path} has {st.st_nlink - 1} other hard link(s), so writing it would change "
            "another file too: remove it or choose another --out folder"
        )
    if st.st_uid != os.geteuid():
        raise RunStoreError(
            f"{path} belongs to another user (uid {st.st_uid}); a run only writes its own "
            "files: choose another --out folder"
        )


def _exists(path: Path) -> bool:
    try:
        os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return False
    return True


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems cannot sync a folder; the rename itself is atomic
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def dumps(record: Mapping[str, Any]) -> str:
    """One record as its JSONL line (without the newline); the same text on every run."""
    return json.dumps(record, ensure_ascii=False, default=str)


# -- reading ------------------------------------------------------------------------------------


def _why(e: ValueError) -> str:
    if isinstance(e, json.JSONDecodeError):
        return f"{e.msg} at column {e.colno}"
    return "not UTF-8 text"


@dataclass
class _Scan:
    records: list[dict[str, Any]]
    good_end: int  # bytes up to the end of the last complete line
    size: int


def _json_lines(
    f: IO[bytes], path: Path, hint: str, *, whole_tail: bool = False
) -> Iterator[tuple[int, int, Any]]:
    """(line number, bytes, object) of each complete, non-blank line; a bad one raises.

    The one line rule of every reader: a torn last line (no newline: a writer killed or still
    writing) ends the file, a blank line is skipped, any other line must be a JSON object.
    With `whole_tail`, a last line without a newline that is a whole JSON object (a file
    written by hand) is read too; the store cuts it instead and writes it again.
    """
    for n, line in enumerate(f, 1):
        if not line.endswith(b"\n"):
            if whole_tail:
                try:
                    raw = json.loads(line)
                except (json.JSONDecodeError, UnicodeDecodeError):
                    return
                if isinstance(raw, dict):
                    yield n, len(line), raw
            return
        if not line.strip():
            yield n, len(line), None
            continue
        try:
            raw = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise RunStoreError(
                f"{path}, line {n}: not a JSON record ({_why(e)}); the file is damaged before "
                f"its last line{hint}"
            ) from None
        if not isinstance(raw, dict):
            raise RunStoreError(f"{path}, line {n}: not a record (expected a JSON object)")
        yield n, len(line), raw


def _scan(path: Path, spec: RecordFile, fd: int) -> _Scan:
    """Every complete line of a record file, checked; the torn tail is measured, not cut."""
    records: list[dict[str, Any]] = []
    seen: dict[Hashable, int] = {}
    offset = 0
    hint = ": repair or delete that line, or choose another --out folder"
    with os.fdopen(os.dup(fd), "rb") as f:
        for n, size, raw in _json_lines(f, path, hint):
            offset += size
            if raw is None:
                continue
            where = f"{path}, line {n}"
            if spec.check is not None:
                spec.check(raw, where)
            try:
                key = spec.key(raw)
            except (KeyError, TypeError, ValueError):
                raise RunStoreError(f"{where}: a record without its key") from None
            if spec.settles:
                if key in seen:
                    raise RunStoreError(
                        f"{where}: {key!r} is already on line {seen[key]}: two runs wrote this "
                        "folder at once; keep one of the lines, or choose another --out folder"
                    )
                seen[key] = n
            records.append(raw)
    return _Scan(records, offset, os.fstat(fd).st_size)


def read_lines(path: str | os.PathLike[str]) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) of each complete line of a JSONL file, changing nothing.

    A torn last line (no newline: a writer killed or still writing) is skipped, and so is a
    blank line; a last line without a newline that is a whole JSON object is read. Any other
    line that is not a JSON object raises a `RunStoreError` naming the file and the line.
    """
    path = Path(path)
    with path.open("rb") as f:
        for n, _, raw in _json_lines(f, path, "", whole_tail=True):
            if raw is not None:
                yield n, raw


# -- the store ----------------------------------------------------------------------------------


def held_run(folder: str | os.PathLike[str]) -> str | None:
    """The kind of run `folder` holds (`"eval"`, `"synth qa"`, ...), or None if it holds none."""
    path = Path(folder) / MANIFEST
    if not _exists(path):
        return None
    try:
        manifest = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return "unknown"
    return str(manifest.get("kind", "unknown")) if isinstance(manifest, dict) else "unknown"


def check_resume(folder: str | os.PathLike[str], kind: str, *, resume: bool) -> None:
    """The resume rule of every command: a folder that holds a run is continued only on resume.

    A folder holding a run of another kind is refused either way (`RunStore` says the same).
    """
    held = held_run(folder)
    if held is not None and held != kind:
        raise RunStoreError(
            f"{folder} holds a `gemkit {held}` run, not a `gemkit {kind}` one; choose another "
            "--out folder"
        )
    if held is not None and not resume:
        raise RunStoreError(
            f"{folder} already holds a `gemkit {kind}` run; pass --resume to continue it, or "
            "choose another --out folder"
        )


def _differences(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    keys = list(dict.fromkeys([*old, *new]))
    missing = object()
    out = []
    for k in keys:
        a, b = old.get(k, missing), new.get(k, missing)
        if a != b:
            there = "unset" if a is missing else repr(a)
            now = "unset" if b is missing else repr(b)
            out.append(f"{k}: {there} there, {now} now")
    return out


class RunStore:
    """One run's folder: its manifest, its lock, its record files (see the module docstring).

    ```python
    with RunStore(out, "eval", settings, [EPISODES, ERRORS], resume=True) as store:
        done = {r["key"] for r in store.records("episodes.jsonl")}
        store.append("episodes.jsonl", record)
    ```

    `resume=False` refuses a folder that holds a run; `resume=True` continues a run made with
    the same settings (or starts one). `info` is recorded in the manifest but not compared
    (the number of records asked for, parallelism, an endpoint's address).
    """

    def __init__(
        self,
        folder: str | os.PathLike[str],
        kind: str,
        settings: Mapping[str, Any],
        files: Sequence[RecordFile],
        *,
        resume: bool = True,
        info: Mapping[str, Any] | None = None,
        failures: str | None = None,
        max_failures: int = MAX_FAILURES,
        resume_hint: str = "run the same command with --resume",
    ):
        self.folder = Path(folder)
        self.kind = kind
        # a JSON round trip, so tuples and lists compare as the manifest will hold them
        self.settings = json.loads(json.dumps(dict(settings), default=str))
        self.info = json.loads(json.dumps(dict(info or {}), default=str))
        self.files = {f.name: f for f in files}
        self.resume = resume
        self.failures = failures
        self.max_failures = max_failures
        self.resume_hint = resume_hint
        self.failures_in_a_row = 0
        self._dir_fd: int | None = None
        self._base = self.folder  # where files are opened: the open folder once it is held
        self._records: dict[str, list[dict[str, Any]]] = {}
        self._fds: dict[str, int] = {}
        self._ends: dict[str, int] = {}
        self._lock: int | None = None
        if failures is not None and failures not in self.files:
            raise ValueError(f"the failure file {failures!r} is not one of the record files")

    # -- opening --------------------------------------------------------------------------------

    def __enter__(self) -> RunStore:
        return self.open()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def open(self) -> RunStore:
        """Lock, check everything, then repair torn tails, write the manifest, open for append."""
        try:
            self._make_folder()
            self._lock = self._take_lock()
            manifest = self._read_manifest()
            scans = self._scan_files()
            self._check_run(manifest, scans)
            self._commit_open(manifest, scans)
        except BaseException:
            self.close()
            raise
        return self

    def _make_folder(self) -> None:
        if _exists(self.folder) and not self.folder.is_dir() and not self.folder.is_symlink():
            raise RunStoreError(f"{self.folder} exists and is not a folder; choose another --out")
        self._dir_fd = open_folder(self.folder)
        if _FD_ROOT.is_dir():
            self._base = _FD_ROOT / str(self._dir_fd)

    def _at(self, name: str) -> Path:
        """Where the run's file `name` is opened: in the folder held open."""
        return self._base / name

    def _take_lock(self) -> int:
        shown = self.folder / LOCK
        path = self._at(LOCK)
        while True:
            try:
                fd = _open_own(path, os.O_RDWR | os.O_CREAT, shown)
            except OSError as e:
                raise storage_error(e, shown) from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                pid = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
                os.close(fd)
                raise RunStoreError(
                    f"{self.folder} is in use by another run (pid {pid}); wait for it to end, "
                    "or choose another --out folder"
                ) from None
            # the last holder may have removed the file between our open and our lock
            st = os.fstat(fd)
            try:
                now = os.lstat(path)
            except FileNotFoundError:
                now = None
            if now is None or (now.st_ino, now.st_dev) != (st.st_ino, st.st_dev):
                os.close(fd)
                continue
            try:
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            except OSError:
                pass  # a full disk: the lock holds all the same, only the pid is not shown
            return fd

    def _read_manifest(self) -> dict[str, Any] | None:
        path, shown = self._at(MANIFEST), self.folder / MANIFEST
        if not _exists(path):
            return None
        try:
            fd = _open_own(path, os.O_RDONLY, shown)
            with os.fdopen(fd, "rb") as f:
                text = f.read()
        except OSError as e:
            raise storage_error(e, shown, verb="read") from None
        try:
            manifest = json.loads(text)
        except (json.JSONDecodeError, UnicodeDecodeError):
            manifest = None
        if not isinstance(manifest, dict) or "kind" not in manifest:
            raise RunStoreError(
                f"{shown} is not a gemkit run manifest (a folder of an older gemkit, or another "
                "program's file): choose another --out folder"
            )
        return manifest

    def _scan_files(self) -> dict[str, _Scan]:
        scans = {}
        for name, spec in self.files.items():
            path, shown = self._at(name), self.folder / name
            if not _exists(path):
                continue
            try:
                fd = _open_own(path, os.O_RDONLY, shown)
                try:
                    scans[name] = _scan(shown, spec, fd)
                finally:
                    os.close(fd)
            except OSError as e:
                raise storage_error(e, shown, verb="read") from None
        return scans

    def _check_run(self, manifest: dict[str, Any] | None, scans: dict[str, _Scan]) -> None:
        held = sum(len(s.records) for s in scans.values())
        if manifest is None:
            if any(s.size for s in scans.values()):
                names = ", ".join(n for n, s in scans.items() if s.size)
                raise RunStoreError(
                    f"{self.folder} holds {names} but no {MANIFEST}: not a run this gemkit "
                    "started, so its settings are unknown; choose another --out folder"
                )
            return
        if manifest.get("kind") != self.kind:
            raise RunStoreError(
                f"{self.folder} holds a `gemkit {manifest.get('kind')}` run, not a "
                f"`gemkit {self.kind}` one; choose another --out folder"
            )
        if not self.resume:
            raise RunStoreError(
                f"{self.folder} already holds a `gemkit {self.kind}` run ({held} records); "
                "pass --resume to continue it, or choose another --out folder"
            )
        wanted = {"gemkit_version": gemkit_version(), **self.settings}
        old = manifest.get("settings")
        there = {
            "gemkit_version": manifest.get("gemkit_version"),
            **(old if isinstance(old, dict) else {}),
        }
        diff = _differences(there, wanted)
        if diff:
            raise RunStoreError(
                f"{self.folder} holds a run made with other settings ({'; '.join(diff)}); "
                "resume with the same settings, or choose another --out folder"
            )

    def _commit_open(self, manifest: dict[str, Any] | None, scans: dict[str, _Scan]) -> None:
        self._remove_stale_temporaries()
        for name, scan in scans.items():
            if scan.good_end < scan.size:  # a torn last line
                shown = self.folder / name
                try:
                    fd = _open_own(self._at(name), os.O_WRONLY, shown)
                    try:
                        os.ftruncate(fd, scan.good_end)
                        os.fsync(fd)
                    finally:
                        os.close(fd)
                except OSError as e:
                    raise storage_error(e, shown) from None
        new = {
            "kind": self.kind,
            "gemkit_version": gemkit_version(),
            "settings": self.settings,
            "info": self.info,
        }
        if manifest != new:
            self.write_json(MANIFEST, new)
        for name in self.files:
            self._records[name] = scans[name].records if name in scans else []

    def _appender(self, name: str) -> int:
        # opened on the first record, so a run that has none to write creates no empty file
        fd = self._fds.get(name)
        if fd is None:
            shown = self.folder / name
            try:
                fd = _open_own(self._at(name), os.O_WRONLY | os.O_APPEND | os.O_CREAT, shown)
            except OSError as e:
                raise storage_error(e, shown) from None
            self._fds[name] = fd
            self._ends[name] = os.fstat(fd).st_size
        return fd

    def _remove_stale_temporaries(self) -> None:
        try:
            names = os.listdir(self._base)
        except OSError:
            return
        for name in names:
            if not (name.startswith(".") and TMP_MARK in name):
                continue
            path = self._at(name)
            try:
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path)
                else:
                    path.unlink()
            except OSError:
                pass  # best effort: a leftover never passes for a record file

    # -- writing --------------------------------------------------------------------------------

    def records(self, name: str) -> list[dict[str, Any]]:
        """The records of file `name`: those found on open, then those appended since."""
        return self._records[name]

    def append(self, name: str, record: Mapping[str, Any]) -> None:
        """Append one record as one line and fsync it: durable when this returns."""
        fd = self._appender(name)
        data = (dumps(record) + "\n").encode()
        try:
            _write_all(fd, data)
            os.fsync(fd)
        except OSError as e:
            # a short write (a full disk) must not leave half a line for the next record
            try:
                os.ftruncate(fd, self._ends[name])
            except OSError:
                pass  # the torn tail is cut on resume
            raise storage_error(e, self.folder / name) from None
        self._ends[name] += len(data)
        self._records[name].append(dict(record))
        if self.files[name].settles:
            self.failures_in_a_row = 0

    def fail(self, record: Mapping[str, Any], reason: str) -> None:
        """Record an infrastructure failure (retried on resume); stop after too many in a row."""
        assert self.failures is not None, "this store has no failure file"
        self.append(self.failures, record)
        self.failures_in_a_row += 1
        if self.failures_in_a_row >= self.max_failures:
            raise RunStopped(
                f"stopped after {self.failures_in_a_row} failures in a row (the last: {reason}); "
                f"the records so far are kept in {self.folder}: fix the cause, then "
                f"{self.resume_hint} to resume"
            )

    def write_json(self, name: str, obj: Any) -> None:
        """Write a whole JSON file atomically (a temporary, fsynced, renamed over)."""
        with self.replacing(name) as tmp:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            try:
                _write_all(fd, (json.dumps(obj, indent=2) + "\n").encode())
                os.fsync(fd)
            finally:
                os.close(fd)

    @contextmanager
    def replacing(self, name: str) -> Iterator[Path]:
        """A temporary path to write `name` (a file or a folder) at; renamed over it on success.

        On any failure the temporary is removed and the old `name` is left as it was; a file
        system failure is re-raised as a one-line `RunStoreError`.
        """
        target = self._at(name)
        tmp = self._at(f".{name}{TMP_MARK}{os.getpid()}")
        old = self._at(f".{name}.old{TMP_MARK}{os.getpid()}")
        _remove(tmp)
        try:
            yield tmp
            if tmp.is_dir() and not tmp.is_symlink() and _exists(target):
                os.replace(target, old)  # a folder cannot be renamed over a full one
            os.replace(tmp, target)
            _fsync_dir(self._base)
        except BaseException as e:
            # the temporary, and any a writer made next to it (`path.with_suffix(".tmp")`)
            for stray in self._base.glob(f"{glob.escape(tmp.name)}*"):
                _remove(stray)
            if _exists(old) and not _exists(target):
                os.replace(old, target)
            if is_storage_error(e):
                raise storage_error(e, self.folder / name) from None
            raise
        finally:
            _remove(old)

    def log(self, name: str, line: str) -> None:
        """Append a line to a log file of the run (not a record: no fsync, never a link)."""
        append_log(self._at(name), line, self.folder / name)

    def close(self) -> None:
        """Close the record files, drop the failures settled since, release the lock."""
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
        if self._lock is not None:
            self._drop_settled_failures()
            try:
                os.unlink(self._at(LOCK))
            except OSError:
                pass
            os.close(self._lock)
            self._lock = None
        if self._dir_fd is not None:
            os.close(self._dir_fd)
            self._dir_fd = None
            self._base = self.folder

    def _drop_settled_failures(self) -> None:
        # an error a resume fixed is history, not a failure: without this, errors.jsonl kept
        # every error ever met and a reader took settled episodes for failed ones
        if self.failures is None or not self._records.get(self.failures):
            return
        spec = self.files[self.failures]
        settled = {
            f.key(r) for name, f in self.files.items() if f.settles for r in self._records[name]
        }
        failed = self._records[self.failures]
        left = [r for r in failed if spec.key(r) not in settled]
        if len(left) == len(failed):
            return
        try:
            if left:
                with self.replacing(self.failures) as tmp:
                    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
                    try:
                        _write_all(fd, "".join(dumps(r) + "\n" for r in left).encode())
                        os.fsync(fd)
                    finally:
                        os.close(fd)
            else:
                os.unlink(self.folder / self.failures)
                _fsync_dir(self.folder)
        except (OSError, RunStoreError):
            return  # best effort: a failure kept is tried again, and readers skip settled keys
        self._records[self.failures] = left


def append_log(path: Path, line: str, shown: Path | None = None) -> None:
    """Append one line to a log file in one write, never through a link (`shown`: the path
    as messages name it)."""
    try:
        fd = _open_own(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, shown)
        try:
            _write_all(fd, (line.rstrip("\n") + "\n").encode())
        finally:
            os.close(fd)
    except OSError as e:
        raise storage_error(e, shown or path) from None


def _remove(path: Path) -> None:
    try:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    except FileNotFoundError:
        pass
