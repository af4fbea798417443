"""gemkit: a Gym for agentic LLMs, verified data synthesis, and RL trainers.

`import gemkit` is cheap: the public names, listed in `__init__.pyi`, load on first use.
"""

from __future__ import annotations

from gemkit._lazy import lazy_exports

__version__ = "0.1.0"

__getattr__, __dir__, _names = lazy_exports(__name__, __file__)
__all__ = [*_names, "__version__"]
