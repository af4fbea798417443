"""`gemkit eval`: evaluate a model (or a built-in policy) on env ids, resumably."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Mapping
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from gemkit.cli.arguments import add_run_folder, add_timeout_option, positive
from gemkit.cli.console import console, heartbeat
from gemkit.episode_shape import CONTEXTS, TOOL_FORMATS
from gemkit.errors import GemkitError

#: the reply bound `--max-tokens` defaults to (gemkit.llm.client.DEFAULT_MAX_TOKENS)
MAX_TOKENS = 2048
#: the window a --context strategy keeps to when neither --max-context nor the server says
MAX_CONTEXT = 32_000


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register `gemkit eval`."""
    p = sub.add_parser("eval", help="evaluate a model or a built-in policy on env ids")
    p.add_argument("env_ids", nargs="+", metavar="ID", help="env ids (see gemkit list)")
    p.add_argument(
        "--policy", choices=["llm", "expert", "random"], default="llm",
        help="llm: the model at --base-url (default); expert, random: built-in policies that "
        "need no model",
    )  # fmt: skip
    p.add_argument("--model", help="model name (or GEMKIT_MODEL)")
    p.add_argument("--base-url", help="OpenAI-compatible endpoint (or GEMKIT_BASE_URL)")
    p.add_argument("--api-key", help="API key (or GEMKIT_API_KEY)")
    p.add_argument("-n", "--episodes", type=positive, default=10, help="episodes per env id")
    p.add_argument("--seed", type=int, default=0, help="episode k uses seed SEED+k")
    p.add_argument("--concurrency", type=positive, default=16, help="episodes in flight at once")
    p.add_argument("--context", choices=CONTEXTS, default="none", help="context strategy")
    p.add_argument(
        "--max-context",
        type=positive,
        default=None,
        help="context window in tokens a --context strategy keeps the chat within (default: "
        f"the server's window when it says, else {MAX_CONTEXT:,})",
    )
    p.add_argument(
        "--token-counter",
        choices=("server", "heuristic"),
        default="server",
        help="how a --context strategy counts tokens: server (default), the model server's "
        "own tokenizer and chat template (vLLM's and llama.cpp's /tokenize), falling back to "
        "the heuristic where it has none; heuristic, an estimate off by up to 60%% on JSON",
    )
    p.add_argument("--tools", default="", help="comma-separated tool names, e.g. python,search")
    p.add_argument(
        "--tool-format",
        choices=TOOL_FORMATS,
        default="text",
        help="text: tool schemas and call format in the prompt (any server); native: the "
        "schemas as the request's tools= list and calls as tool_calls (a server with tool "
        "calling, e.g. vLLM --enable-auto-tool-choice, llama.cpp --jinja)",
    )
    p.add_argument(
        "--tool-choice",
        default=None,
        metavar="CHOICE",
        help="with --tool-format native: the request's tool_choice, 'auto' (the server's "
        "default), 'required' (a call every turn; small models often write calls as text "
        "otherwise), 'none', or a tool name to force",
    )
    p.add_argument(
        "--system-prompt", default=None, help="a system message put before each episode's chat"
    )
    p.add_argument(
        "--temperature", type=float, default=None,
        help="sampling temperature (not sent unless given: the server's default applies)",
    )  # fmt: skip
    p.add_argument(
        "--max-tokens",
        type=positive,
        default=MAX_TOKENS,
        help=f"token budget of each policy reply (default {MAX_TOKENS}); a reply cut there is "
        "counted and marked with finish_reason 'length'",
    )
    p.add_argument(
        "--max-summary-tokens",
        type=positive,
        default=1024,
        help="token budget of each --context summary, apart from --max-tokens (default 1024)",
    )
    add_timeout_option(p)
    add_run_folder(p, what="results folder (run.json, episodes.jsonl, errors.jsonl, summary.json)")
    p.set_defaults(func=run)


def _check_endpoint(args: argparse.Namespace) -> None:
    """`--policy llm` needs an endpoint and a model: say so in the command's own flags."""
    import os

    from gemkit.llm.client import ENV_BASE_URL, ENV_MODEL

    if not (args.base_url or os.environ.get(ENV_BASE_URL)):
        raise GemkitError(
            f"--policy llm (the default) needs a model endpoint: pass --base-url URL (or set "
            f"{ENV_BASE_URL}), e.g. --base-url http://localhost:8000/v1; --policy expert or "
            "random needs none"
        )
    if not (args.model or os.environ.get(ENV_MODEL)):
        raise GemkitError(
            f"--policy llm needs the model's name: pass --model NAME (or set {ENV_MODEL}), the "
            "name the endpoint serves, e.g. --model Qwen/Qwen3-8B"
        )


def _wrappers(args: argparse.Namespace, client: Any, counter: Any = None) -> list:
    from gemkit.episode_shape import chat_wrappers

    return chat_wrappers(
        args.tool_format,
        system_prompt=args.system_prompt,
        context=args.context,
        max_context=args.max_context,
        summarizer=client,
        max_summary_tokens=args.max_summary_tokens,
        counter=counter,
    )


