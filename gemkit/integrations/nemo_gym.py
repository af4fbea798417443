"""Any gemkit env as a NeMo Gym resources server (needs Python 3.12 or later and `nemo-gym`).

NeMo Gym (NVIDIA's env library, `nemo-gym` 0.4.0) runs an env as a *resources server*: an
HTTP app whose `POST /seed_session` sets up a rollout's state, whose tools are `POST /<tool>`
endpoints the agent calls with a tool call's JSON arguments, and whose `POST /verify` takes the
agent's final response and answers with its `reward`. A rollout's requests share a session
(NeMo Gym's session cookie). `GemkitResourcesServer` is that for any gemkit id, the same
shape as gemkit's TRL environment factory:

- `POST /seed_session {"seed"}` resets the session's env and answers `{"observation"}`;
- the tool `POST /step {"action"}` plays one action and answers
  `{"observation", "reward", "terminated", "truncated", "done"}` (after the end, nothing
  more is played and the reward is 0);
- `POST /verify` plays the response's text as the last action when the episode is still open
  (a single-turn task answered in prose, say), then answers NeMo Gym's verify response with
  `reward` = the episode's return, plus `success` and `steps`; the session is then freed.

`nemo_gym_rows(env_id, n)` writes the dataset rows NeMo Gym's agents read: the seeded first
observation as the user turn, the `step` tool's function schema, and the `seed` that
`seed_session` gets back. `nemo_gym_app(env_id)` builds the FastAPI app to run with uvicorn.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

from gemkit.core import Env
from gemkit.integrations.requires import MissingDependencyError
from gemkit.registry import make

try:
    from fastapi import FastAPI, Request
    from nemo_gym.base_resources_server import (
        BaseResourcesServerConfig,
        BaseSeedSessionRequest,
        BaseSeedSessionResponse,
        BaseVerifyRequest,
        BaseVerifyResponse,
        SimpleResourcesServer,
    )
    from nemo_gym.config_types import BaseServerConfig
    from nemo_gym.server_utils import SESSION_ID_KEY, ServerClient
    from omegaconf import OmegaConf
    from pydantic import BaseModel, PrivateAttr
except ImportError as _error:  # the classes cannot exist without NeMo Gym
    raise MissingDependencyError(
        "gemkit.integrations.nemo_gym needs NeMo Gym, which needs Python 3.12 or later: "
        f"pip install nemo-gym (this is Python {sys.version_info.major}.{sys.version_info.minor}; "
        f"{_error})"
    ) from _error

#: the tool the agent calls to play one action
TOOL = "step"
TOOL_DESCRIPTION = "Play one action in the environment and read what it answers."


def step_tool() -> dict[str, Any]:
    """The `step` tool as a Responses API function definition."""
    return {
        "type": "function",
        "name": TOOL,
        "description": TOOL_DESCRIPTION,
        "parameters": {
            "type": "object",
            "properties": {"action": {"type": "string", "description": "The action to play"}},
            "required": ["action"],
            "additionalProperties": False,
        },
        "strict": True,
    }


class GemkitSeedSessionRequest(BaseSeedSessionRequest):
    """Which episode the rollout plays: the reset seed (None: drawn)."""

    seed: int | None = None


class GemkitSeedSessionResponse(BaseSeedSessionResponse):
    """The episode's first observation."""

    observation: str


class StepRequest(BaseModel):
    """One action."""

    action: str


class StepResponse(BaseModel):
    """What the env answered."""

    observation: str
    reward: float
    terminated: bool
    truncated: bool
    done: bool


class GemkitVerifyResponse(BaseVerifyResponse):
    """NeMo Gym's verify response: `reward` is the episode's return."""

    success: bool = False
    steps: int = 0


class GemkitResourcesServerConfig(BaseResourcesServerConfig):
    """NeMo Gym's server config, plus the gemkit env to serve."""

    env_id: str
    make_kwargs: dict[str, Any] = {}


@dataclass
class _Episode:
    env: Env
    rewards: list[float] = field(default_factory=list)
    done: bool = False
    success: bool = False


