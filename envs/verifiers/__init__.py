"""verifiers envs played in gemkit (`verifiers:` family): `verifiers:Env-v0`, taskset=...

`gemkit.make("verifiers:Env-v0", taskset="gemkit-verifiers", taskset_config={...})` loads a
verifiers (0.4.0) taskset and its env and plays their episodes under gemkit's contract: the
env's turns are gemkit's observations, gemkit's actions are the model's replies, and the
episode's verifiers reward is the reward of its last step. Runs offline wherever the taskset
does (one needing a hub download or a sandbox service does not). verifiers is an optional
extra: `pip install 'gemkit[verifiers]'`.
"""

from __future__ import annotations

from gemkit.registry import register

register(
    "verifiers:Env-v0",
    "gemkit.envs.verifiers.env:VerifiersEnv",
    description="A verifiers taskset's episodes (taskset=...; needs gemkit[verifiers]).",
    tags=("verifiers",),
)