def _tool_choice(choice: str) -> str | dict[str, Any]:
    """The request's `tool_choice`: a mode, or the OpenAI form that forces one tool."""
    if choice in ("auto", "required", "none"):
        return choice
    return {"type": "function", "function": {"name": choice}}


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
        "tool_choice": args.tool_choice if llm else None,
        "context": args.context if llm else None,
        "max_context": args.max_context if llm and args.context != "none" else None,
        "max_summary_tokens": args.max_summary_tokens
        if llm and args.context == "summary"
        else None,
    }


def _context_counter(args: argparse.Namespace, client: Any) -> Any:
    """The token counter of the --context strategy (None: the heuristic, or no budget), and
    `args.max_context` settled: the flag, else the server's window, else `MAX_CONTEXT`."""
    counter = None
    if client is not None and args.context in ("discard-all", "discard-75", "summary"):
        if args.token_counter == "server":
            from gemkit.llm.token_counters import ServerTokenCounter

            counter = ServerTokenCounter(client.base_url, client.model, api_key=client.api_key)
            if not counter.exact:
                console.print(f"[yellow]--context token counts: {counter.source}[/yellow]")
    if args.max_context is None:
        args.max_context = (counter.window if counter is not None else None) or MAX_CONTEXT
    return counter


def _without_credentials(url: str) -> str:
    """An endpoint's address as the manifest records it: no user:password@, query or fragment."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=host, query="", fragment=""))


async def _main(args: argparse.Namespace) -> dict[str, dict[str, float]]:
    from gemkit.episode_shape import chat_policy
    from gemkit.evaluate import evaluate
    from gemkit.registry import check_policy, make_policy

    for env_id in args.env_ids:  # every id and policy is checked before any episode is played
        check_policy(args.policy, env_id)
    if args.tool_choice is not None and args.tool_format != "native":
        raise GemkitError(
            f"--tool-choice {args.tool_choice} needs --tool-format native (the text format "
            "sends no tools= list for it to apply to)"
        )
    tools = [t for t in args.tools.split(",") if t.strip()]
    client = None
    if args.policy == "llm":
        from gemkit.llm import LLMClient

        _check_endpoint(args)

        sampling = {"temperature": args.temperature, "max_tokens": args.max_tokens}
        client = LLMClient(
            args.base_url,
            args.api_key,
            args.model,
            max_concurrency=args.concurrency,
            timeout=args.timeout,
            **{k: v for k, v in sampling.items() if v is not None},
        )
    counter = _context_counter(args, client)
    settings = settings_of(args, client.model if client is not None else None)

    def policy_factory(env_id: str, seed: int):
        if client is not None:
            choice = {"tool_choice": _tool_choice(args.tool_choice)} if args.tool_choice else {}
            return chat_policy(client, args.tool_format, **choice)
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
            kw["wrappers"] = _wrappers(args, client, counter)
        return kw

    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[wins]} solved"),
        TimeElapsedColumn(),
    )

    def describe() -> str:
        done = sum(int(t.completed) for t in progress.tasks)
        wins = sum(t.fields.get("wins", 0) for t in progress.tasks)
        total = args.episodes * len(args.env_ids)
        return f"eval: {done}/{total} episodes saved, {wins} solved"

    progress = Progress(*columns, console=console)
    with progress, heartbeat(describe):
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
            if ep.context_overflow:
                console.print(f"[yellow]{env_id} episode {k}: {ep.context_overflow}[/yellow]")
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
                info={
                    "base_url": _without_credentials(client.base_url) if client else None,
                    "timeout": client.timeout if client else None,
                    "token_counter": counter.kind if counter is not None else None,
                },
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
        if args.tool_format == "native" and s.get("text_tool_calls"):
            native, text = s.get("native_tool_calls", 0), s["text_tool_calls"]
            console.print(
                f"[yellow]{env_id}: {text} of {native + text} tool calls came as text in the "
                "reply, not as the server's tool_calls (its tool-call parser did not "
                "recognise them); try --tool-choice required, or --tool-format text[/yellow]"
            )
        if s.get("summaries_truncated"):
            console.print(
                f"[yellow]{env_id}: {s['summaries_truncated']} summaries were cut at "
                "--max-summary-tokens[/yellow]"
            )
        if s.get("replies_cut"):
            window = s.get("replies_cut_at_window", 0)
            where = (
                f" ({window} of them at the end of the model's context window)" if window else ""
            )
            console.print(
                f"[yellow]{env_id}: {s['replies_cut']} model replies were cut at their token "
                f"limit{where} and graded as cut; each is marked finish_reason 'length' in "
                "episodes.jsonl: raise --max-tokens, or keep the chat shorter with "
                "--context[/yellow]"
            )
        if s.get("context_overflows"):
            console.print(
                f"[yellow]{env_id}: {s['context_overflows']} episodes ended when their chat "
                "outgrew the model's context window (the server refused the next request; see "
                "context_overflow in episodes.jsonl): use a --context strategy with "
                "--max-context at the server's window[/yellow]"
            )
    missing = sum(s.get("missing", 0) for s in summary.values())
    if missing:
        console.print(f"[yellow]{missing} episodes did not finish; rerun with --resume[/yellow]")
        return 1
    return 0
