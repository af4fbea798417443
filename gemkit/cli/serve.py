"""`gemkit serve TARGET`: run a service (`search`: a BM25 search server over a JSONL corpus)."""

from __future__ import annotations

import argparse
import time

from gemkit.cli.console import console
from gemkit.errors import GemkitError


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register `gemkit serve` and its targets."""
    p = sub.add_parser("serve", help="run a service (search server, env server)")
    p.set_defaults(func=run, serve_parser=p)
    targets = p.add_subparsers(dest="target", metavar="TARGET")
    _add_search(targets)
    from gemkit.integrations.http_env import add_env_parser

    add_env_parser(targets)


def _add_search(targets: argparse._SubParsersAction) -> None:
    p = targets.add_parser(
        "search",
        help="serve a JSONL corpus over HTTP (POST /retrieve, POST /access, GET /health)",
        description="Index a JSONL corpus ({id, title, text, url} per line) with SQLite FTS5 "
        "and serve it with the Search-R1 /retrieve protocol.",
    )
    p.add_argument("--corpus", required=True, help="JSONL file, one document per line")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    p.add_argument("--topk", type=int, default=3, help="results per query when not asked")
    p.add_argument("--cache-dir", help="where the index file is kept (default ~/.cache/gemkit)")
    p.add_argument(
        "--content-hash",
        action="store_true",
        help="reuse the index while the corpus content is unchanged, whatever its mtime",
    )
    p.set_defaults(serve=_run_search)


def _run_search(args: argparse.Namespace) -> int:
    from gemkit.search.index import SearchIndex
    from gemkit.search.server import serve

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
    console.print(
        f"serving on [cyan]http://{args.host}:{args.port}[/cyan]  "
        'POST /retrieve {"queries": [...], "topk": k}  POST /access {"urls": [...]}  '
        "(Ctrl-C to stop)",
        highlight=False,
    )
    try:
        serve(index, args.host, args.port, default_topk=args.topk)
    except OSError as e:
        raise GemkitError(
            f"cannot listen on {args.host}:{args.port} ({e.strerror or e}); "
            "pick a free port with --port"
        ) from None
    return 0


def run(args: argparse.Namespace) -> int:
    """Run the chosen service, or show the targets."""
    target = getattr(args, "serve", None)
    if target is None:
        args.serve_parser.print_help()
        return 2
    return int(target(args) or 0)
