"""Token trajectories: what a model sampled in an episode, in the form trainers take.

Each turn of an `Episode` may carry a `TurnTokens`: the tokens fed to the model before the
turn (the task prompt, or the env's reply since the model's last turn, tokenized once), the
completion ids the server sampled, their log-probs, and the policy version that sampled them.
`episode_sequences` joins the turns into `TokenSequence`s, one prompt then a response in which
model tokens (mask 1) and env tokens (mask 0) alternate, without re-tokenizing any model
output; `to_trl`, `to_verl` and `to_openrlhf` give the field names those trainers use.

A context that does not extend the previous one (a context wrapper summarised or dropped
history, or a server re-rendered the chat template differently) starts a new sequence
(`continues=False`): joining it to the old one would train on a context the model never saw.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gemkit.errors import GemkitError


class TrajectoryError(GemkitError):
    """An episode whose tokens cannot be exported as asked."""


@dataclass
class TurnTokens:
    """The tokens of one turn.

    `prompt_ids` are the tokens fed to the model before this completion: with `continues`
    the ones added after the previous turn's completion (env and tool text, chat-template
    turn markers), otherwise the whole prompt. `completion_ids` and `logprobs` are what the
    server sampled (`logprobs` None when it sent none); `version` is the policy version of
    the weights that sampled them (None when unknown). `sampling` is every sampling parameter
    the request named (`gemkit.llm.SamplingParams.to_dict`) plus `logprobs`: `"processed"`
    when the log-probs are of that distribution, `"raw"` when they are the raw model's (None
    when the policy did not record them).
    """

    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float] | None = None
    version: int | None = None
    continues: bool = False
    sampling: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.logprobs is not None and len(self.logprobs) != len(self.completion_ids):
            raise TrajectoryError(
                f"{len(self.completion_ids)} completion ids but {len(self.logprobs)} log-probs"
            )


def continued_turn(
    context: Sequence[int] | None,
    prompt_ids: Sequence[int],
    completion_ids: Sequence[int],
    logprobs: Sequence[float] | None,
    version: int | None,
    sampling: dict[str, Any] | None = None,
) -> TurnTokens:
    """The `TurnTokens` of a completion sampled on the full `prompt_ids`, given the `context`
    (the previous turn's prompt and completion): only the new tokens when the prompt extends
    that context, the whole prompt otherwise."""
    prompt = list(prompt_ids)
    n = len(context) if context is not None else -1
    extends = context is not None and n <= len(prompt) and prompt[:n] == list(context)
    return TurnTokens(
        prompt_ids=prompt[n:] if extends else prompt,
        completion_ids=list(completion_ids),
        logprobs=None if logprobs is None else [float(x) for x in logprobs],
        version=version,
        continues=extends,
        sampling=sampling,
    )


@dataclass
class TokenSequence:
    """One prompt and the response after it, token by token.

    `mask[j]` is 1 where `response_ids[j]` was sampled by the model and 0 for env and
    template tokens; `logprobs[j]` is the sampler's log-prob there (0.0 on env tokens; the
    list is None when some turn had none); `versions[j]` is the policy version that sampled
    a model token (None on env tokens or when unknown). `turns` counts model turns and
    `rewards` holds their rewards. `sampling` is the sampling record its turns share (None
    when they recorded none); turns sampled under different parameters start new sequences.
    """

    prompt_ids: list[int]
    response_ids: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    logprobs: list[float] | None = field(default_factory=list)
    versions: list[int | None] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    sampling: dict[str, Any] | None = None

    @property
    def turns(self) -> int:
        """Model turns in this sequence."""
        return len(self.rewards)

    @property
    def model_versions(self) -> list[int]:
        """The known policy versions of the model's tokens, in order."""
        return [v for v, m in zip(self.versions, self.mask, strict=True) if m and v is not None]

    @property
    def input_ids(self) -> list[int]:
        """Prompt and response in one row."""
        return self.prompt_ids + self.response_ids

    def add(
        self,
        ids: Sequence[int],
        model: bool,
        logprobs: Sequence[float] | None = None,
        version: int | None = None,
    ) -> None:
        """Append tokens: the model's (with their log-probs and version) or the env's."""
        self.response_ids += list(ids)
        self.mask += [int(model)] * len(ids)
        self.versions += [version if model else None] * len(ids)
        if self.logprobs is not None:
            if model and logprobs is None:
                self.logprobs = None
            elif model and logprobs is not None:
                self.logprobs += [float(x) for x in logprobs]
            else:
                self.logprobs += [0.0] * len(ids)

    def to_trl(self) -> dict[str, Any]:
        """TRL's `rollout_func` keys: `prompt_ids`, `completion_ids`, `logprobs`, `env_mask`."""
        return {
            "prompt_ids": list(self.prompt_ids),
            "completion_ids": list(self.response_ids),
            "logprobs": None if self.logprobs is None else list(self.logprobs),
            "env_mask": list(self.mask),
        }

    def to_verl(self) -> dict[str, Any]:
        """verl's `AgentLoopOutput` fields: `prompt_ids`, `response_ids`, `response_mask`,
        `response_logprobs`, `num_turns` (user and assistant turns)."""
        return {
            "prompt_ids": list(self.prompt_ids),
            "response_ids": list(self.response_ids),
            "response_mask": list(self.mask),
            "response_logprobs": None if self.logprobs is None else list(self.logprobs),
            "num_turns": 2 * self.turns,
        }

    def to_openrlhf(self) -> dict[str, Any]:
        """OpenRLHF's experience fields over the whole row: `sequences`, `action_mask`
        (1 on model tokens), `rollout_log_probs` (0.0 elsewhere)."""
        pad = [0] * len(self.prompt_ids)
        logprobs = None if self.logprobs is None else [0.0] * len(pad) + list(self.logprobs)
        return {
            "sequences": self.input_ids,
            "action_mask": pad + list(self.mask),
            "rollout_log_probs": logprobs,
        }


