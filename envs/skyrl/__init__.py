"""SkyRL-gym envs played in gemkit (`skyrl:` family): `skyrl:Env-v0`, env_class=..., rows=[...]

A SkyRL-gym env is built per dataset row (`skyrl_gym.make(env_class, env_config, extras=row)`)
and opened with the row's prompt; `gemkit.make("skyrl:Env-v0", env_class="gsm8k", rows=[...])`
plays those rows under gemkit's contract, the reset seed picking the row. SkyRL-gym is an
optional extra: `pip install 'gemkit[skyrl]'`.
"""

from __future__ import annotations

from gemkit.registry import register

register(
    "skyrl:Env-v0",
    "gemkit.envs.skyrl.env:SkyRLEnv",
    description="A SkyRL-gym env class over dataset rows (env_class=..., rows=[...]).",
    tags=("skyrl",),
)
