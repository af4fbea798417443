"""The run store's rules, one by one, on a real folder: lock, manifest, torn and damaged lines,
links, failures in a row, atomic files, and file systems that are full or read-only."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gemkit.runstore import (
    LOCK,
    MANIFEST,
    RecordFile,
    RunStopped,
    RunStore,
    RunStoreError,
    is_storage_error,
    read_lines,
    storage_error,
)

RESULTS = RecordFile("results.jsonl", key=lambda r: r["k"])
FAILURES = RecordFile("failures.jsonl", key=lambda r: r["k"], settles=False)


def store(folder: Path, settings: dict | None = None, **kw) -> RunStore:
    return RunStore(folder, "test", settings or {"seed": 0}, [RESULTS, FAILURES],
                    failures="failures.jsonl", **kw)  # fmt: skip


def files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def started(folder: Path, records: int = 3) -> Path:
    with store(folder) as s:
        for k in range(records):
            s.append("results.jsonl", {"k": k, "v": "x" * k})
    return folder


def test_a_record_is_one_line_on_disk_when_append_returns(tmp_path):
    with store(tmp_path) as s:
        s.append("results.jsonl", {"k": 0, "text": "é\n"})
        # read by another file handle while the store is still open: nothing is buffered
        assert (tmp_path / "results.jsonl").read_bytes() == b'{"k": 0, "text": "\xc3\xa9\\n"}\n'
    manifest = json.loads((tmp_path / MANIFEST).read_text())
    assert manifest["kind"] == "test" and manifest["settings"] == {"seed": 0}
    assert manifest["gemkit_version"]


def test_a_torn_last_line_is_cut_and_the_next_record_starts_on_a_clean_line(tmp_path):
    started(tmp_path)
    with (tmp_path / "results.jsonl").open("ab") as f:
        f.write(b'{"k": 3, "v": "xx')  # the write a kill interrupted
    with store(tmp_path) as s:
        assert [r["k"] for r in s.records("results.jsonl")] == [0, 1, 2]
        s.append("results.jsonl", {"k": 3})
    assert [r["k"] for _, r in read_lines(tmp_path / "results.jsonl")] == [0, 1, 2, 3]


@pytest.mark.parametrize(
    "damage, message",
    [
        (b'{"k": 1, "v": \n', "results.jsonl, line 2: not a JSON record"),
        (b"[1, 2]\n", "results.jsonl, line 2: not a record (expected a JSON object)"),
        (b'{"v": 1}\n', "results.jsonl, line 2: a record without its key"),
        (b'{"k": 0}\n', "results.jsonl, line 2: 0 is already on line 1: two runs wrote"),
        (b"\xff\xfe\n", "results.jsonl, line 2: not a JSON record (not UTF-8 text)"),
    ],
)
def test_a_damaged_line_before_the_last_is_refused_naming_file_and_line(tmp_path, damage, message):
    started(tmp_path, 1)
    with (tmp_path / "results.jsonl").open("ab") as f:
        f.write(damage + b'{"k": 5}\n' + b'{"k": 6, "torn')
    before = files(tmp_path)
    with pytest.raises(RunStoreError, match=message.replace("(", r"\(").replace(")", r"\)")):
        store(tmp_path).open()
    assert files(tmp_path) == before, "a refused run changes no byte, not even the torn tail"
    assert not (tmp_path / LOCK).exists()


def test_a_blank_line_is_read_alike_by_the_readers_and_the_store(tmp_path):
    # read_lines (the viewer, load_jsonl) skipped it while a resume called the file damaged
    started(tmp_path, 2)
    with (tmp_path / "results.jsonl").open("ab") as f:
        f.write(b"\n" + b'{"k": 2}\n')
    assert [r["k"] for _, r in read_lines(tmp_path / "results.jsonl")] == [0, 1, 2]
    with store(tmp_path) as s:
        assert [r["k"] for r in s.records("results.jsonl")] == [0, 1, 2]
        s.append("results.jsonl", {"k": 3})
    assert [r["k"] for _, r in read_lines(tmp_path / "results.jsonl")] == [0, 1, 2, 3]


def test_other_settings_are_refused_naming_each_difference(tmp_path):
    started(tmp_path)
    before = files(tmp_path)
    with pytest.raises(RunStoreError) as e:
        store(tmp_path, {"seed": 1, "level": 6}).open()
    assert "seed: 0 there, 1 now" in str(e.value) and "level: unset there, 6 now" in str(e.value)
    assert files(tmp_path) == before
    with store(tmp_path, info={"n": 99}) as s:  # info may change: it is not compared
        assert len(s.records("results.jsonl")) == 3


def test_a_run_of_another_gemkit_version_is_refused(tmp_path):
    started(tmp_path)
    manifest = json.loads((tmp_path / MANIFEST).read_text())
    (tmp_path / MANIFEST).write_text(json.dumps({**manifest, "gemkit_version": "0.0.1"}))
    with pytest.raises(RunStoreError, match="gemkit_version: '0.0.1' there"):
        store(tmp_path).open()


def test_resume_false_refuses_a_folder_that_holds_a_run_and_leaves_its_torn_tail(tmp_path):
    started(tmp_path)
    with (tmp_path / "results.jsonl").open("ab") as f:
        f.write(b'{"k": 3, "v": "xx')
    before = files(tmp_path)
    with pytest.raises(RunStoreError, match=r"already holds a `gemkit test` run \(3 records\)"):
        store(tmp_path, resume=False).open()
    assert files(tmp_path) == before, "a refused run cuts nothing"


def test_records_without_a_manifest_or_of_another_kind_are_refused(tmp_path):
    (tmp_path / "results.jsonl").write_text('{"k": 0}\n')
    with pytest.raises(RunStoreError, match="holds results.jsonl but no run.json"):
        store(tmp_path).open()
    (tmp_path / MANIFEST).write_text(json.dumps({"kind": "eval", "settings": {}}))
    with pytest.raises(RunStoreError, match="holds a `gemkit eval` run, not a `gemkit test` one"):
        store(tmp_path).open()
    (tmp_path / MANIFEST).write_text('{"world_size": 400}')  # a manifest of no known form
    with pytest.raises(RunStoreError, match="is not a gemkit run manifest"):
        store(tmp_path).open()


@pytest.mark.parametrize("name", ["results.jsonl", MANIFEST, LOCK])
def test_a_link_in_the_folder_is_refused_and_never_followed(tmp_path, name):
    run = started(tmp_path / "run")
    victim = tmp_path / "victim.jsonl"
    victim.write_bytes(b'{"k": 0}\n{"k": 1}\n{"torn')
    (run / name).unlink(missing_ok=True)
    (run / name).symlink_to(victim)
    with pytest.raises(RunStoreError, match=f"{name} is a link"):
        store(run).open()
    assert victim.read_bytes() == b'{"k": 0}\n{"k": 1}\n{"torn', "the target is not truncated"


def test_a_record_file_with_another_hard_link_is_refused(tmp_path):
    run = started(tmp_path / "run")
    os.link(run / "results.jsonl", tmp_path / "elsewhere.jsonl")
    with pytest.raises(RunStoreError, match="has 1 other hard link"):
        store(run).open()


def test_a_record_file_that_is_a_folder_is_refused(tmp_path):
    (tmp_path / "results.jsonl").mkdir()
    with pytest.raises(RunStoreError, match="results.jsonl is not a regular file"):
        store(tmp_path).open()


def test_a_second_run_is_refused_with_the_first_ones_pid_and_the_lock_goes_at_the_end(tmp_path):
    first = store(tmp_path).open()
    with pytest.raises(RunStoreError, match=f"in use by another run \\(pid {os.getpid()}\\)"):
        store(tmp_path).open()
    # another process is refused too (flock is per open file, across processes)
    code = (
        "import sys; from gemkit.runstore import RecordFile, RunStore\n"
        "f = RecordFile('results.jsonl', key=lambda r: r['k'])\n"
        f"RunStore({str(tmp_path)!r}, 'test', {{'seed': 0}}, [f]).open()\n"
    )
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert other.returncode != 0 and f"pid {os.getpid()}" in other.stderr
    first.close()
    assert not (tmp_path / LOCK).exists()
    store(tmp_path).open().close()


def test_failures_in_a_row_stop_the_run_and_a_result_resets_the_count(tmp_path):
    with store(tmp_path, max_failures=3) as s:
        s.fail({"k": 0}, "server down")
        s.fail({"k": 1}, "server down")
        s.append("results.jsonl", {"k": 2})
        s.fail({"k": 3}, "server down")
        s.fail({"k": 4}, "server down")
        with pytest.raises(RunStopped, match="stopped after 3 failures in a row .the last: boom."):
            s.fail({"k": 5}, "boom")
    with store(tmp_path) as s:  # failures do not settle their key: they are tried again
        assert [r["k"] for r in s.records("failures.jsonl")] == [0, 1, 3, 4, 5]
        assert [r["k"] for r in s.records("results.jsonl")] == [2]


def test_a_failed_whole_file_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    with store(tmp_path) as s:
        s.write_json("summary.json", {"a": 1})
        with pytest.raises(KeyError), s.replacing("summary.json") as tmp:
            tmp.write_text("half")
            raise KeyError("the writer failed")
        with s.replacing("export") as tmp:  # a folder replaces a folder
            tmp.mkdir()
            (tmp / "part").write_text("1")
        with s.replacing("export") as tmp:
            tmp.mkdir()
            (tmp / "part").write_text("2")
    assert json.loads((tmp_path / "summary.json").read_text()) == {"a": 1}
    assert (tmp_path / "export" / "part").read_text() == "2"
    assert not [p for p in tmp_path.iterdir() if "tmp-" in p.name]


def test_temporaries_a_killed_run_left_are_removed_when_the_next_one_opens(tmp_path):
    started(tmp_path)
    (tmp_path / ".summary.json.tmp-4242").write_text("half")
    (tmp_path / ".dataset.tmp-4242").mkdir()
    with store(tmp_path):
        pass
    assert not [p for p in tmp_path.iterdir() if "tmp-" in p.name]


def test_read_lines_changes_nothing_and_names_a_damaged_line(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_bytes(b'{"k": 0}\n\n{"k": 1}\n{"k": 2, "to')
    assert [(n, r["k"]) for n, r in read_lines(path)] == [(1, 0), (3, 1)]
    assert path.read_bytes().endswith(b'"to')
    path.write_bytes(b'{"k": 0}\n{"k": \n{"k": 2}\n')
    with pytest.raises(RunStoreError, match=r"x.jsonl, line 2: not a JSON record"):
        list(read_lines(path))


def test_a_folder_path_through_a_file_is_one_line(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(RunStoreError, match="file/run") as e:
        store(tmp_path / "file" / "run").open()
    assert "\n" not in str(e.value)
    with pytest.raises(RunStoreError, match="exists and is not a folder"):
        store(tmp_path / "file").open()


def test_storage_errors_say_what_to_do():
    full = storage_error(OSError(errno.ENOSPC, "No space left on device"), "/d/x.jsonl")
    assert str(full) == (
        "cannot write /d/x.jsonl: No space left on device; free some space, then run the same "
        "command with --resume"
    )
    ro = storage_error(OSError(errno.EROFS, "Read-only file system"), "/d")
    assert "choose a writable --out folder" in str(ro)


# -- real full and read-only file systems (tmpfs, as root) -------------------------------------


@pytest.fixture
def tiny_fs(tmp_path):
    """A 64 KiB tmpfs, unmounted afterwards; skipped where mounting is not allowed."""
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    got = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)],
                         capture_output=True, text=True)  # fmt: skip
    if got.returncode != 0:
        pytest.skip(f"mount -t tmpfs was refused here: {got.stderr.strip()}")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_a_full_disk_keeps_every_record_whole_and_says_how_to_resume(tiny_fs):
    run = tiny_fs / "run"
    with store(run) as s, pytest.raises(RunStoreError) as e:
        for k in range(10_000):
            s.append("results.jsonl", {"k": k, "pad": "p" * 500})
    assert (
        "No space left on device; free some space, then run the same command with --resume"
        in str(e.value)
    )
    data = (run / "results.jsonl").read_bytes()
    assert data.endswith(b"\n"), "a short write was rolled back: no half line"
    kept = [r["k"] for _, r in read_lines(run / "results.jsonl")]
    assert kept == list(range(len(kept))) and kept
    subprocess.run(["mount", "-o", "remount,size=4m", str(tiny_fs)], check=True)
    with store(run) as s:
        assert [r["k"] for r in s.records("results.jsonl")] == kept
        s.append("results.jsonl", {"k": len(kept)})


def test_a_read_only_file_system_is_one_line_and_nothing_is_left(tiny_fs):
    started(tiny_fs / "run")
    before = files(tiny_fs / "run")
    subprocess.run(["mount", "-o", "remount,ro", str(tiny_fs)], check=True)
    with pytest.raises(RunStoreError, match="Read-only file system; the file system is read-only"):
        store(tiny_fs / "run").open()
    with pytest.raises(RunStoreError, match="cannot create .*new: Read-only file system"):
        store(tiny_fs / "new").open()
    assert files(tiny_fs / "run") == before


@pytest.mark.parametrize(
    "error, disk",
    [
        (OSError(errno.ENOSPC, "No space left on device"), True),
        (PermissionError(errno.EACCES, "Permission denied"), True),
        (ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"), False),
        (BrokenPipeError(errno.EPIPE, "Broken pipe"), False),
        (TimeoutError("timed out"), False),
    ],
)
def test_a_peer_failing_is_not_taken_for_the_disk(error, disk):
    # a run told "cannot write OUT: Connection refused; free some space" would send its user
    # to the wrong place, and synth tasks would drop its half-made database for it
    assert is_storage_error(error) is disk


def test_a_hand_written_file_without_a_final_newline_keeps_its_last_record(tmp_path):
    # an editor often leaves no newline after the last line: that record is whole, while a
    # torn write (a killed writer) is not a JSON object and is still skipped
    path = tmp_path / "x.jsonl"
    path.write_bytes(b'{"k": 0}\n{"k": 1}')
    assert [r["k"] for _, r in read_lines(path)] == [0, 1]
    path.write_bytes(b'{"k": 0}\n{"k": 1, "v": [1, 2')
    assert [r["k"] for _, r in read_lines(path)] == [0]


def test_a_failure_a_resume_settled_leaves_the_failure_file_when_the_run_ends(tmp_path):
    with store(tmp_path) as s:
        s.fail({"k": 0, "error": "timed out"}, "timed out")
        s.fail({"k": 1, "error": "timed out"}, "timed out")
        s.append("results.jsonl", {"k": 2})
    with store(tmp_path) as s:  # the resume: k 0 succeeds now, k 1 fails again
        s.append("results.jsonl", {"k": 0})
        s.fail({"k": 1, "error": "still down"}, "still down")
    lines = [json.loads(x) for x in (tmp_path / "failures.jsonl").read_text().splitlines()]
    assert lines == [{"k": 1, "error": "timed out"}, {"k": 1, "error": "still down"}]
    with store(tmp_path) as s:
        assert [r["k"] for r in s.records("failures.jsonl")] == [1, 1]
        s.append("results.jsonl", {"k": 1})
    assert not (tmp_path / "failures.jsonl").exists(), "nothing left to do, nothing to show"
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]


def test_failures_no_later_try_settled_are_left_byte_for_byte(tmp_path):
    with store(tmp_path) as s:
        s.fail({"k": 0, "x": 1.0}, "down")
        s.append("results.jsonl", {"k": 1})
    before = (tmp_path / "failures.jsonl").read_bytes()
    with store(tmp_path) as s:
        s.append("results.jsonl", {"k": 2})
    assert (tmp_path / "failures.jsonl").read_bytes() == before
