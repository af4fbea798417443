"""`gemkit eval`: evaluate a model (or a built-in policy) on env ids, resumably."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from gemkit.cli.arguments import positive
from gemkit.cli.console import console
from gemkit.llm.episode_shape import CONTEXTS, TOOL_FORMATS


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register `gemkit eval`."""
    p = sub.add_parser("eval", help="evaluate a model or a built-in policy on env ids")
    p.add_argument("env_ids", nargs="+", metavar="ID")
    p.add_argument("--policy", choices=["llm", "expert", "random"], default="llm")
    p.add_argument("--model", help="model name (or GEMKIT_MODEL)")
    p.add_argument("--base-url", help="OpenAI-compatible endpoint (or GEMKIT_BASE_URL)")
    p.add_argument("--api-key", help="API key (or GEMKIT_API_KEY)")
    p.add_argument("-n", "--episodes", type=positive, default=10, help="episodes per env id")
    p.add_argument("--seed", type=int, default=0, help="episode k uses seed SEED+k")
    p.add_argument("--concurrency", type=positive, default=16, help="episodes in flight at once")
    p.add_argument("--context", choices=CONTEXTS, default="none", help="context strategy")
    p.add_argument("--max-context", type=positive, default=32_000, help="context window in tokens")
    p.add_argument("--tools", default="", help="comma-separated tool names, e.g. python,search")
    p.add_argument(
        "--tool-format",
        choices=TOOL_FORMATS,
        default="text",
        help="text: tool schemas and call format in the prompt (any server); native: the "
        "schemas as the request's tools= list and calls as tool_calls (a server with tool "
        "calling, e.g. vLLM --enable-auto-tool-choice, llama.cpp --jinja)",
    )
    p.add_argument("--system-prompt", default=None)
    p.add_argument("--temperature", type=float, default=None)
    p.add_argument(
        "--max-tokens", type=positive, default=None, help="token budget of each policy reply"
    )
    p.add_argument(
        "--max-summary-tokens",
        type=positive,
        default=1024,
        help="token budget of each --context summary, apart from --max-tokens (default 1024)",
    )
    p.add_argument("--out", type=Path, required=True, help="results folder")
    p.add_argument("--resume", action="store_true", help="continue a run in --out")
    p.set_defaults(func=run)


def _wrappers(args: argparse.Namespace, client: Any) -> list:
    from gemkit.llm.episode_shape import chat_wrappers

    return chat_wrappers(
        args.tool_format,
        system_prompt=args.system_prompt,
        context=args.context,
        max_context=args.max_context,
        summarizer=client,
        max_summary_tokens=args.max_summary_tokens,
    )


def summary_table(summary: dict[str, dict[str, float]]) -> Table:
    """The final per-env table."""
    table = Table(title="evaluation")
    cols = ("env", "episodes", "success", "return", "turns", "tool calls", "tokens", "errors")
    for col in cols:
        if col == "env":
            table.add_column(col, overflow="fold")
        else:
            table.add_column(col, justify="right", min_width=len(col), no_wrap=True)
    for env_id, s in summary.items():
        table.add_row(
            env_id,
            f"{s['episodes']}" + (f" ({s['missing']} missing)" if s.get("missing") else ""),
            f"{s['success_rate']:.1%}",
            f"{s['mean_return']:.3f}",
            f"{s['mean_turns']:.2f}",
            f"{s['mean_tool_calls']:.2f}",
            f"{s['mean_tokens']:.0f}",
            str(s["errors"]),
        )
    return table


def settings_of(args: argparse.Namespace, model: str | None) -> dict[str, Any]:
    """The settings that change an eval's results (its manifest; `--resume` must match them)."""
    llm = args.policy == "llm"
    return {
        "policy": args.policy,
        "model": model if llm else None,
        "temperature": args.temperature if llm else None,
        "max_tokens": args.max_tokens if llm else None,
        "system_prompt": args.system_prompt if llm else None,
        "tools": [t.strip() for t in args.tools.split(",") if t.strip()],
        "tool_format": args.tool_format if llm else None,
        "context": args.context if llm else None,
        "max_context": args.max_context if llm and args.context != "none" else None,
        "max_summary_tokens": args.max_summary_tokens
        if llm and args.context == "summary"
        else None,
    }


