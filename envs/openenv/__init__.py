"""OpenEnv servers played in gemkit (`openenv:` family): `openenv:Remote-v0`, base_url=...

`gemkit.make("openenv:Remote-v0", base_url="http://127.0.0.1:8000")` opens a session on any
OpenEnv server (OpenEnv's WebSocket endpoint, through OpenEnv's own `GenericEnvClient`) and
plays it under gemkit's contract, in its vectors, tool and context wrappers and rollouts.
OpenEnv is an optional extra: `pip install 'gemkit[openenv]'`.
"""

from __future__ import annotations

from gemkit.registry import register

register(
    "openenv:Remote-v0",
    "gemkit.envs.openenv.env:OpenEnvClientEnv",
    description="A session on an OpenEnv server (base_url=...; needs gemkit[openenv]).",
    tags=("openenv", "remote"),
)
