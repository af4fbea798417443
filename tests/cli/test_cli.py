"""The command line as a user meets it: help, the version, pipes, one resume rule, Ctrl-C, and
errors that name the command's own flags."""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import gemkit
from gemkit.cli import build_parser
from gemkit.cli import main as cli
from gemkit.registry import _REGISTRY, register
from gemkit.rollout import play_in_order

GEMKIT = [sys.executable, "-m", "gemkit"]
ENV = "game:GuessTheNumber-v0-easy"
QA = ["synth", "qa", "--world-size", "400", "--seed", "2", "--min-inject", "2", "--min-fuzz", "1"]
TASKS = ["synth", "tasks", "--min-level", "1", "--max-level", "2", "--k", "1", "--no-export"]


def said(capsys) -> str:
    """What the command printed, its lines joined (the console wraps long ones)."""
    return " ".join(capsys.readouterr().out.split())


def _commands(parser: argparse.ArgumentParser, name: str = "gemkit"):
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub, subparser in action.choices.items():
                yield from _commands(subparser, f"{name} {sub}")


def test_every_argument_of_every_command_has_help():
    bare = [
        f"{name}: {action.option_strings or action.dest}"
        for name, parser in _commands(build_parser())
        for action in parser._actions
        if not isinstance(action, argparse._SubParsersAction)
        and action.dest != "help"
        and not action.help
    ]
    assert bare == []


