"""`EpisodeRecord`: one played episode (`gemkit eval`, `gemkit run --out`, `save_jsonl`).

`gemkit.rollout.Episode` is the in-memory episode a rollout builds; this is its written
form, with the summary figures next to the turns. The observation, action and info of a
turn are the env's and the policy's own JSON (text or chat messages, any info fields), so
the `datasets` export keeps those three as JSON text.
"""

from __future__ import annotations

from typing import Any

from pydantic import model_serializer

from gemkit.records.base import Json, Part, Record


class Usage(Part):
    """The model's token counts for one turn, when the policy reports them (`{}` if not)."""

    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None

    @model_serializer(mode="wrap")
    def _reported_only(self, handler: Any) -> dict[str, Any]:
        # a count the policy did not report is absent, as in the turn's own usage dict
        return {k: v for k, v in handler(self).items() if v is not None}


class TurnTokensRecord(Part):
    """The token ids a model was fed and sampled in one turn (`gemkit.trajectory.TurnTokens`)."""

    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float] | None = None
    version: int | None = None
    continues: bool = False
    sampling: Json = None


class TurnRecord(Part):
    """One transition: what the policy saw, what it did, and what the env answered.

    `tokens` is present only when the policy recorded the turn's token ids (`TokenPolicy`),
    `finish_reason` only when the policy reported why the reply ended (`length`: cut at its
    token limit).
    """

    observation: Json
    action: Json
    reward: float
    terminated: bool
    truncated: bool
    info: Json = None
    usage: Usage = Usage()
    tokens: TurnTokensRecord | None = None
    finish_reason: str | None = None

    @model_serializer(mode="wrap")
    def _tokens_when_recorded(self, handler: Any) -> dict[str, Any]:
        # an episode played in text keeps the line it always had
        out = handler(self)
        for key in ("tokens", "finish_reason"):
            if out.get(key) is None:
                out.pop(key, None)
        return out


class Tokens(Part):
    """Prompt and completion tokens of every model call of the episode."""

    prompt_tokens: int = 0
    completion_tokens: int = 0


class TokenTotals(Part):
    """Tokens and calls of one source of model calls."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    calls: int = 0


class TokenSources(Part):
    """Token totals by who made the call: the policy, or context summaries."""

    policy: TokenTotals = TokenTotals()
    summary: TokenTotals = TokenTotals()


class PolicyInfo(Part):
    """Who played an episode: the policy, its model and sampling settings, and its seed.

    `seed` is the seed the policy was made with (a built-in policy of episode k gets the
    episode's seed; an LLM policy has none); `temperature` and `max_tokens` are those sent
    with every request (None: not sent, the server's default applied).
    """

    name: str
    model: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    seed: int | None = None


class EpisodeRecord(Record):
    """An episode of one env id and seed, its turns and its summary figures.

    `key` and `index` identify the episode within an eval run (`env_id#k`, k); `policy` says
    who played it (None where the writer did not say, as in `save_jsonl` of bare episodes).
    `context_overflow` (present only then) is the server's refusal of a chat that outgrew the
    model's context window, which ended the episode.
    """

    KIND = "episode"
    VERSION = 1

    key: str | None = None
    index: int | None = None
    env_id: str
    seed: int | None = None
    policy: PolicyInfo | None = None
    turns: list[TurnRecord] = []
    error: str | None = None
    total_reward: float = 0.0
    success: bool = False
    num_turns: int = 0
    tool_calls: int = 0
    tokens: Tokens = Tokens()
    token_sources: TokenSources = TokenSources()
    context_overflow: str | None = None

    @model_serializer(mode="wrap")
    def _overflow_when_it_happened(self, handler: Any) -> dict[str, Any]:
        out = handler(self)
        if out.get("context_overflow") is None:
            out.pop("context_overflow", None)
        return out
