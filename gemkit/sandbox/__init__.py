"""Sandboxed execution of untrusted Python (bubblewrap or unshare, warm worker pools).

```python
from gemkit.sandbox import Sandbox

sb = Sandbox(timeout=5, memory_mb=256)
result = await sb.run("print(2 + 2)")        # fresh namespace each call
session = sb.session()                       # variables kept between calls
```
"""

from __future__ import annotations

from gemkit.sandbox.backends import BACKENDS, SandboxUnavailableError, choose_backend
from gemkit.sandbox.sandbox import (
    ExecResult,
    Sandbox,
    SandboxError,
    Session,
    shared_sandbox,
    truncation_marker,
)

__all__ = [
    "BACKENDS",
    "ExecResult",
    "Sandbox",
    "SandboxError",
    "SandboxUnavailableError",
    "Session",
    "choose_backend",
    "shared_sandbox",
    "truncation_marker",
]