def test_version_prints_the_package_version(capsys):
    with pytest.raises(SystemExit) as e:
        cli(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out.strip() == f"gemkit {gemkit.__version__}"
    from importlib.metadata import version

    assert version("gemkit") == gemkit.__version__, "the package metadata reads the same one"


# -- gemkit list ----------------------------------------------------------------------------------


@pytest.fixture
def odd_ids():
    """Two ids: one whose module is not installed, one whose description looks like markup."""
    ids = ["oddity:Missing-v0", "oddity:Markup-v0"]
    register(ids[0], "no_such_module_gemkit:Env", description="Needs a module.",
             tags=("oddity",), requires=("no_such_module_gemkit",), extra="oddity")  # fmt: skip
    register(ids[1], "gemkit.core:Env", description="(needs gemkit[gem]) and a stray [/b]",
             tags=("oddity",), expert="gemkit.policy:RandomPolicy")  # fmt: skip
    yield ids
    for i in ids:
        _REGISTRY.pop(i, None)


def test_list_in_a_pipe_prints_one_tab_separated_line_per_id(capsys, odd_ids):
    assert cli(["list", "--family", "oddity"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        "oddity:Markup-v0\toddity\texpert",
        "oddity:Missing-v0\toddity\tmissing no_such_module_gemkit: pip install 'gemkit[oddity]'",
    ]


def test_list_marks_experts_and_ids_whose_extra_is_missing(capsys):
    assert cli(["list", "--format", "json"]) == 0
    items = {item["id"]: item for item in json.loads(capsys.readouterr().out)}
    assert items[ENV]["expert"] is True and items[ENV]["missing"] == []
    assert items["math:Builtin-v0"]["expert"] is False
    assert items["rg:leg_counting"]["requires"] == ["reasoning_gym"]
    assert items["gem:game:Sudoku-v0-easy"]["requires"] == ["gem"]


def test_list_ids_prints_the_ids_alone(capsys):
    assert cli(["list", "--family", "game", "--format", "ids"]) == 0
    ids = capsys.readouterr().out.splitlines()
    assert ENV in ids and all(i.startswith("game:") and "\t" not in i for i in ids)


def test_list_prints_descriptions_as_text_not_markup(capsys, odd_ids):
    assert cli(["list", "--family", "oddity", "--format", "table"]) == 0
    out = capsys.readouterr().out
    assert "(needs gemkit[gem]) and a stray [/b]" in out
    assert "pip install 'gemkit[oddity]'" in out


def test_list_of_nothing_says_why_on_stderr_and_prints_no_line(capsys):
    assert cli(["list", "--family", "nosuchfamily"]) == 1
    got = capsys.readouterr()
    assert got.out == "" and "no env ids match" in got.err


# -- ids and policies are checked before any episode ----------------------------------------------


def test_run_checks_every_id_and_policy_before_playing_any(tmp_path, capsys, caplog):
    out = tmp_path / "run"
    assert cli(["run", ENV, "math:Builtin-v0", "--policy", "expert", "-n", "3",
                "--out", str(out)]) == 2  # fmt: skip
    said_ = said(capsys)
    assert "math:Builtin-v0 has no expert policy" in said_ and "Traceback" not in said_
    assert not out.exists(), f"{ENV} was not played before the failing id was checked"


def test_a_bad_gemkit_cores_stops_the_command_before_any_episode(tmp_path, capsys, monkeypatch):
    # the math grader reads it at its first symbolic check: without this, only the episodes
    # that reached one would fail, midway through the run
    monkeypatch.setenv("GEMKIT_CORES", "many")
    out = tmp_path / "run"
    assert cli(["run", "math:Builtin-v0", "--policy", "random", "-n", "4", "--out", str(out)]) == 2
    said_ = said(capsys)
    assert "GEMKIT_CORES must be a whole number of cores" in said_ and "'many'" in said_
    assert "Traceback" not in said_ and not out.exists()


def test_an_id_whose_package_is_missing_is_refused_naming_the_install(capsys, odd_ids, tmp_path):
    assert cli(["run", odd_ids[0], "--policy", "random", "-n", "1"]) == 2
    said_ = said(capsys)
    assert "no_such_module_gemkit" in said_ and "pip install 'gemkit[oddity]'" in said_


async def test_episodes_that_all_fail_leave_no_exception_unretrieved(caplog):
    def broken_policy(seed: int):
        raise RuntimeError(f"no policy for seed {seed}")

    with caplog.at_level(logging.ERROR, logger="asyncio"):
        with pytest.raises(RuntimeError, match="no policy"):
            await play_in_order(
                ENV, range(6), broken_policy, concurrency=3, commit=lambda k, e: None
            )
        await asyncio.sleep(0)
        gc.collect()
    assert "never retrieved" not in caplog.text


# -- one resume rule ------------------------------------------------------------------------------

RUNS = {
    "eval": ["eval", ENV, "--policy", "expert", "-n", "2"],
    "run": ["run", ENV, "-n", "2"],
    "synth qa": [*QA, "-n", "1"],
    "synth tasks": [*TASKS, "-n", "1"],
}


@pytest.mark.parametrize("command", RUNS)
def test_a_folder_holding_a_run_is_continued_only_with_resume(tmp_path, capsys, command):
    out = tmp_path / "run"
    argv = [*RUNS[command], "--out", str(out)]
    assert cli(argv) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    capsys.readouterr()
    assert cli(argv) == 2
    said_ = said(capsys)
    assert "pass --resume to continue it" in said_ and "Traceback" not in said_
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before
    assert cli([*argv, "--resume"]) == 0


def test_filter_follows_the_same_rule_before_it_calls_the_model(tmp_path, capsys):
    from gemkit.runstore import RunStore

    out = tmp_path / "hard"
    with RunStore(out, "filter", {}, []):
        pass  # a filter run's folder
    argv = ["filter", str(tmp_path / "qa"), "--out", str(out), "--llm", "http://127.0.0.1:9/v1",
            "--model", "m"]  # fmt: skip
    assert cli(argv) == 2
    assert "already holds a `gemkit filter` run; pass --resume" in said(capsys)


def test_ctrl_c_says_where_the_work_is_and_the_command_that_goes_on(tmp_path):
    out = tmp_path / "run"
    argv = ["eval", "game:Sudoku-v0-hard", "--policy", "random", "-n", "100000",
            "--concurrency", "4", "--out", str(out)]  # fmt: skip
    proc = subprocess.Popen([*GEMKIT, *argv], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env={**os.environ, "COLUMNS": "1000"})  # fmt: skip
    try:
        deadline = time.monotonic() + 300  # a guard against a hang, not a speed bound
        episodes = out / "episodes.jsonl"
        while time.monotonic() < deadline and proc.poll() is None:
            if episodes.exists() and episodes.stat().st_size:
                break
            time.sleep(0.05)
        assert proc.poll() is None, proc.stdout.read()
        proc.send_signal(signal.SIGINT)
        printed, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, printed
    assert f"what was done is kept in {out}" in printed
    again = f"gemkit eval game:Sudoku-v0-hard --policy random -n 100000 --concurrency 4 --out {out}"
    assert f"{again} --resume" in printed
    assert "Traceback" not in printed


def test_a_command_that_writes_nothing_says_only_interrupted(monkeypatch, capsys):
    import gemkit.cli.list_cmd as list_cmd

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(list_cmd, "run", interrupted)
    assert cli(["list"]) == 130
    assert capsys.readouterr().out.strip() == "interrupted"


# -- errors that name the command's flags --------------------------------------------------------


def test_eval_without_an_endpoint_names_the_flag(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("GEMKIT_BASE_URL", raising=False)
    assert cli(["eval", ENV, "--model", "m", "--out", str(tmp_path / "run")]) == 2
    said_ = said(capsys)
    assert "pass --base-url URL (or set GEMKIT_BASE_URL)" in said_ and "base_url=" not in said_


def test_eval_without_a_model_name_names_the_flag(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("GEMKIT_MODEL", raising=False)
    argv = ["eval", ENV, "--base-url", "http://127.0.0.1:9/v1", "--out", str(tmp_path / "run")]
    assert cli(argv) == 2
    assert "pass --model NAME (or set GEMKIT_MODEL)" in said(capsys)


@pytest.mark.parametrize("command", RUNS)
def test_an_out_folder_that_cannot_be_made_says_so(capsys, command):
    assert cli([*RUNS[command], "--out", "/proc/nope"]) == 2
    said_ = said(capsys)
    assert "cannot create /proc/nope" in said_ and "choose an --out folder" in said_
    assert "vanished" not in said_


def test_synth_tasks_needs_an_out_folder_like_every_other_run(capsys):
    with pytest.raises(SystemExit) as e:
        cli(["synth", "tasks", "-n", "1"])
    assert e.value.code == 2 and "--out" in capsys.readouterr().err
    assert not Path("synth-tasks").exists()


def test_a_folder_holding_another_commands_run_is_refused_with_or_without_resume(tmp_path, capsys):
    out = tmp_path / "run"
    assert cli([*RUNS["synth qa"], "--out", str(out)]) == 0
    capsys.readouterr()
    for extra in ([], ["--resume"]):
        assert cli([*RUNS["synth tasks"], "--out", str(out), *extra]) == 2
        assert "holds a `gemkit synth qa` run, not a `gemkit synth tasks` one" in said(capsys)
