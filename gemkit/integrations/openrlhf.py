"""OpenRLHF: a gemkit env as an OpenRLHF agent (`--train.agent_func_path`).

OpenRLHF (0.11) loads the agent file and builds its `AgentExecutor` class with no arguments
(`openrlhf.trainer.ray.vllm_engine._load_agent_executor`: "Agent module must contain
AgentExecutor class", a subclass of `AgentExecutorBase`). `agent_executor_class` is that class:
OpenRLHF's `MultiTurnAgentExecutor` over a gemkit agent instance. The executor makes one
`AgentInstance` per prompt and calls:

- `await reset({"observation": prompt, "label": label})` -> `{"observation": text}`: the text
  the model is prompted with;
- `await step({"observation_text", "action_text", "label", "sampling_params"})` ->
  `{"rewards": tensor, "scores": tensor, "environment_feedback": text, "done": bool,
  "sampling_params", "extra_logs": {...}}`; the executor appends the action tokens (trained
  on) and the feedback tokens (masked out) and sums the rewards.

Write a file for `--train.agent_func_path`:

    from gemkit.integrations.openrlhf import agent_executor_class
    AgentExecutor = agent_executor_class("game:GuessTheNumber-v0-easy")

and a prompt file with `prompts_jsonl` (`--data.input_key input --data.label_key label`): each
label holds the env id and seed, so the instance replays exactly that episode.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gemkit.core import areset_of, astep_of
from gemkit.errors import GemkitError
from gemkit.integrations.requires import missing_dependency
from gemkit.llm.episode_tokens import observation_text as _text

#: How env feedback is framed after the model's turn; `{observation}` is the env's text.
#: The default closes the assistant turn and opens a user turn in ChatML (Qwen, many others).
CHATML_FEEDBACK = "<|im_end|>\n<|im_start|>user\n{observation}<|im_end|>\n<|im_start|>assistant\n"
CHATML_PROMPT = "<|im_start|>user\n{observation}<|im_end|>\n<|im_start|>assistant\n"


def parse_label(label: Any) -> dict[str, Any]:
    """The `{"env_id", "seed"}` a prompt's label carries (a JSON string or a dict)."""
    if isinstance(label, str):
        try:
            label = json.loads(label)
        except json.JSONDecodeError:
            label = None
    if not isinstance(label, dict) or "env_id" not in label:
        raise GemkitError(
            f'the OpenRLHF label must be JSON like {{"env_id": ..., "seed": ...}} '
            f"(write prompts with gemkit.integrations.openrlhf.prompts_jsonl), got {label!r:.120}"
        )
    return label


class GemkitAgent:
    """The agent logic, independent of OpenRLHF: one env per instance, reset from the label."""

    env_id: str | None = None
    prompt_template: str = CHATML_PROMPT
    feedback_template: str = CHATML_FEEDBACK
    make_kwargs: dict[str, Any] = {}  # noqa: RUF012 - replaced per subclass, never mutated

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.env: Any = None
        self.total = 0.0

    async def reset(self, states: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        """Build and reset the env named by the label; return the framed first observation."""
        from gemkit.registry import make

        label = parse_label(states.get("label")) if states.get("label") else {}
        env_id = label.get("env_id") or self.env_id
        if not env_id:
            raise GemkitError("no env id: set it in the label or in agent_instance_class(env_id)")
        if self.env is not None:
            self.env.close()
        self.env = make(env_id, **self.make_kwargs)
        seed = label.get("seed")
        obs, _ = await areset_of(self.env, seed=None if seed is None else int(seed))
        self.total = 0.0
        return {"observation": self.prompt_template.format(observation=_text(obs))}

    async def step(self, states: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        """Apply the model's action; return reward, framed feedback and whether it is done."""
        import torch

        if self.env is None:
            raise GemkitError("step() before reset(): OpenRLHF resets each instance first")
        obs, reward, terminated, truncated, info = await astep_of(self.env, states["action_text"])
        done = bool(terminated or truncated)
        self.total += float(reward)
        feedback = "" if done else self.feedback_template.format(observation=_text(obs))
        if done:
            self.env.close()
            self.env = None
        return {
            "rewards": torch.tensor(float(reward)),
            "scores": torch.tensor(self.total),
            "environment_feedback": feedback,
            "done": done,
            "sampling_params": states.get("sampling_params"),
            "extra_logs": {"success": torch.tensor(float(bool(info.get("success", False))))},
        }


def agent_instance_class(
    env_id: str | None = None,
    *,
    prompt_template: str = CHATML_PROMPT,
    feedback_template: str = CHATML_FEEDBACK,
    **make_kwargs: Any,
) -> type:
    """An `AgentInstance` class for OpenRLHF's `--agent_func_path` file.

    It subclasses OpenRLHF's `AgentInstanceBase` (its executor checks that): without OpenRLHF,
    or one of the packages `openrlhf.utils.agent` imports (`pylatexenc`, ...), it raises
    `MissingDependencyError` naming the package (`GemkitAgent` is the logic alone). `env_id`
    is the default when a label names none.
    """
    if env_id is not None:
        from gemkit.registry import spec

        spec(env_id)
    for template, name in ((prompt_template, "prompt"), (feedback_template, "feedback")):
        if "{observation}" not in template:
            raise GemkitError(f"{name}_template must contain '{{observation}}', got {template!r}")
    try:
        from openrlhf.utils.agent import AgentInstanceBase
    except ImportError as e:  # OpenRLHF's executor rejects a class without its base
        raise missing_dependency("openrlhf", "agent_instance_class()", e) from e
    return type(
        "AgentInstance",
        (GemkitAgent, AgentInstanceBase),
        {
            "env_id": env_id,
            "prompt_template": prompt_template,
            "feedback_template": feedback_template,
            "make_kwargs": dict(make_kwargs),
        },
    )


def agent_executor_class(
    env_id: str | None = None,
    *,
    prompt_template: str = CHATML_PROMPT,
    feedback_template: str = CHATML_FEEDBACK,
    **make_kwargs: Any,
) -> type:
    """The `AgentExecutor` class of an OpenRLHF agent file (`--train.agent_func_path`).

    OpenRLHF builds it with no arguments; it is OpenRLHF's own `MultiTurnAgentExecutor` over
    `agent_instance_class(env_id, ...)` (the same arguments), so each prompt plays one episode
    of the env its label names. Without OpenRLHF it raises `MissingDependencyError`.
    """
    instance = agent_instance_class(
        env_id, prompt_template=prompt_template, feedback_template=feedback_template, **make_kwargs
    )
    try:
        from openrlhf.utils.agent import MultiTurnAgentExecutor
    except ImportError as e:
        raise missing_dependency("openrlhf", "agent_executor_class()", e) from e

    def __init__(self: Any) -> None:
        MultiTurnAgentExecutor.__init__(self, instance)

    return type(
        "AgentExecutor",
        (MultiTurnAgentExecutor,),
        {"__init__": __init__, "__doc__": f"OpenRLHF's multi-turn executor over {env_id}."},
    )


def prompts_jsonl(env_id: str, n: int, path: str | Path, *, seed: int = 0) -> Path:
    """Write `n` prompt rows `{"input", "label"}` (label: JSON env id and seed) to `path`."""
    from gemkit.registry import make

    env = make(env_id)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with path.open("w") as f:
            for k in range(n):
                obs, _ = env.reset(seed=seed + k)
                label = json.dumps({"env_id": env_id, "seed": seed + k})
                f.write(json.dumps({"input": _text(obs), "label": label}) + "\n")
    finally:
        env.close()
    return path
