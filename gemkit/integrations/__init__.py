"""Adapters that let other RL trainers and env hubs play gemkit envs.

- `gemkit.integrations.http_env`: an HTTP env server and `RemoteEnv` (any trainer, any language)
- `gemkit.integrations.trl`: TRL `GRPOTrainer` environment factory and multi-turn `rollout_func`
- `gemkit.integrations.verl`: a verl agent loop with the response mask
- `gemkit.integrations.openrlhf`: an OpenRLHF agent executor

and that take any gemkit env to other env standards (docs/standards.md):

- `gemkit.integrations.verifiers`: a verifiers taskset and env (taskset id `gemkit-verifiers`)
- `gemkit.integrations.openenv`: an OpenEnv `Environment`, served by OpenEnv's own app
- `gemkit.integrations.skyrl`: a SkyRL-gym text env
- `gemkit.integrations.nemo_gym`: a NeMo Gym resources server (Python 3.12 and later)

Each module imports its trainer only when used, so importing gemkit never pulls them in.
"""