class GemkitResourcesServer(SimpleResourcesServer):
    """A NeMo Gym resources server playing `config.env_id`, one env per rollout session."""

    config: GemkitResourcesServerConfig
    _episodes: dict[str, _Episode] = PrivateAttr(default_factory=dict)

    def setup_webserver(self) -> FastAPI:
        """NeMo Gym's app (`/seed_session`, `/verify`, `/aggregate_metrics`) plus `/step`."""
        app = super().setup_webserver()
        app.post(f"/{TOOL}")(self.step)
        return app

    def _episode(self, request: Request) -> _Episode:
        sid = request.session[SESSION_ID_KEY]
        episode = self._episodes.get(sid)
        if episode is None:
            from fastapi import HTTPException

            raise HTTPException(400, "no episode in this session: POST /seed_session first")
        return episode

    async def seed_session(
        self, request: Request, body: GemkitSeedSessionRequest
    ) -> GemkitSeedSessionResponse:
        """Reset this session's env with the row's seed."""
        sid = request.session[SESSION_ID_KEY]
        old = self._episodes.pop(sid, None)
        if old is not None:
            old.env.close()
        env = make(self.config.env_id, **self.config.make_kwargs)
        obs, _ = await env.areset(seed=body.seed)
        self._episodes[sid] = _Episode(env)
        return GemkitSeedSessionResponse(observation=obs)

    async def step(self, request: Request, body: StepRequest) -> StepResponse:
        """Play one action (the `step` tool)."""
        episode = self._episode(request)
        if episode.done:
            return StepResponse(
                observation="The episode is over; no more actions are played.",
                reward=0.0,
                terminated=True,
                truncated=False,
                done=True,
            )
        obs, reward, terminated, truncated, info = await episode.env.astep(body.action)
        episode.rewards.append(float(reward))
        if terminated or truncated:
            episode.done, episode.success = True, bool(info.get("success", False))
        return StepResponse(
            observation=obs,
            reward=float(reward),
            terminated=bool(terminated),
            truncated=bool(truncated),
            done=episode.done,
        )

    async def verify(self, request: Request, body: BaseVerifyRequest) -> GemkitVerifyResponse:
        """The episode's return; an open episode first plays the response's text."""
        episode = self._episode(request)
        text = (getattr(body.response, "output_text", "") or "").strip()
        if not episode.done and text:
            await self.step(request, StepRequest(action=text))
        self._episodes.pop(request.session[SESSION_ID_KEY], None)
        episode.env.close()
        return GemkitVerifyResponse(
            **body.model_dump(),
            reward=sum(episode.rewards),
            success=episode.success,
            steps=len(episode.rewards),
        )


def nemo_gym_server(
    env_id: str,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    name: str = "gemkit",
    **make_kwargs: Any,
) -> GemkitResourcesServer:
    """The resources server for `env_id` (a server client that talks to no head server)."""
    config = GemkitResourcesServerConfig(
        host=host, port=port, entrypoint="", name=name, env_id=env_id, make_kwargs=make_kwargs
    )
    client = ServerClient(
        head_server_config=BaseServerConfig(host=host, port=port),
        global_config_dict=OmegaConf.create({}),
    )
    return GemkitResourcesServer(config=config, server_client=client)


def nemo_gym_app(env_id: str, **make_kwargs: Any) -> FastAPI:
    """The FastAPI app of `env_id`'s resources server, to run with uvicorn."""
    return nemo_gym_server(env_id, **make_kwargs).setup_webserver()


def nemo_gym_rows(
    env_id: str, n: int, *, seed: int = 0, system_prompt: str | None = None, **make_kwargs: Any
) -> list[dict[str, Any]]:
    """`n` dataset rows (seeds `seed` ... `seed + n - 1`) for NeMo Gym's agents."""
    env = make(env_id, **make_kwargs)
    rows = []
    for k in range(n):
        obs, _ = env.reset(seed=seed + k)
        messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
        messages.append({"role": "user", "content": obs})
        rows.append(
            {
                "responses_create_params": {"input": messages, "tools": [step_tool()]},
                "seed": seed + k,
                "env_id": env_id,
            }
        )
    env.close()
    return rows
