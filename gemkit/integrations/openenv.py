"""Any gemkit env as an OpenEnv environment, served by OpenEnv's own app.

OpenEnv (`openenv-core`, Meta's env hub) defines an env as an `Environment` whose `reset` and
`step` return an `Observation` (pydantic: `done`, `reward`, `metadata` and the env's own
fields), served by `openenv.core.create_app` over HTTP and WebSocket. `GemkitEnvironment`
is that for any gemkit id:

- the action is `GemkitAction(message=text)`: the text a model wrote, as gemkit envs take it;
- the observation is `GemkitObservation(text, info, terminated, truncated, done, reward)`:
  the gemkit observation, its `info` (with `success`) as JSON data, and `done` for
  terminated or truncated;
- `state` is `GemkitState(episode_id, step_count, env_id, seed)`.

    app = openenv_app("game:GuessTheNumber-v0-easy", max_concurrent_envs=8)
    uvicorn.run(app, host="127.0.0.1", port=8000)

OpenEnv's HTTP `POST /reset` and `POST /step` build a fresh env per request and keep nothing
between them, so an episode needs a session: OpenEnv's WebSocket endpoint `/ws` (what its
`EnvClient`/`GenericEnvClient` speak) gives each connection its own env, and the `openenv:`
family (`gemkit.envs.openenv`) plays such a session in gemkit. The app is OpenEnv's, with
OpenEnv's own security (no token): bind it to 127.0.0.1 unless a gateway stands in front.
"""

from __future__ import annotations

import uuid
from typing import Any

from pydantic import Field
from pydantic_core import to_jsonable_python

from gemkit.integrations.requires import MissingDependencyError
from gemkit.registry import make

try:
    from openenv.core import Action, Environment, Observation, State, create_app
except ImportError as _error:  # the classes cannot exist without OpenEnv
    raise MissingDependencyError(
        f"gemkit.integrations.openenv needs OpenEnv: pip install 'gemkit[openenv]' ({_error})"
    ) from _error


def jsonable(value: Any) -> Any:
    """`value` as JSON data: numpy numbers as numbers, anything unknown as its text."""
    return to_jsonable_python(value, fallback=str)


class GemkitAction(Action):
    """One text action: what the model wrote."""

    message: str = Field(description="The action text, as the model wrote it")


class GemkitObservation(Observation):
    """A gemkit observation with its `info`; `done` is `terminated or truncated`.

    OpenEnv sends `done` and `reward` but not `metadata` to its clients, so the two end flags
    travel as fields of their own.
    """

    text: str = Field(default="", description="The observation text")
    info: dict[str, Any] = Field(default_factory=dict, description="The env's info, as JSON")
    terminated: bool = Field(default=False, description="The task reached its end")
    truncated: bool = Field(default=False, description="The episode was cut short")


class GemkitState(State):
    """The episode id and step count OpenEnv tracks, and which gemkit env plays."""

    env_id: str = ""
    seed: int | None = None


class GemkitEnvironment(Environment[GemkitAction, GemkitObservation, GemkitState]):
    """An OpenEnv `Environment` playing the gemkit env `env_id` (`make` kwargs go to it)."""

    SUPPORTS_CONCURRENT_SESSIONS = True  # each session builds its own env

    def __init__(self, env_id: str, **make_kwargs: Any):
        super().__init__()
        self.env_id = env_id
        self.env = make(env_id, **make_kwargs)
        self._state = GemkitState(env_id=env_id)

    def reset(
        self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any
    ) -> GemkitObservation:
        """Start an episode (`options` in kwargs go to the gemkit env's reset)."""
        obs, info = self.env.reset(seed=seed, options=kwargs.get("options"))
        self._state = GemkitState(
            episode_id=episode_id or str(uuid.uuid4()), step_count=0, env_id=self.env_id, seed=seed
        )
        return GemkitObservation(text=obs, info=jsonable(info), done=False, reward=0.0)

    def step(
        self, action: GemkitAction, timeout_s: float | None = None, **kwargs: Any
    ) -> GemkitObservation:
        """One gemkit step; `metadata` says whether it was terminated, truncated, a success."""
        obs, reward, terminated, truncated, info = self.env.step(action.message)
        self._state.step_count += 1
        return GemkitObservation(
            text=obs,
            info=jsonable(info),
            done=bool(terminated or truncated),
            reward=float(reward),
            terminated=bool(terminated),
            truncated=bool(truncated),
        )

    @property
    def state(self) -> GemkitState:
        """The current episode's id and step count."""
        return self._state

    def close(self) -> None:
        """Close the gemkit env."""
        self.env.close()


def openenv_app(env_id: str, *, max_concurrent_envs: int = 8, **make_kwargs: Any) -> Any:
    """OpenEnv's FastAPI app (`create_app`) serving `env_id`, one env per WebSocket session."""

    def factory() -> GemkitEnvironment:
        return GemkitEnvironment(env_id, **make_kwargs)

    return create_app(
        factory,
        GemkitAction,
        GemkitObservation,
        env_name=env_id,
        max_concurrent_envs=max_concurrent_envs,
    )
