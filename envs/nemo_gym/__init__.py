"""NeMo Gym resources servers played in gemkit (`nemo_gym:` family): `nemo_gym:Server-v0`.

`gemkit.make("nemo_gym:Server-v0", base_url=..., rows=[...])` plays a running NeMo Gym
resources server over HTTP (any Python: only the server needs NeMo Gym's Python 3.12): the
reset seed picks a dataset row, a tool call in the action calls the server's tool, and a
final answer goes to its `verify`, whose reward ends the episode.
"""

from __future__ import annotations

from gemkit.registry import register

register(
    "nemo_gym:Server-v0",
    "gemkit.envs.nemo_gym.env:NemoGymEnv",
    description="A NeMo Gym resources server over dataset rows (base_url=..., rows=[...]).",
    tags=("nemo_gym", "remote"),
)
