"""`gemkit view PATH`: browse episodes, QA records and task tuples in a local web page."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gemkit.cli.console import console


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register `gemkit view`."""
    p = sub.add_parser(
        "view",
        help="browse a run folder or dataset in a local web page (read-only)",
        description=(
            "Serve a read-only web page over what gemkit wrote under PATH: eval results, "
            "`run --out` episodes, `synth qa` and `synth tasks` folders, saved datasets."
        ),
    )
    p.add_argument("path", type=Path, metavar="PATH", help="a folder or a .jsonl file")
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1: this machine only)",
    )
    p.add_argument("--port", type=int, default=8765, help="port (default 8765; 0 picks a free one)")
    p.add_argument(
        "--no-verify",
        action="store_true",
        help="do not run the task verifier on reference answers (task pages)",
    )
    p.set_defaults(func=run)


def check_task(raw: Mapping[str, Any], database: Path | None) -> dict[str, Any]:
    """The category's own verifier on a task record's reference answer.

    The category comes from the registry by name; the `ref` a record names is shown, never
    imported, so a record cannot choose which code runs. A model-written verifier (`kind:
    code`) runs in the sandbox, as the `toolworld:` env runs it.
    """
    from gemkit.envs.toolworld.categories import played_category
    from gemkit.envs.toolworld.category import Database, task_from_record
    from gemkit.records.base import RecordError
    from gemkit.records.tasks import TaskRecord

    if database is None:
        return {"note": "the task's database is not available, so the verifier was not run"}
    try:
        record = TaskRecord.parse(dict(raw))
    except RecordError as e:
        return {"note": f"the verifier was not run: {e}"}
    answer = record.reference_answer
    if record.verifier.kind == "code":
        from gemkit.envs.toolworld.program import CodeRuntime

        runtime = CodeRuntime(record, database)
        try:
            verdict = runtime.verify(answer)
        finally:
            runtime.close()
        return {
            "verdict": verdict.to_dict(),
            "verifier": "the record's own verifier code, run in the sandbox",
            "solution_source": record.solution.code,
        }
    category = played_category(record.category)
    db = Database(database)
    try:
        verdict = category.verify(db, task_from_record(record), answer)
    finally:
        db.close()
    ran = category.verifier_ref()
    named = record.verifier.ref
    return {
        "verdict": verdict.to_dict(),
        "verifier": ran,
        "note": f"the record names the verifier {named!r}; the viewer ran the registered {ran!r}"
        if named and named != ran
        else "",
        "solution_source": _solution_source(record.category),
    }


def _solution_source(category: str) -> str | None:
    # the reference solution is synthesis's; a category only played here has none to show
    from gemkit.synth.tasks import TaskSynthesisError, get_category

    try:
        return get_category(category).solution_source()
    except TaskSynthesisError:
        return None


async def _serve(args: argparse.Namespace) -> None:
    from gemkit.view import start

    runner, address = await start(
        args.path,
        host=args.host,
        port=args.port,
        task_check=None if args.no_verify else check_task,
    )
    console.print(f"gemkit view: serving {args.path} at [bold]{address}[/bold] (Ctrl-C stops)")
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        console.print(
            f"[yellow]listening on {args.host}: anyone who can reach this address can read "
            "these records[/yellow]"
        )
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


def run(args: argparse.Namespace) -> int:
    """Serve until interrupted."""
    if not 0 <= args.port <= 65535:
        console.print(f"[red]error:[/red] --port must be 0..65535, got {args.port}")
        return 2
    try:
        asyncio.run(_serve(args))
    except KeyboardInterrupt:
        console.print("stopped")
    return 0