def _without_credentials(url: str) -> str:
    """An endpoint's address as the manifest records it: no user:password@, query or fragment."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=host, query="", fragment=""))


async def _main(args: argparse.Namespace) -> dict[str, dict[str, float]]:
    from gemkit.evaluate import evaluate
    from gemkit.llm.episode_shape import chat_policy
    from gemkit.registry import make_policy, spec

    for env_id in args.env_ids:
        spec(env_id)  # unknown ids fail before any work
    tools = [t for t in args.tools.split(",") if t.strip()]
    client = None
    if args.policy == "llm":
        from gemkit.llm import LLMClient

        sampling = {"temperature": args.temperature, "max_tokens": args.max_tokens}
        client = LLMClient(
            args.base_url,
            args.api_key,
            args.model,
            max_concurrency=args.concurrency,
            **{k: v for k, v in sampling.items() if v is not None},
        )
    settings = settings_of(args, client.model if client is not None else None)

    def policy_factory(env_id: str, seed: int):
        if client is not None:
            return chat_policy(client, args.tool_format)
        return make_policy(args.policy, env_id, seed=seed)

    def policy_info(seed: int) -> dict[str, Any]:
        if client is None:
            return {"name": args.policy, "seed": seed}
        return {
            "name": "llm",
            "model": client.model,
            "temperature": args.temperature,
            "max_tokens": args.max_tokens,
        }

    def make_kwargs(env_id: str) -> dict[str, Any]:
        kw: dict[str, Any] = {"tools": tools} if tools else {}
        if client is not None:
            kw["wrappers"] = _wrappers(args, client)
        return kw

    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[wins]} solved"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console) as progress:
        tasks: dict[str, Any] = {}

        def on_start(done: Mapping[str, dict[str, Any]]) -> None:
            for env_id in args.env_ids:
                prior = [
                    r for r in done.values() if r["env_id"] == env_id and r["index"] < args.episodes
                ]
                tasks[env_id] = progress.add_task(
                    env_id,
                    total=args.episodes,
                    completed=len(prior),
                    wins=sum(r["success"] for r in prior),
                )

        def on_episode(env_id: str, k: int, ep: Any) -> None:
            task = tasks[env_id]
            if ep.error:
                console.print(f"[yellow]{env_id} episode {k}: {ep.error}[/yellow]")
                return
            wins = progress.tasks[task].fields["wins"] + int(ep.success)
            progress.update(task, advance=1, wins=wins)

        try:
            return await evaluate(
                args.env_ids,
                policy_factory,
                args.episodes,
                args.out,
                seed=args.seed,
                concurrency=args.concurrency,
                resume=args.resume,
                make_kwargs=make_kwargs,
                on_episode=on_episode,
                on_start=on_start,
                policy_info=policy_info,
                settings=settings,
                info={"base_url": _without_credentials(client.base_url) if client else None},
            )
        finally:
            if client is not None:
                await client.close()


def run(args: argparse.Namespace) -> int:
    """Run the evaluation and print the table."""
    summary = asyncio.run(_main(args))
    console.print(summary_table(summary))
    console.print(f"results in {args.out}/ (episodes.jsonl, summary.json)")
    errors = sum(s.get("errors", 0) for s in summary.values())
    if errors:
        console.print(
            f"[yellow]{errors} episodes ended in an error (see {args.out}/errors.jsonl); "
            "rerun with --resume to play them again[/yellow]"
        )
    for env_id, s in summary.items():
        if s.get("context_warnings"):
            console.print(
                f"[yellow]{env_id}: in {s['context_warnings']} episodes the --context strategy "
                "could not keep the chat within --max-context (see context_warnings in "
                "episodes.jsonl)[/yellow]"
            )
        if s.get("summaries_truncated"):
            console.print(
                f"[yellow]{env_id}: {s['summaries_truncated']} summaries were cut at "
                "--max-summary-tokens[/yellow]"
            )
    missing = sum(s.get("missing", 0) for s in summary.values())
    if missing:
        console.print(f"[yellow]{missing} episodes did not finish; rerun with --resume[/yellow]")
        return 1
    return 0
