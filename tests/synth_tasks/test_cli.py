"""`gemkit synth tasks`: the parser the lead hooks into `gemkit synth`, the run and its table."""

from __future__ import annotations

import argparse
import json

from gemkit.cli.synth_tasks import add_tasks_parser


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gemkit synth")
    add_tasks_parser(p.add_subparsers())
    return p


def test_synth_tasks_runs_resumes_and_prints_the_level_table(tmp_path, capsys):
    argv = ["tasks", "--category", "shopping_basket", "-n", "2", "--max-level", "3",
            "--out", str(tmp_path), "--k", "2", "--seed", "5"]  # fmt: skip
    args = _parser().parse_args(argv)
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "pass@2" in out and "mean valid answers" in out
    lines = (tmp_path / "tasks.jsonl").read_text().splitlines()
    assert len(lines) == 2 and all(json.loads(x)["category"] == "shopping_basket" for x in lines)
    assert (tmp_path / "dataset").is_dir()
    args = _parser().parse_args([*argv, "--resume"])
    assert args.func(args) == 0
    assert "resumed 2" in capsys.readouterr().out
    assert (tmp_path / "tasks.jsonl").read_text().splitlines() == lines


def test_defaults_match_the_documented_command():
    args = _parser().parse_args(["tasks", "--out", "trips"])
    assert (args.category, args.n, args.k, args.workers, args.llm) == (
        "trip_planning", 10, 4, 1, None,
    )  # fmt: skip


def test_through_gemkit_main_a_bad_category_is_a_message_not_a_traceback(
    monkeypatch, capsys, tmp_path
):
    from gemkit.cli import main
    from gemkit.cli import synth as synth_cli

    monkeypatch.setitem(synth_cli.SUBCOMMANDS, "tasks", add_tasks_parser)
    argv = ["synth", "tasks", "--category", "trip_plannin", "-n", "1", "--out", str(tmp_path)]
    assert main(argv) == 2
    out = capsys.readouterr().out
    assert "unknown task category 'trip_plannin'" in out and "Did you mean 'trip_planning'" in out
    assert "Traceback" not in out


def test_demo_part_synthesizes_tasks_and_the_demo_plays_and_saves_them(tmp_path, capsys):
    from gemkit.cli.demo import play_tasks
    from gemkit.cli.synth_tasks import demo_tasks

    assert demo_tasks(tmp_path / "tasks", n=2) == 0
    assert len((tmp_path / "tasks" / "tasks.jsonl").read_text().splitlines()) == 2
    play_tasks(tmp_path / "tasks", tmp_path / "played", 2)
    out = capsys.readouterr().out
    assert "toolworld:TripPlanning-v0" in out and out.count("the baseline agent made") == 2
    played = [
        json.loads(x) for x in (tmp_path / "played" / "episodes.jsonl").read_text().splitlines()
    ]
    assert [p["index"] for p in played] == [0, 1] and all(p["tool_calls"] for p in played)
