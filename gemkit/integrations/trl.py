"""TRL: play gemkit envs inside `trl.GRPOTrainer`.

Two ways, both on TRL >= 1.0 (tested with 1.16):

- `environment_factory(env_id)` for `GRPOTrainer(environment_factory=...)`: the env becomes an
  object whose one public method (`act` by default, a typed, documented tool) sends an action;
  `reset(**row)` starts the episode from the dataset row's `seed` and returns the first
  observation (TRL appends it to the prompt); `get_reward()` is the episode's return. TRL's
  own tool-calling loop drives the turns, so the model needs a chat template with tool calls.
- `GemkitRollout(env_id)` as `GRPOTrainer(rollout_func=...)`: gemkit plays each prompt's group
  of episodes itself (the G episodes are `clone()`s of one start state), model tokens and env
  tokens in one completion with `env_mask` (1 = model token, 0 = env token), and the return in
  the `env_reward` column that `env_reward` (a reward function) passes on. Works with any
  tokenizer, chat template or not.

`prompt_dataset(env_id, n)` builds the matching `train_dataset`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from gemkit.errors import GemkitError
from gemkit.llm.episode_tokens import observation_text as _text
from gemkit.llm.episode_tokens import prompt_ids as first_prompt_ids
from gemkit.llm.episode_tokens import reply_ids

DEFAULT_INSTRUCTION = (
    "Solve the task below. Send each move or answer with the `{tool}` tool, one per call, "
    "and read the reply before the next one."
)


class GemkitToolEnv:
    """A gemkit env as a TRL environment (subclassed per env id by `environment_factory`)."""

    env_id: str = ""
    make_kwargs: dict[str, Any] = {}  # noqa: RUF012 - replaced per subclass, never mutated
    gamma: float = 1.0

    def __init__(self) -> None:
        from gemkit.registry import make

        self._env = make(self.env_id, **self.make_kwargs)
        self._rewards: list[float] = []
        self._done = False

    def reset(self, **row: Any) -> str:
        """Start an episode seeded by the row's `seed` (if any); return the first observation."""
        seed = row.get("seed")
        obs, _ = self._env.reset(seed=None if seed is None else int(seed))
        self._rewards, self._done = [], False
        return "\n\n" + _text(obs)

    def _act(self, action: str) -> str:
        if self._done:
            return "The episode is over; no more actions are taken."
        obs, reward, terminated, truncated, _ = self._env.step(str(action))
        self._rewards.append(float(reward))
        self._done = bool(terminated or truncated)
        return _text(obs) + ("\n\nThe episode is over." if self._done else "")

    def get_reward(self) -> float:
        """The episode's return (discounted by `gamma`); 0 when no action was taken."""
        from gemkit.rl import discounted_returns

        if not self._rewards:
            return 0.0
        return float(discounted_returns(self._rewards, self.gamma)[0])


def environment_factory(
    env_id: str, *, tool_name: str = "act", gamma: float = 1.0, **make_kwargs: Any
) -> Callable[[], GemkitToolEnv]:
    """A zero-argument factory of TRL environments playing `env_id` (pass it to GRPOTrainer).

    The tool is a method named `tool_name` taking `action: str`. `make_kwargs` go to
    `gemkit.make` (e.g. `tools=["python"]` for a tool-use env: its tool calls then travel
    inside the action text).
    """
    from gemkit.registry import spec

    spec(env_id)  # an unknown id fails here, with the closest ids
    if (
        not tool_name.isidentifier()
        or tool_name.startswith("_")
        or tool_name
        in (
            "reset",
            "get_reward",
        )
    ):
        raise GemkitError(
            f"tool_name must be a public Python identifier other than reset/get_reward, "
            f"got {tool_name!r}"
        )

    def act(self, action: str) -> str:  # no hint on self: TRL turns every hint into schema
        """Send one action (a move or an answer) to the environment and read its reply.

        Args:
            action: The action text, written in the format the task asks for.

        Returns:
            The environment's reply: feedback and the new state, or that the episode is over.
        """
        return self._act(action)

    act.__name__ = act.__qualname__ = tool_name
    cls = type(
        "GemkitEnv",
        (GemkitToolEnv,),
        {"env_id": env_id, "make_kwargs": dict(make_kwargs), "gamma": gamma, tool_name: act},
    )
    return cls


