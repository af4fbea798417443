"""LLM access: an OpenAI-compatible async client, chat and token-id policies, token counters.

The names listed in `__init__.pyi` are imported on first use, so `import gemkit.llm` stays
light.
"""

from __future__ import annotations

from gemkit._lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, __file__)
