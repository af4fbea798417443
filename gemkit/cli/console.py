"""The CLI's rich console (output goes to stdout; the library itself only logs)."""

from rich.console import Console

console = Console()
