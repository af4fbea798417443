"""Adapters that let other RL trainers play gemkit envs.

- `gemkit.integrations.http_env`: an HTTP env server and `RemoteEnv` (any trainer, any language)
- `gemkit.integrations.trl`: TRL `GRPOTrainer` environment factory and multi-turn `rollout_func`
- `gemkit.integrations.verl`: a verl agent loop with the response mask
- `gemkit.integrations.openrlhf`: an OpenRLHF agent executor

Each module imports its trainer only when used, so importing gemkit never pulls them in.
"""
