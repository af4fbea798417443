"""The CLI's rich console (output goes to stdout; the library itself only logs)."""

import os

from rich.console import Console

console = Console()
if not console.is_terminal and "COLUMNS" not in os.environ:
    # logs and CI captures are not 80 columns wide: keep tables on one line per row
    console = Console(width=140)
