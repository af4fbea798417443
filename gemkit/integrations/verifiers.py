"""Any gemkit env as a verifiers taskset and env, for `vf-eval` and prime-rl.

verifiers (0.4.0, `import verifiers.v1 as vf`, Prime Intellect's env hub) splits an env into
a `Taskset` (config in, tasks out) and an `Env` whose `run(task, agents)` plays one task with
its agents; the taskset id names a top-level module to import, which exports its classes in
`__all__`. This module is such a taskset, imported as `gemkit_verifiers`: its id is
`gemkit-verifiers`.

- `GemkitTaskset` yields a task per seed; each task carries `info = {"env_id", "seed"}` and
  the seeded first observation as its prompt (`env_id`, `seed`, `num_tasks` and `make_kwargs`
  are taskset config: `--env.taskset.env-id game:Sudoku-v0-easy`).
- `GemkitEnv.run` resets the gemkit env with the task's seed, takes the model's reply to the
  prompt, plays it with `astep`, sends the next observation as the next user turn, and so on
  until the episode ends; the return is recorded as the reward `gemkit_return`, and
  `trace.info` gets `success` and `steps`.
- `GemkitChatHarness` is the taskset's default harness: a plain chat loop that makes one model
  call per turn in process, through verifiers' interception endpoint (so the trace records
  every call), with nothing to install or sandbox. Any other harness can be pinned instead.

    vf-eval gemkit-verifiers --env.taskset.env-id game:GuessTheNumber-v0-easy
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pydantic import Field, model_validator

from gemkit.integrations.requires import MissingDependencyError
from gemkit.registry import make

try:
    import verifiers.v1 as vf
    from verifiers.v1.dialects.chat import message_to_wire
    from verifiers.v1.runtimes import ProgramResult, SubprocessConfig
except ImportError as _error:  # the classes cannot exist without verifiers
    raise MissingDependencyError(
        f"gemkit.integrations.verifiers needs verifiers: pip install 'gemkit[verifiers]' ({_error})"
    ) from _error

SYSTEM_PROMPT = (
    "You are playing a text environment. Read each observation and reply with your next "
    "action or answer only, in the format the task asks for."
)
#: the taskset id verifiers imports (as the top-level module `gemkit_verifiers`)
TASKSET_ID = "gemkit-verifiers"


class GemkitTasksetConfig(vf.TasksetConfig):
    """Which gemkit env and which seeds (`num_tasks` None: seeds `seed`, `seed + 1`, ... forever)."""

    env_id: str = ""
    seed: int = 0
    num_tasks: int | None = Field(None, ge=1)
    make_kwargs: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _needs_env_id(self) -> GemkitTasksetConfig:
        if self.id and not self.env_id:
            raise ValueError(
                "the gemkit taskset needs a gemkit env id: --env.taskset.env-id "
                "game:GuessTheNumber-v0-easy (any id `gemkit list` shows)"
            )
        return self


class GemkitData(vf.TaskData):
    """A task: the gemkit env id and seed the env reproduces the episode from."""

    info: dict[str, Any]


class GemkitTask(vf.Task[GemkitData, vf.State, vf.TaskConfig]):
    """One seeded episode of a gemkit env."""


class GemkitTaskset(vf.Taskset[GemkitTask, GemkitTasksetConfig]):
    """A task per seed of `config.env_id`, its first observation as the prompt."""

    def __init__(self, config: GemkitTasksetConfig) -> None:
        super().__init__(config)
        self.INFINITE = config.num_tasks is None

    def load(self) -> Iterator[GemkitTask]:
        """Reset the env with each seed in turn; yield its task."""
        config = self.config
        env = make(config.env_id, **config.make_kwargs)
        try:
            k = 0
            while config.num_tasks is None or k < config.num_tasks:
                seed = config.seed + k
                obs, _ = env.reset(seed=seed)
                info = {"env_id": config.env_id, "seed": seed, "make_kwargs": config.make_kwargs}
                yield GemkitTask(
                    GemkitData(
                        name=f"{config.env_id}#{seed}",
                        prompt=obs,
                        system_prompt=SYSTEM_PROMPT,
                        info=info,
                    ),
                    config.task,
                )
                k += 1
        finally:
            env.close()


class GemkitEnvConfig(vf.EnvConfig):
    """One agent, the player; its harness runs in process, so no sandbox is needed."""

    player: vf.AgentConfig = vf.AgentConfig(runtime=SubprocessConfig())


class GemkitEnv(vf.Env[GemkitEnvConfig]):
    """Plays a task's gemkit episode: each model reply is an action, each observation a turn."""

    async def run(self, task: Any, agents: Any) -> None:
        """One episode, the gemkit env answering the model's every reply."""
        info = task.data.info
        env = make(info["env_id"], **info.get("make_kwargs", {}))
        total, steps = 0.0, 0
        last_info: dict[str, Any] = {}
        try:
            await env.areset(seed=info["seed"])
            async with agents.player.interaction(task) as interaction:
                segment = await interaction.turn()  # the prompt is the first observation
                while not segment.terminated:
                    obs, reward, terminated, truncated, last_info = await env.astep(
                        segment.last_reply
                    )
                    total, steps = total + float(reward), steps + 1
                    if terminated or truncated:
                        break
                    segment = await interaction.turn(obs)
        finally:
            env.close()
        trace = interaction.trace
        trace.record_reward("gemkit_return", total)
        trace.info["success"] = bool(last_info.get("success", False))
        trace.info["steps"] = steps


class GemkitChatHarnessConfig(vf.HarnessConfig):
    """The in-process chat harness has no settings of its own."""


class GemkitChatHarness(vf.Harness[GemkitChatHarnessConfig]):
    """One model call per turn, in process, through the interception endpoint."""

    APPENDS_SYSTEM_PROMPT = True
    SUPPORTS_RESUME = True
    EXECUTES_CODE = False
    NEEDS_CONTAINER = False

    async def launch(
        self,
        ctx: Any,
        trace: Any,
        runtime: Any,
        endpoint: str,
        secret: str,
        mcp_urls: dict[str, str],
        data: Any,
        **_: Any,
    ) -> ProgramResult:
        """Send the conversation so far; the reply lands in the trace."""
        from openai import AsyncOpenAI

        system_prompt, prompt = self.resolve_prompt(data)
        messages: list[Any] = []  # OpenAI's message params, as the wire's dicts
        if system_prompt:
            messages.append({"role": "system", "content": system_prompt})
        if isinstance(prompt, str):
            messages.append({"role": "user", "content": prompt})
        elif prompt is not None:
            messages += [message_to_wire(m) for m in prompt if m.role != "system"]
        async with AsyncOpenAI(base_url=endpoint, api_key=secret, max_retries=0) as client:
            await client.chat.completions.create(model=ctx.model, messages=messages)
        return ProgramResult(exit_code=0, stdout="", stderr="")


__all__ = [
    "GemkitChatHarness",
    "GemkitChatHarnessConfig",
    "GemkitData",
    "GemkitEnv",
    "GemkitEnvConfig",
    "GemkitTask",
    "GemkitTaskset",
    "GemkitTasksetConfig",
]
