"""`gemkit serve model PATH`: the parser and runner of the model server (imports torch late)."""

from __future__ import annotations

import argparse
from pathlib import Path

from gemkit.cli.arguments import add_token_option, count, positive
from gemkit.cli.console import console
from gemkit.errors import GemkitError


def add_model_parser(targets: argparse._SubParsersAction) -> None:
    """Register `gemkit serve model`."""
    p = targets.add_parser(
        "model",
        help="serve a local Hugging Face model over the OpenAI protocol with token ids, "
        "log-probs and weight updates (CPU runs and tests)",
        description="Serve a local model folder (or --tiny ENV's tiny random model) with "
        "POST /v1/completions (token-id prompts), /v1/chat/completions, /update_weights.",
    )
    p.add_argument("path", nargs="?", help="local Hugging Face model folder (nothing downloads)")
    p.add_argument("--tiny", metavar="ENV_ID", help="serve the tiny random model built for ENV_ID")
    p.add_argument("--seed", type=int, default=0, help="seed of --tiny and of sampling (0)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port, 1-65535 (default 8000)")
    p.add_argument("--device", default="cpu", help="torch device (default cpu)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    p.add_argument("--max-tokens", type=positive, default=256, help="cap on max_tokens")
    p.add_argument("--max-batch", type=positive, default=64, help="rows per forward pass")
    p.add_argument("--max-body-kb", type=positive, default=4096, help="JSON body limit")
    p.add_argument(
        "--batch-wait-ms",
        type=float,
        default=3.0,
        help="wait this long for more requests before a forward pass (default 3)",
    )
    p.add_argument(
        "--served-model-name",
        nargs="+",
        metavar="NAME",
        help="the model names requests may ask for (default: the folder, or tiny:ENV); "
        "any other name is a 404, as with vLLM",
    )
    p.add_argument(
        "--weight-version",
        type=count,
        default=0,
        help="the version of the weights served at start (default 0); each update must be "
        "the next version",
    )
    p.add_argument(
        "--upload-timeout",
        type=positive,
        default=120,
        help="seconds a weight upload may take to arrive (default 120)",
    )
    p.add_argument("--ready-file", help="write the base URL to this file once serving")
    add_token_option(p)
    p.set_defaults(serve=run_model)


def run_model(args: argparse.Namespace) -> int:
    """Load the model and serve it until interrupted."""
    import torch

    from gemkit.serving import check_port, resolve_token, run_app
    from gemkit.train.engine import load_engine
    from gemkit.train.model_server import ModelServer, ServerLimits
    from gemkit.vector.aio import new_event_loop

    check_port(args.port)
    torch.set_num_threads(max(1, args.threads))
    with console.status("loading the model …"):
        engine = load_engine(
            args.path,
            tiny=args.tiny,
            seed=args.seed,
            device=args.device,
            names=args.served_model_name or (),
            version=args.weight_version,
        )
    if not 0 <= args.batch_wait_ms <= 1000:
        raise GemkitError(f"--batch-wait-ms must be from 0 to 1000, got {args.batch_wait_ms:g}")
    limits = ServerLimits(
        max_tokens=args.max_tokens,
        max_batch=args.max_batch,
        max_body=args.max_body_kb * 1024,
        batch_wait_s=args.batch_wait_ms / 1000,
        upload_timeout_s=float(args.upload_timeout),
    )
    token = resolve_token(args.token)
    server = ModelServer(engine, limits=limits, token=token)
    url = f"http://{args.host}:{args.port}/v1"

    def started() -> None:
        console.print(
            f"serving [cyan]{engine.name}[/cyan] on [cyan]{url}[/cyan] "
            f"(weight_version {engine.version}, {'token required' if token else 'no token'}; "
            "Ctrl-C to stop)",
            highlight=False,
        )
        if args.ready_file:
            Path(args.ready_file).write_text(url)

    # uvloop (a core dependency) when installed: less overhead per request
    run_app(
        server.app(), args.host, args.port, token=token, on_start=started, loop=new_event_loop()
    )
    return 0
