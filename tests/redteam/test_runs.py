"""Attacks on result folders, as a user (or a hostile folder) would make them: mixed resumes,
two runs at once, damaged and linked files, a failing model server, full and read-only disks.

Every test here failed on the code before the run store (`gemkit.runstore`): the run mixed two
settings into one file, both runs wrote, a refused run cut a file, a link was followed, the
error was a traceback, or infrastructure failures were kept as rejections.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from gemkit.cli import main as cli
from gemkit.envs.games.guess_the_number import GuessTheNumberExpert
from gemkit.testing.openai_server import ScriptedOpenAIServer

ENV = "game:GuessTheNumber-v0-easy"
GEMKIT = [sys.executable, "-m", "gemkit"]
QA = ["synth", "qa", "--world-size", "400", "--seed", "2", "--min-inject", "2", "--min-fuzz", "1"]
TASKS = ["synth", "tasks", "--min-level", "1", "--max-level", "3", "--k", "1", "--no-export"]


def binary_search_model(request: dict) -> str:
    expert = GuessTheNumberExpert(low=1, high=20)
    action = ""
    for message in request["messages"]:
        if message["role"] == "user":
            action = expert.choose(message["content"])
    return f"Let me think. {action}"


def snapshot(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() or p.is_symlink()
    }


@pytest.fixture(autouse=True)
def wide_console(monkeypatch):
    """Messages are one line each; a wide console keeps rich from folding them."""
    from gemkit.cli.console import console

    monkeypatch.setattr(console, "width", 1000)


def one_line_error(out: str) -> str:
    """The CLI's error line; the output must hold no traceback."""
    assert "Traceback" not in out, out
    errors = [line for line in out.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, out
    return errors[0]


def keys(path: Path) -> list[str]:
    return [json.loads(x)["key"] for x in path.read_text().splitlines()]


# -- a resume with other settings -------------------------------------------------------------


def test_eval_resume_with_another_policy_is_refused_not_merged(tmp_path, capsys):
    assert cli(["eval", ENV, "--policy", "expert", "-n", "3", "--out", str(tmp_path)]) == 0
    before = snapshot(tmp_path)
    capsys.readouterr()
    got = cli(["eval", ENV, "--policy", "random", "-n", "6", "--out", str(tmp_path), "--resume"])
    line = one_line_error(capsys.readouterr().out)
    assert got == 2 and "policy: 'expert' there, 'random' now" in line
    assert snapshot(tmp_path) == before


def test_eval_resume_with_another_model_is_refused_and_each_episode_names_its_player(
    tmp_path, capsys
):
    with ScriptedOpenAIServer(binary_search_model) as srv:
        base = ["eval", ENV, "--base-url", srv.base_url, "-n", "2", "--out", str(tmp_path)]
        assert cli([*base, "--model", "model-a", "--temperature", "0.5"]) == 0
        capsys.readouterr()
        assert cli([*base, "--model", "model-b", "--temperature", "0.5", "--resume"]) == 2
        line = one_line_error(capsys.readouterr().out)
        assert "model: 'model-a' there, 'model-b' now" in line
        assert cli([*base, "--model", "model-a", "--resume"]) == 2
        assert "temperature: 0.5 there, None now" in capsys.readouterr().out
    rows = [json.loads(x) for x in (tmp_path / "episodes.jsonl").read_text().splitlines()]
    assert [r["policy"] for r in rows] == [
        # max_tokens: the bound every request carried (the client's default, --max-tokens)
        {"name": "llm", "model": "model-a", "temperature": 0.5, "max_tokens": 2048, "seed": None}
    ] * 2
    manifest = json.loads((tmp_path / "run.json").read_text())
    assert manifest["settings"]["model"] == "model-a" and manifest["kind"] == "eval"


@pytest.mark.parametrize(
    "change, named",
    [
        (["--max-level", "4"], "max_level: 3 there, 4 now"),  # the documented resume's slip
        (["--category", "shopping_basket"], "category: 'trip_planning' there"),
        (["--seed", "1"], "seed: 0 there, 1 now"),
        (["--k", "2"], "k: 1 there, 2 now"),
    ],
)
def test_synth_tasks_resumed_with_other_settings_is_refused_naming_them(
    tmp_path_factory, capsys, change, named
):
    out = tmp_path_factory.mktemp("tasks")
    assert cli([*TASKS, "-n", "1", "--seed", "0", "--out", str(out)]) == 0
    before = snapshot(out)
    capsys.readouterr()
    argv = [*TASKS, "-n", "2", "--seed", "0", "--out", str(out), "--resume"]
    flag = change[0]
    i = argv.index(flag) if flag in argv else None
    argv = argv[:i] + argv[i + 2 :] + change if i is not None else argv + change
    assert cli(argv) == 2
    assert named in one_line_error(capsys.readouterr().out)
    assert snapshot(out) == before, "no record of the other settings was mixed in"


# -- damaged and linked files -----------------------------------------------------------------


def test_a_refused_eval_changes_no_byte_of_a_folder_with_a_damaged_line(tmp_path, capsys):
    assert cli(["eval", ENV, "--policy", "expert", "-n", "4", "--out", str(tmp_path)]) == 0
    path = tmp_path / "episodes.jsonl"
    rows = path.read_text().splitlines(keepends=True)
    path.write_text(rows[0] + '{"key": "damaged\n' + "".join(rows[1:]) + '{"torn')
    before = snapshot(tmp_path)
    capsys.readouterr()
    # without --resume and with it: refused (the file is damaged), and nothing is cut
    assert cli(["eval", ENV, "--policy", "expert", "-n", "4", "--out", str(tmp_path)]) == 2
    assert "episodes.jsonl, line 2" in one_line_error(capsys.readouterr().out)
    argv = ["eval", ENV, "--policy", "expert", "-n", "4", "--out", str(tmp_path), "--resume"]
    assert cli(argv) == 2
    assert "episodes.jsonl, line 2: not a JSON record" in one_line_error(capsys.readouterr().out)
    assert snapshot(tmp_path) == before


def test_loading_a_damaged_episodes_file_names_the_file_and_line(tmp_path):
    from gemkit.rollout import load_jsonl
    from gemkit.runstore import RunStoreError

    assert cli(["eval", ENV, "--policy", "expert", "-n", "3", "--out", str(tmp_path)]) == 0
    path = tmp_path / "episodes.jsonl"
    rows = path.read_text().splitlines(keepends=True)
    path.write_text(rows[0] + rows[1][: len(rows[1]) // 2] + "\n" + rows[2])
    with pytest.raises(RunStoreError, match=r"episodes.jsonl, line 2: not a JSON record"):
        load_jsonl(path)


@pytest.mark.parametrize(
    "argv, name",
    [
        (["eval", ENV, "--policy", "expert", "-n", "2", "--resume"], "episodes.jsonl"),
        (["run", ENV, "-n", "2", "--resume"], "episodes.jsonl"),
        ([*QA, "-n", "1", "--resume"], "qa.jsonl"),
        ([*TASKS, "-n", "1", "--resume"], "tasks.jsonl"),
        ([*TASKS, "-n", "1", "--resume"], "progress.log"),
    ],
)
def test_a_linked_file_in_a_result_folder_is_refused_and_its_target_untouched(
    tmp_path, capsys, argv, name
):
    out = tmp_path / "out"
    assert cli([*argv, "--out", str(out)]) == 0
    victim = tmp_path / "victim"
    victim.write_bytes(b"the user's own file\nwithout a record in it")
    (out / name).unlink()
    (out / name).symlink_to(victim)
    capsys.readouterr()
    assert cli([*argv, "--out", str(out)]) == 2
    assert f"{name} is a link" in one_line_error(capsys.readouterr().out)
    assert victim.read_bytes() == b"the user's own file\nwithout a record in it"


# -- two runs on one folder -------------------------------------------------------------------


def test_a_second_eval_on_a_busy_folder_is_refused_naming_the_first_ones_pid(tmp_path, capsys):
    release = threading.Event()

    async def gated(request: dict) -> str:
        import asyncio

        while not release.is_set():
            await asyncio.sleep(0.01)
        return binary_search_model(request)

    out = tmp_path / "run"
    with ScriptedOpenAIServer(gated) as srv:
        argv = ["eval", ENV, "--base-url", srv.base_url, "--model", "m", "-n", "4",
                "--concurrency", "2", "--out", str(out)]  # fmt: skip
        first = subprocess.Popen([*GEMKIT, *argv], stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE, text=True)  # fmt: skip
        try:
            deadline = time.monotonic() + 120  # a guard, not a speed bound
            while not srv.chat_requests and first.poll() is None and time.monotonic() < deadline:
                time.sleep(0.01)
            assert srv.chat_requests, "the first run is playing (and waiting on the model)"
            result: list[int] = []
            second = threading.Thread(target=lambda: result.append(cli([*argv, "--resume"])))
            second.start()
            second.join(timeout=120)
            refused = not second.is_alive()
            release.set()
            second.join()
            assert refused and result == [2], "the second run must not play"
            line = one_line_error(capsys.readouterr().out)
            assert f"in use by another run (pid {first.pid})" in line
            assert first.wait(timeout=120) == 0, first.stderr.read()
        finally:
            release.set()
            if first.poll() is None:
                first.kill()
    assert sorted(keys(out / "episodes.jsonl")) == [f"{ENV}#{k}" for k in range(4)]


@pytest.mark.parametrize("argv, watch", [([*QA, "-n", "60"], "qa.jsonl"),
                                         ([*TASKS, "-n", "40"], "tasks.jsonl")])  # fmt: skip
def test_a_second_synth_run_on_a_busy_folder_is_refused(tmp_path, capsys, argv, watch):
    out = tmp_path / "run"
    first = subprocess.Popen([*GEMKIT, *argv, "--out", str(out)], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while first.poll() is None and time.monotonic() < deadline:
            if (out / watch).exists() and (out / watch).read_bytes().count(b"\n") >= 1:
                break
            time.sleep(0.01)
        assert first.poll() is None, "the first run is still writing"
        assert cli([*argv, "--out", str(out), "--resume"]) == 2
        assert f"in use by another run (pid {first.pid})" in one_line_error(capsys.readouterr().out)
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
    ids = [json.loads(x).get("id") for x in (out / watch).read_text().splitlines()]
    assert len(ids) == len(set(ids))


# -- infrastructure failures ------------------------------------------------------------------


def test_eval_counts_the_episodes_that_failed_and_stops_after_five_in_a_row(tmp_path, capsys):
    with ScriptedOpenAIServer(binary_search_model, api_key="right") as srv:
        base = ["eval", ENV, "--base-url", srv.base_url, "--model", "m", "--concurrency", "1"]
        out = tmp_path / "two"
        assert cli([*base, "-n", "2", "--api-key", "wrong", "--out", str(out)]) == 1
        shown = capsys.readouterr().out
        assert re.search(r"│\s+2\s+│\s*$", shown, re.M), "the table's errors column says 2"
        assert "2 episodes ended in an error" in shown
        summary = json.loads((out / "summary.json").read_text())
        assert summary[ENV]["errors"] == 2 and summary[ENV]["missing"] == 2

        out = tmp_path / "eight"
        assert cli([*base, "-n", "8", "--api-key", "wrong", "--out", str(out)]) == 2
        line = one_line_error(capsys.readouterr().out)
        assert "stopped after 5 failures in a row" in line and "--resume" in line
        assert len((out / "errors.jsonl").read_text().splitlines()) == 5
        assert cli([*base, "-n", "8", "--api-key", "right", "--out", str(out), "--resume"]) == 0
        summary = json.loads((out / "summary.json").read_text())
        assert summary[ENV]["errors"] == 0 and summary[ENV]["episodes"] == 8


def rewriting_model(body: dict) -> str:
    """A scripted QA model: applies the first edit option offered; answers closed-book wrongly."""
    system, user = body["messages"][0]["content"], body["messages"][-1]["content"]
    if "Reply with JSON" in system:
        question = user.split("\n")[0].removeprefix("Question: ")
        option = re.search(r'^(\d+)\. (\w+): replace "(.*?)" with "(.*?)"', user, re.M)
        n, _, before, after = option.groups()
        return json.dumps({"choice": int(n), "question": question.replace(before, after)})
    return "Nobody Knows"


def ks(path: Path) -> list[int]:
    """The work items of a record file (none where the run wrote no such record)."""
    return [json.loads(x)["k"] for x in path.read_text().splitlines()] if path.exists() else []


def test_synth_qa_against_a_refusing_server_stops_soon_and_retries_those_items_on_resume(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.delenv("GEMKIT_API_KEY", raising=False)
    out = tmp_path / "run"
    argv = [*QA, "-n", "2", "--model", "m", "--out", str(out)]
    with ScriptedOpenAIServer(rewriting_model, api_key="secret") as srv:  # we send none: 401
        assert cli([*argv, "--llm", srv.base_url]) == 2
    line = one_line_error(capsys.readouterr().out)
    assert "stopped after 5 failures in a row" in line and "401" in line
    assert ks(out / "failed.jsonl") == [0, 1, 2, 3, 4], "5 work items, not n x 20"
    assert ks(out / "rejected.jsonl") == [] and ks(out / "qa.jsonl") == []
    with ScriptedOpenAIServer(rewriting_model) as srv:  # the model is back, at another port
        assert cli([*argv, "--llm", srv.base_url, "--resume"]) == 0
    settled = ks(out / "qa.jsonl") + ks(out / "rejected.jsonl")
    assert min(settled) == 0, "the failed items ran again"
    assert len(ks(out / "qa.jsonl")) == 2


# -- bad numbers, resumed rates ---------------------------------------------------------------


@pytest.mark.parametrize("argv", [["run", ENV], ["eval", ENV, "--policy", "expert"]])
def test_a_concurrency_of_zero_is_a_usage_error(tmp_path, capsys, argv):
    with pytest.raises(SystemExit) as e:
        cli([*argv, "--concurrency", "0", "--out", str(tmp_path / "x")])
    assert e.value.code == 2
    assert "expected a number >= 1, got 0" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_a_resumed_synth_qa_run_reports_its_own_rate_not_the_records_it_found(
    tmp_path, capsys, monkeypatch
):
    import gemkit.synth.qa.run as qa_run

    monkeypatch.setattr(qa_run, "MIN_RATE_RECORDS", 1)  # a rate from 2 records, for the test
    assert cli([*QA, "-n", "2", "--out", str(tmp_path)]) == 0
    assert "kept per minute" in capsys.readouterr().out
    assert cli([*QA, "-n", "2", "--out", str(tmp_path), "--resume"]) == 0
    shown = capsys.readouterr().out
    assert "kept per minute" not in shown, "it kept nothing itself: no rate to show"
    assert re.search(r"found on disk \(resumed\)\s+│\s+2", shown)


# -- full, read-only and impossible folders ---------------------------------------------------


COMMANDS = {
    "eval": ["eval", ENV, "--policy", "expert", "-n", "40"],
    "run": ["run", ENV, "-n", "40"],
    "synth qa": [*QA, "-n", "2"],
    "synth tasks": [*TASKS, "-n", "2"],
}


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


def leftovers(folder: Path) -> list[str]:
    return [p.name for p in folder.rglob("*") if "tmp" in p.name or p.name == ".lock"]


@pytest.mark.parametrize("command", COMMANDS)
def test_a_read_only_folder_is_one_line(tiny_fs, capsys, command):
    subprocess.run(["mount", "-o", "remount,ro", str(tiny_fs)], check=True)
    assert cli([*COMMANDS[command], "--out", str(tiny_fs / "run")]) == 2
    assert "Read-only file system" in one_line_error(capsys.readouterr().out)


@pytest.mark.parametrize("command", COMMANDS)
def test_an_output_path_through_a_file_is_one_line(tmp_path, capsys, command):
    (tmp_path / "file").write_text("")
    assert cli([*COMMANDS[command], "--out", str(tmp_path / "file" / "run")]) == 2
    assert "Not a directory" in one_line_error(capsys.readouterr().out)


@pytest.mark.parametrize("command", COMMANDS)
def test_a_full_disk_is_one_line_and_leaves_no_temporary_or_half_record(tiny_fs, capsys, command):
    out = tiny_fs / "run"
    assert cli([*COMMANDS[command], "--out", str(out)]) == 2
    line = one_line_error(capsys.readouterr().out)
    assert "No space left on device" in line or "full" in line, line
    assert "run the same command with --resume" in line
    assert leftovers(out) == []
    for path in out.glob("*.jsonl"):
        assert path.read_bytes().endswith(b"\n") or path.stat().st_size == 0
    if (out / "db").exists():
        assert list((out / "db").iterdir()) == [], "no database without its record"


def test_an_eval_that_filled_the_disk_resumes_to_the_bytes_of_a_run_that_did_not(
    tiny_fs, tmp_path, capsys
):
    argv = COMMANDS["eval"]
    assert cli([*argv, "--out", str(tmp_path / "whole")]) == 0
    out = tiny_fs / "run"
    assert cli([*argv, "--out", str(out)]) == 2
    assert "No space left on device" in capsys.readouterr().out
    subprocess.run(["mount", "-o", "remount,size=8m", str(tiny_fs)], check=True)
    assert cli([*argv, "--out", str(out), "--resume"]) == 0
    assert snapshot(out) == snapshot(tmp_path / "whole")


# -- a run folder another user redirects -------------------------------------------------------

#: a user other than the one running the tests (nobody), to own what a hostile user plants
OTHER_UID = 65534
needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="planting files as another user needs root (os.chown)"
)
EVAL = ["eval", ENV, "--policy", "expert", "-n", "2"]
RUN_FILES = ("run.json", "episodes.jsonl", "summary.json", ".lock")


def shared_folder(tmp_path: Path) -> Path:
    """A folder every user may write into (sticky, as /tmp), where the attacker plants."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    return shared


def planted_link(shared: Path, name: str, target: Path, uid: int) -> Path:
    link = shared / name
    link.symlink_to(target)
    os.lchown(link, uid, uid)
    return link


@needs_root
def test_an_out_folder_that_is_another_users_link_is_refused_and_its_target_untouched(
    tmp_path, capsys
):
    # the attacker plants shared/results -> a folder of the victim's; root runs an eval there
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "notes.txt").write_text("the victim's own file")
    link = planted_link(shared_folder(tmp_path), "results", victim, OTHER_UID)
    assert cli([*EVAL, "--out", str(link)]) == 2
    assert "is a link" in one_line_error(capsys.readouterr().out)
    assert sorted(p.name for p in victim.iterdir()) == ["notes.txt"]


def test_an_out_folder_that_is_a_link_of_ones_own_is_refused_too(tmp_path, capsys):
    target = tmp_path / "elsewhere"
    target.mkdir()
    (tmp_path / "out").symlink_to(target)
    assert cli([*EVAL, "--out", str(tmp_path / "out")]) == 2
    assert "is a link" in one_line_error(capsys.readouterr().out)
    assert list(target.iterdir()) == []


@needs_root
def test_a_path_through_another_users_link_is_refused(tmp_path, capsys):
    # shared/team -> the victim's folder: --out shared/team/run1 would be made inside it
    victim = tmp_path / "victim"
    victim.mkdir()
    link = planted_link(shared_folder(tmp_path), "team", victim, OTHER_UID)
    assert cli([*EVAL, "--out", str(link / "run1")]) == 2
    line = one_line_error(capsys.readouterr().out)
    assert "is a link that another user (uid 65534) made" in line
    assert list(victim.iterdir()) == []


def test_a_path_through_a_link_of_ones_own_is_followed(tmp_path, capsys):
    (tmp_path / "real").mkdir()
    (tmp_path / "mine").symlink_to(tmp_path / "real")  # e.g. ~/runs -> /data/runs
    assert cli([*EVAL, "--out", str(tmp_path / "mine" / "run1")]) == 0
    assert (tmp_path / "real" / "run1" / "episodes.jsonl").exists()


@needs_root
def test_an_out_folder_of_another_user_is_refused(tmp_path, capsys):
    # the attacker made shared/results first, as their own: they could swap its files
    results = shared_folder(tmp_path) / "results"
    results.mkdir()
    os.chown(results, OTHER_UID, OTHER_UID)
    assert cli([*EVAL, "--out", str(results)]) == 2
    line = one_line_error(capsys.readouterr().out)
    assert "belongs to another user (uid 65534)" in line
    assert list(results.iterdir()) == []


def test_an_out_folder_anyone_may_write_is_refused(tmp_path, capsys):
    results = tmp_path / "results"
    results.mkdir()
    results.chmod(0o777)
    assert cli([*EVAL, "--out", str(results)]) == 2
    assert "may be written by any user" in one_line_error(capsys.readouterr().out)
    assert list(results.iterdir()) == []


def test_a_folder_swapped_for_a_link_after_the_run_opened_it_is_not_followed(tmp_path):
    # the run holds its folder open: renaming it away and planting a link in its place
    # (what a user who can write the parent could do) does not redirect a single record
    from gemkit.runstore import RecordFile, RunStore

    out, moved, target = tmp_path / "out", tmp_path / "moved", tmp_path / "target"
    target.mkdir()
    records = RecordFile("records.jsonl", key=lambda r: r["key"])
    with RunStore(out, "test", {}, [records]) as store:
        store.append("records.jsonl", {"key": 1})
        out.rename(moved)
        out.symlink_to(target)
        store.append("records.jsonl", {"key": 2})
        store.write_json("summary.json", {"n": 2})
    assert list(target.iterdir()) == []
    assert [json.loads(x)["key"] for x in (moved / "records.jsonl").read_text().splitlines()] == [1, 2]  # fmt: skip
    assert json.loads((moved / "summary.json").read_text()) == {"n": 2}
    assert not (moved / ".lock").exists()  # released in the folder it was taken in
