"""Where gemkit keeps what it builds once and reuses: search indexes, built-in data sets."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir(part: str) -> Path:
    """`$GEMKIT_CACHE_DIR/part`, else `$XDG_CACHE_HOME/gemkit/part` or `~/.cache/gemkit/part`."""
    root = os.environ.get("GEMKIT_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "gemkit"
    )
    return Path(root) / part