def prompt_dataset(
    env_id: str,
    n: int,
    *,
    seed: int = 0,
    instruction: str | None = None,
    tool_name: str = "act",
    conversational: bool = True,
) -> Any:
    """A `datasets.Dataset` of `n` rows, each with a `prompt` and the `seed` of its episode.

    For `environment_factory` the prompt holds only the instruction (the env's `reset`
    appends the task). `GemkitRollout.dataset` builds prompts that already hold the task.
    """
    import datasets

    from gemkit.registry import spec

    spec(env_id)
    text = (instruction or DEFAULT_INSTRUCTION).format(tool=tool_name)
    rows = []
    for k in range(n):
        prompt: Any = [{"role": "user", "content": text}] if conversational else text
        rows.append({"prompt": prompt, "seed": seed + k})
    return datasets.Dataset.from_list(rows)


def env_reward(completions: Sequence[Any], env_reward: Sequence[float], **_: Any) -> list[float]:
    """A TRL reward function that passes on the return `GemkitRollout` computed per completion."""
    return [float(r) for r in env_reward]


class GemkitRollout:
    """A multi-turn `rollout_func` for `GRPOTrainer`: gemkit plays every episode.

    Each prompt must come from `self.dataset(...)` (the prompt is the env's first observation,
    and this object remembers which seed made it). TRL passes each prompt `num_generations`
    times in a row; for such a group one env is reset with the prompt's seed and cloned once
    per member, and each clone is played to the end (or until
    `max_completion_length` tokens), turn by turn: the model's tokens (mask 1), then the env's
    reply (mask 0) as the chat template's next user turn (plain text without a template). Returns the keys TRL expects (`prompt_ids`,
    `completion_ids`, `logprobs`) plus `env_mask` and `env_reward`.
    """

    def __init__(
        self,
        env_id: str,
        *,
        gamma: float = 1.0,
        max_turns: int = 16,
        max_new_tokens: int = 256,
        max_prompt_tokens: int = 4096,
        make_kwargs: dict[str, Any] | None = None,
    ):
        from gemkit.registry import spec

        spec(env_id)
        self.env_id = env_id
        self.gamma = gamma
        self.max_turns = max_turns
        self.max_new_tokens = max_new_tokens
        self.max_prompt_tokens = max_prompt_tokens
        self.make_kwargs = dict(make_kwargs or {})
        self.seeds: dict[str, int] = {}

    def dataset(self, n: int, *, seed: int = 0) -> Any:
        """`n` prompts (standard text format), each the first observation of one seed."""
        import datasets

        from gemkit.registry import make

        env = make(self.env_id, **self.make_kwargs)
        rows = []
        try:
            for k in range(n):
                obs, _ = env.reset(seed=seed + k)
                text = _text(obs)
                self.seeds.setdefault(text, seed + k)
                rows.append({"prompt": text, "seed": seed + k})
        finally:
            env.close()
        return datasets.Dataset.from_list(rows)

    def _seed_of(self, prompt: Any) -> int:
        key = _text(prompt)
        if key not in self.seeds:
            raise GemkitError(
                "GemkitRollout got a prompt it did not make; build the train_dataset with "
                "GemkitRollout.dataset(n) so each prompt maps to the seed of its start state"
            )
        return self.seeds[key]

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list]:
        """Play one episode per prompt (TRL passes each prompt `num_generations` times)."""
        from gemkit.registry import make

        tokenizer = trainer.processing_class
        tokenizer = getattr(tokenizer, "tokenizer", tokenizer)
        model = trainer.accelerator.unwrap_model(trainer.model)
        budget = trainer.max_completion_length
        # TRL's sampler already repeats each prompt num_generations times, consecutively: a
        # run of equal prompts is one group, played on clones of one reset env.
        envs, prompt_ids, bases = [], [], []
        key = ids = base = None
        for prompt in prompts:
            if _text(prompt) != key:
                key = _text(prompt)
                base = make(self.env_id, **self.make_kwargs)
                obs, _ = base.reset(seed=self._seed_of(prompt))
                ids = first_prompt_ids(tokenizer, obs)[-self.max_prompt_tokens :]
                bases.append(base)
            assert base is not None and ids is not None  # the first prompt sets them
            envs.append(base.clone())
            prompt_ids.append(list(ids))
        for base in bases:
            base.close()
        was_training = model.training
        model.eval()
        try:
            completions, masks, rewards = self._play(model, tokenizer, envs, prompt_ids, budget)
            logprobs = self._logprobs(model, tokenizer, prompt_ids, completions, masks)
        finally:
            model.train(was_training)
            for env in envs:
                env.close()
        return {
            "prompt_ids": prompt_ids,
            "completion_ids": completions,
            "logprobs": logprobs,
            "env_mask": masks,
            "env_reward": rewards,
        }

    def _play(
        self, model: Any, tokenizer: Any, envs: list, prompt_ids: list[list[int]], budget: int
    ) -> tuple[list[list[int]], list[list[int]], list[float]]:
        from gemkit.rl import discounted_returns
        from gemkit.train.sequences import sample

        n = len(envs)
        completions: list[list[int]] = [[] for _ in range(n)]
        masks: list[list[int]] = [[] for _ in range(n)]
        rewards: list[list[float]] = [[] for _ in range(n)]
        eos = tokenizer.eos_token_id
        active = list(range(n))
        for _ in range(self.max_turns):
            active = [i for i in active if len(completions[i]) < budget]
            if not active:
                break
            contexts = [(prompt_ids[i] + completions[i])[-self.max_prompt_tokens :] for i in active]
            responses = sample(
                model,
                contexts,
                pad_id=tokenizer.pad_token_id,
                eos_id=eos,
                max_new_tokens=min(self.max_new_tokens, budget),
            )
            still = []
            for i, response in zip(active, responses, strict=True):
                response = response[: budget - len(completions[i])]
                completions[i] += response
                masks[i] += [1] * len(response)
                action = tokenizer.decode(response, skip_special_tokens=True)
                obs, reward, terminated, truncated, _ = envs[i].step(action)
                rewards[i].append(float(reward))
                if terminated or truncated:
                    continue
                reply = reply_ids(tokenizer, _text(obs), after=response)[
                    : budget - len(completions[i])
                ]
                completions[i] += reply
                masks[i] += [0] * len(reply)
                still.append(i)
            active = still
        returns = [float(discounted_returns(r, self.gamma)[0]) if r else 0.0 for r in rewards]
        return completions, masks, returns

    @staticmethod
    def _logprobs(
        model: Any,
        tokenizer: Any,
        prompt_ids: list[list[int]],
        completions: list[list[int]],
        masks: list[list[int]],
    ) -> list[list[float]]:
        import torch

        from gemkit.train.sequences import pack, token_logprobs

        out = []
        with torch.no_grad():
            ids, attn, _ = pack(prompt_ids, completions, tokenizer.pad_token_id)
            logp = token_logprobs(model, ids.to(model.device), attn.to(model.device)).cpu()
        for row, (p, c, m) in enumerate(zip(prompt_ids, completions, masks, strict=True)):
            values = logp[row, len(p) : len(p) + len(c)].tolist()
            out.append([v if keep else 0.0 for v, keep in zip(values, m, strict=True)])
        return out
