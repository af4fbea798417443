"""verl: a gemkit env as a verl agent loop (`AgentLoopBase`), with the response mask.

verl (>= 0.5, `verl.experimental.agent_loop`) hands each dataset row to an agent loop, which
talks to the rollout server in token ids and returns an `AgentLoopOutput`: `prompt_ids`,
`response_ids` (model tokens and env/tool tokens, in order), `response_mask` (1 = model token,
0 = env token), optional `response_logprobs`, `reward_score` and `num_turns`.

`play_episode` is that loop with the model abstracted as an async `generate(prompt_ids)`, so
it runs (and is tested) without verl. `GemkitAgentLoop` wraps it for verl and registers
itself as agent `gemkit`; where verl (or one of its imports) is missing, reading it raises
`MissingDependencyError` naming the package to install. Rows name their env and seed in
`extra_info` (`verl_rows` builds them):

    actor_rollout_ref.rollout.agent.default_agent_loop=gemkit   # or agent_name per row
    # env: extra_info.env_id; seed: extra_info.seed
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from gemkit.core import areset_of, astep_of
from gemkit.errors import GemkitError
from gemkit.integrations.requires import missing_dependency
from gemkit.llm.episode_tokens import observation_text as _text
from gemkit.llm.episode_tokens import prompt_ids, reply_ids
from gemkit.trajectory import TokenSequence

log = logging.getLogger(__name__)

#: `generate(context_ids) -> (token_ids, logprobs or None)`
Generate = Callable[[list[int]], Awaitable[tuple[list[int], list[float] | None]]]


@dataclass
class EpisodeTokens(TokenSequence):
    """One episode as verl wants it: a `TokenSequence` (prompt, response with its mask and
    log-probs, per-turn rewards) with verl's field names, the episode's reward and success."""

    reward: float = 0.0
    success: bool = False

    @property
    def response_mask(self) -> list[int]:
        """1 on model tokens, 0 on env tokens."""
        return self.mask

    @property
    def response_logprobs(self) -> list[float] | None:
        """The sampler's log-probs (0.0 on env tokens), None when a turn had none."""
        return self.logprobs

    @property
    def num_turns(self) -> int:
        """Model turns played."""
        return self.turns


async def play_episode(
    env: Any,
    generate: Generate,
    tokenizer: Any,
    *,
    seed: int | None = None,
    response_length: int = 4096,
    max_turns: int = 32,
    gamma: float = 1.0,
) -> EpisodeTokens:
    """Play one episode of `env` with `generate`, keeping every token and its mask.

    The context of turn k is the prompt plus all response tokens so far; model tokens are
    masked 1 and env replies 0; the response is cut at `response_length` tokens. `reward` is
    the discounted return of the episode (`gemkit.rl.discounted_returns`).
    """
    from gemkit.rl import discounted_returns

    obs, _ = await areset_of(env, seed=seed)
    episode = EpisodeTokens(prompt_ids=prompt_ids(tokenizer, obs))
    for _ in range(max_turns):
        room = response_length - len(episode.response_ids)
        if room <= 0:
            break
        tokens, logprobs = await generate(episode.prompt_ids + episode.response_ids)
        tokens = list(tokens)[:room]
        episode.add(tokens, True, None if logprobs is None else list(logprobs)[: len(tokens)])
        action = tokenizer.decode(tokens, skip_special_tokens=True)
        obs, reward, terminated, truncated, info = await astep_of(env, action)
        episode.rewards.append(float(reward))
        if terminated or truncated:
            episode.success = bool(info.get("success", False))
            break
        room = response_length - len(episode.response_ids)
        episode.add(reply_ids(tokenizer, _text(obs), after=tokens)[:room], False)
    if episode.rewards:
        episode.reward = float(discounted_returns(episode.rewards, gamma)[0])
    return episode