def turn_sequences(
    turns: Iterable[tuple[TurnTokens | None, float]], *, strict: bool = True
) -> list[TokenSequence]:
    """Join `(tokens, reward)` turns into sequences; a turn that does not continue starts one.

    With `strict`, a turn without tokens is a `TrajectoryError` (the policy did not report
    them; use a token-reporting policy); otherwise it ends the current sequence.
    """
    out: list[TokenSequence] = []
    current: TokenSequence | None = None
    for k, (tokens, reward) in enumerate(turns):
        if tokens is None:
            if strict:
                raise TrajectoryError(
                    f"turn {k} has no token ids: the policy did not report them; use "
                    "gemkit.llm.TokenPolicy (or an LLMPolicy asking a vLLM server for tokens)"
                )
            current = None
            continue
        if current is None or not tokens.continues or tokens.sampling != current.sampling:
            # a sequence is trained under one distribution: a turn sampled under other
            # parameters starts its own (its context restarts with the whole prompt)
            if current is not None and tokens.continues:
                prompt = current.input_ids + list(tokens.prompt_ids)
            else:
                prompt = list(tokens.prompt_ids)
            current = TokenSequence(prompt_ids=prompt, sampling=tokens.sampling)
            out.append(current)
        else:
            current.add(tokens.prompt_ids, model=False)
        current.add(tokens.completion_ids, True, tokens.logprobs, tokens.version)
        current.rewards.append(float(reward))
    return out


def episode_sequences(episode: Any, *, strict: bool = True) -> list[TokenSequence]:
    """The token sequences of an `Episode` (usually one; more when its context restarted)."""
    return turn_sequences(((t.tokens, t.reward) for t in episode.turns), strict=strict)


def episode_sequence(episode: Any) -> TokenSequence:
    """The one token sequence of an episode whose every turn extends the one before."""
    sequences = episode_sequences(episode)
    if len(sequences) != 1:
        raise TrajectoryError(
            f"the episode has {len(sequences)} token sequences (its context restarted, e.g. a "
            "context wrapper dropped history); export each with episode_sequences()"
        )
    return sequences[0]
