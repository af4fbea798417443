"""`gemkit serve TARGET`: run a service (`search`: a BM25 search server over a JSONL corpus;
`env`: an env server; `model`: a model server with token ids and weight updates)."""

from __future__ import annotations

import argparse
import time

from gemkit.cli.arguments import add_token_option, positive
from gemkit.cli.console import console
from gemkit.cli.serve_model import add_model_parser
from gemkit.errors import GemkitError
from gemkit.search.server import SearchLimits


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register `gemkit serve` and its targets."""
    p = sub.add_parser("serve", help="run a service (search server, env server, model server)")
    p.set_defaults(func=run, serve_parser=p)
    targets = p.add_subparsers(dest="target", metavar="TARGET")
    _add_search(targets)
    _add_env(targets)
    add_model_parser(targets)


def _add_search(targets: argparse._SubParsersAction) -> None:
    p = targets.add_parser(
        "search",
        help="serve a JSONL corpus over HTTP (POST /retrieve, POST /access, GET /health)",
        description="Index a JSONL corpus ({id, title, text, url} per line) with SQLite FTS5 "
        "and serve it with the Search-R1 /retrieve protocol.",
    )
    p.add_argument("--corpus", required=True, help="JSONL file, one document per line")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port, 1-65535 (default 8000)")
    p.add_argument("--topk", type=int, default=3, help="results per query when not asked")
    p.add_argument("--cache-dir", help="where the index file is kept (default ~/.cache/gemkit)")
    p.add_argument(
        "--content-hash",
        action="store_true",
        help="reuse the index while the corpus content is unchanged, whatever its mtime",
    )
    d = SearchLimits()
    limits = p.add_argument_group("limits per request")
    for flag, default, what in (
        ("--max-queries", d.max_queries, "queries (or urls) per request"),
        ("--max-topk", d.max_topk, "results per query"),
        ("--max-results", d.max_results, "queries x topk per request"),
        ("--max-query-chars", d.max_query_chars, "characters per query or url"),
        ("--max-body-kb", d.max_body // 1024, "request body size in KiB"),
        ("--threads", d.threads, "searches running at once"),
    ):
        limits.add_argument(flag, type=positive, default=default, help=f"{what} ({default})")
    add_token_option(p)
    p.set_defaults(serve=_run_search)


def _run_search(args: argparse.Namespace) -> int:
    from gemkit.search.index import SearchIndex
    from gemkit.search.server import serve
    from gemkit.serving import check_port, resolve_token

    check_port(args.port)
    if not 1 <= args.topk <= args.max_topk:
        raise GemkitError(f"--topk must be from 1 to --max-topk ({args.max_topk}), got {args.topk}")
    limits = SearchLimits(
        max_queries=args.max_queries,
        max_topk=args.max_topk,
        max_results=args.max_results,
        max_query_chars=args.max_query_chars,
        max_body=args.max_body_kb * 1024,
        threads=args.threads,
    )
    start = time.perf_counter()
    with console.status(f"indexing {args.corpus} …"):
        index = SearchIndex.open(
            args.corpus, cache_dir=args.cache_dir, content_hash=args.content_hash
        )
    action = "built" if index.rebuilt else "reused"
    console.print(
        f"[green]{action}[/green] index of {len(index):,} docs in "
        f"{time.perf_counter() - start:.2f}s ([dim]{index.db_path}[/dim])"
    )
    token = resolve_token(args.token)
    auth = "token required" if token else "no token"
    serve(
        index,
        args.host,
        args.port,
        default_topk=args.topk,
        limits=limits,
        token=token,
        on_start=lambda: console.print(
            f"serving on [cyan]http://{args.host}:{args.port}[/cyan] ({auth})  "
            'POST /retrieve {"queries": [...], "topk": k}  POST /access {"urls": [...]}  '
            "(Ctrl-C to stop)",
            highlight=False,
        ),
        warn=lambda line: console.print(f"[yellow]{line}[/yellow]", highlight=False),
    )
    return 0


def run(args: argparse.Namespace) -> int:
    """Run the chosen service, or show the targets."""
    target = getattr(args, "serve", None)
    if target is None:
        args.serve_parser.print_help()
        return 2
    return int(target(args) or 0)


def _add_env(targets: argparse._SubParsersAction) -> None:
    """Register `gemkit serve env ID` on the `serve` command's targets."""
    p = targets.add_parser(
        "env",
        help="serve an env over HTTP (POST /reset, /step, /clone, /close; GET /health)",
        description="Serve one gemkit env id over HTTP with one env per session, so any "
        "trainer in any process or language can play it (see docs/training.md).",
    )
    p.add_argument("env_id", metavar="ID", help="env id, e.g. game:GuessTheNumber-v0-easy")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8010, help="port, 1-65535 (default 8010)")
    p.add_argument("--max-sessions", type=positive, default=1024, help="open sessions at most")
    p.add_argument(
        "--session-ttl",
        type=float,
        default=3600.0,
        help="close a session idle this many seconds (default 3600; 0: never)",
    )
    p.add_argument("--max-body-kb", type=positive, default=4096, help="largest request body (KiB)")
    p.add_argument("--workers", type=positive, help="threads for sync env calls (default CPUs + 4)")
    add_token_option(p)
    p.set_defaults(serve=_run_env)


def _run_env(args: argparse.Namespace) -> int:
    from gemkit.integrations.http_env import EnvServer
    from gemkit.serving import check_port, run_app

    check_port(args.port)
    server = EnvServer(
        args.env_id,
        max_sessions=args.max_sessions,
        session_ttl=args.session_ttl,
        max_body=args.max_body_kb * 1024,
        workers=args.workers,
        token=args.token,
    )
    auth = "token required" if server.token else "no token"
    run_app(
        server.app(),
        args.host,
        args.port,
        token=server.token,
        on_start=lambda: console.print(
            f"serving [bold]{args.env_id}[/bold] on [cyan]http://{args.host}:{args.port}[/cyan] "
            f"({auth})  POST /reset /step /clone /close  (Ctrl-C to stop)",
            highlight=False,
        ),
        warn=lambda line: console.print(f"[yellow]{line}[/yellow]", highlight=False),
    )
    return 0