def verl_rows(
    env_id: str, n: int, *, seed: int = 0, agent_name: str = "gemkit", split: str = "train"
) -> list[dict[str, Any]]:
    """Dataset rows for verl's `RLHFDataset` (save them as parquet): one episode seed per row.

    `prompt` holds the env's first observation (verl needs a prompt column to filter lengths);
    the agent loop itself resets the env from `extra_info`.
    """
    from gemkit.registry import make

    env = make(env_id)
    rows = []
    try:
        for k in range(n):
            obs, _ = env.reset(seed=seed + k)
            rows.append(
                {
                    "data_source": f"gemkit/{env_id}",
                    "agent_name": agent_name,
                    "prompt": [{"role": "user", "content": _text(obs)}],
                    "reward_model": {"style": "rule", "ground_truth": ""},
                    "extra_info": {"env_id": env_id, "seed": seed + k, "split": split, "index": k},
                }
            )
    finally:
        env.close()
    return rows


def _env_of(kwargs: dict[str, Any], default_env: str | None) -> tuple[str, int | None]:
    extra = kwargs.get("extra_info") or {}
    env_id = extra.get("env_id") or default_env
    if not env_id:
        raise GemkitError(
            "the verl row names no env: put extra_info.env_id in the dataset (see verl_rows) "
            "or set GemkitAgentLoop.env_id"
        )
    seed = extra.get("seed")
    return str(env_id), None if seed is None else int(seed)


def _token_output(out: Any) -> tuple[list[int], list[float] | None]:
    """verl's server returns `TokenOutput(token_ids, log_probs)` (>= 0.5.x) or a list of ids."""
    if hasattr(out, "token_ids"):
        logprobs = getattr(out, "log_probs", None)
        return list(out.token_ids), None if logprobs is None else list(logprobs)
    return list(out), None


# verl's agent loop imports ray, orjson, cachetools, tensordict, hydra and fastapi: where one is
# missing the class cannot exist, and reading it raises with the package to install
_VERL_ERROR: ImportError | None = None
try:
    from verl.experimental.agent_loop.agent_loop import (
        AgentLoopBase,
        AgentLoopMetrics,
        AgentLoopOutput,
        register,
    )
except ImportError as _e:
    AgentLoopBase = None  # type: ignore[assignment,misc]
    _VERL_ERROR = missing_dependency("verl", "gemkit.integrations.verl.GemkitAgentLoop", _e)
    if _e.name and not _e.name.startswith("verl"):  # verl is there, one of its imports is not
        log.warning("%s", _VERL_ERROR)


def __getattr__(name: str) -> Any:
    if name == "GemkitAgentLoop" and _VERL_ERROR is not None:
        raise _VERL_ERROR
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if AgentLoopBase is not None:

    @register("gemkit")
    class GemkitAgentLoop(AgentLoopBase):
        """Runs a gemkit env for one dataset row and returns its tokens with the response mask."""

        env_id: str | None = None
        gamma: float = 1.0
        max_turns: int = 32

        async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> Any:
            """Play the row's env (extra_info.env_id, extra_info.seed) to the end."""
            from gemkit.registry import make

            env_id, seed = _env_of(kwargs, self.env_id)
            request_id = uuid.uuid4().hex
            rollout = self.config.actor_rollout_ref.rollout

            async def generate(context: list[int]) -> tuple[list[int], list[float] | None]:
                out = await self.server_manager.generate(
                    request_id=request_id, prompt_ids=context, sampling_params=sampling_params
                )
                return _token_output(out)

            env = make(env_id)
            try:
                episode = await play_episode(
                    env,
                    generate,
                    self.tokenizer,
                    seed=seed,
                    response_length=rollout.response_length,
                    max_turns=self.max_turns,
                    gamma=self.gamma,
                )
            finally:
                env.close()
            return AgentLoopOutput(
                prompt_ids=episode.prompt_ids,
                response_ids=episode.response_ids,
                response_mask=episode.response_mask,
                response_logprobs=episode.response_logprobs or None,
                reward_score=episode.reward,
                num_turns=2 * episode.num_turns,
                metrics=AgentLoopMetrics(),
                # turn_scores/tool_rewards: the keys verl's own loops always set
                extra_fields={
                    "success": episode.success,
                    "turn_scores": episode.rewards,
                    "tool_rewards": [],
                },
            )
