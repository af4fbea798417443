"""`qa:Synth-v0`: train a search agent on synthesized, verified multi-hop questions.

    env = gemkit.make("qa:Synth-v0", path="runs/qa")     # a `gemkit synth qa` run folder
    env = gemkit.make("qa:Synth-v0")                      # a small set, built once and cached

Synthesis registers the id (through the `gemkit.envs` entry point `qa.synth`) because it
needs synthesized records; the env itself is `gemkit.envs.qa.synthesized`, which never
imports synth.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gemkit.cache import cache_dir as gemkit_cache
from gemkit.errors import GemkitError
from gemkit.registry import register

logger = logging.getLogger(__name__)

ENV_ID = "qa:Synth-v0"
#: the set built on first use when no path is given: small, so it takes seconds, not minutes
DEFAULT_SET = {"n": 32, "world_size": 1500, "seed": 0, "min_inject": 3, "min_fuzz": 1}


def cache_dir() -> Path:
    """Where the default set lives: `$GEMKIT_CACHE_DIR/synth-qa` or ~/.cache/gemkit/synth-qa."""
    return gemkit_cache("synth-qa")


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    # two processes building the same default set would both append to its qa.jsonl
    folder.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock (the run itself still resumes safely alone)
        yield
        return
    # not the run store's `.lock`: the run locks that itself, and a second flock on it from
    # this process would find it taken
    with (folder / ".default-set.lock").open("w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def default_set(folder: str | os.PathLike[str] | None = None, **overrides: Any) -> Path:
    """The folder of the default set, synthesized on first use (offline, rule-based agent)."""
    from gemkit.synth.qa.run import RunConfig, read_records, run

    settings = {**DEFAULT_SET, **overrides}
    name = "-".join(f"{k}{v}" for k, v in sorted(settings.items()))
    out = Path(folder) if folder is not None else cache_dir() / name
    with _locked(out):
        if len(read_records(out)) < settings["n"]:
            logger.info("building the %s question set in %s", ENV_ID, out)
            run(out, RunConfig(**settings), export=False)
    return out


def synth(
    path: str | os.PathLike[str] | None = None,
    *,
    corpus: str | os.PathLike[str] | None = None,
    reward: str = "f1",
    tools: bool = True,
    topk: int = 3,
    max_tool_uses: int = 20,
    split: str | None = None,
    test_fraction: float = 0.1,
    **set_options: Any,
) -> Any:
    """`qa:Synth-v0`: a QA env over a synthesized set (or one side of its answer-disjoint
    split, `split="train"` / `"test"`), with search/access over its corpus."""
    from gemkit.envs.qa.synthesized import synthesized_env

    if path is None:
        path = default_set(**set_options)
    elif set_options:
        raise GemkitError(f"options {sorted(set_options)} only apply to the default set (no path=)")
    return synthesized_env(
        path, corpus=corpus, reward=reward, tools=tools, topk=topk, max_tool_uses=max_tool_uses,
        split=split, test_fraction=test_fraction,
    )  # fmt: skip


def register_synth() -> None:
    """Register `qa:Synth-v0` (done when this module is imported)."""
    register(
        ENV_ID,
        "gemkit.synth.qa.builtin_set:synth",
        description="Synthesized multi-hop questions (inject/fuzz, verified) with search and "
        "access tools over their corpus; F1 or exact-match reward.",
        tags=("qa", "search", "multi-turn", "synthetic"),
        override=True,
    )


register_synth()
