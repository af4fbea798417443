"""What an inference server says it sampled: token ids, their log-probs, the weights' version.

Servers report tokens in different shapes; each reader here turns one of them into a
`SampledTokens`, or raises `SampledTokensError` when the answer contradicts itself (ids and
log-probs of different lengths, an id that is not an integer), so a trainer never pairs a
log-prob with the wrong token.

- **vLLM, chat** (`/v1/chat/completions` with `logprobs=true, top_logprobs=0,
  return_token_ids=true`): `choices[i].token_ids`, `choices[i].logprobs.content[j].logprob`,
  and the rendered prompt in `prompt_token_ids`. Older vLLM without `return_token_ids`: with
  `return_tokens_as_token_ids=true` each `logprobs.content[j].token` reads `"token_id:N"`.
- **vLLM, completions** (`/v1/completions`, `prompt` a list of ids, `logprobs=1`): the
  choice's `token_ids`, `prompt_token_ids`, and `logprobs.tokens` / `logprobs.token_logprobs`.
- **llama.cpp, completions** (`/v1/completions`, `prompt` a list of ids, `logprobs=1`):
  `logprobs.content[j].id` with `.logprob` (the raw model's), or `.prob` after the sampling
  chain with `post_sampling_probs=true` (its log is read); no prompt ids.
- **SGLang, native** (`/generate` with `input_ids` and `return_logprob=true`):
  `meta_info.output_token_logprobs` as `[logprob, token_id, text]` triples, `output_ids`,
  and `meta_info.weight_version`.

The policy version is read from `weight_version` (SGLang, and `gemkit serve model`) or
`policy_version` at the top of the body or in `meta_info`; servers that do not report one
(vLLM) leave it `None` and the caller supplies the version it pushed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gemkit.errors import GemkitError

#: fields a vLLM (>= 0.10.2) chat request needs for ids and log-probs of the sampled tokens
VLLM_CHAT_TOKEN_FIELDS: dict[str, Any] = {
    "logprobs": True,
    "top_logprobs": 0,
    "return_token_ids": True,
    "return_tokens_as_token_ids": True,
}
#: the same for `/v1/completions` (there `logprobs` is how many top log-probs per token)
VLLM_COMPLETION_TOKEN_FIELDS: dict[str, Any] = {
    "logprobs": 1,
    "return_token_ids": True,
    "return_tokens_as_token_ids": True,
}
#: how vLLM spells a token with `return_tokens_as_token_ids` (`"token_id:N"`)
TOKEN_ID_PREFIX = "token_id:"


class SampledTokensError(GemkitError):
    """A server answer whose token ids and log-probs cannot be paired up."""


@dataclass
class SampledTokens:
    """One completion as the server sampled it.

    `prompt_ids` is the whole context the server conditioned on, when it reports it;
    `logprobs[j]` is the log-probability of `completion_ids[j]` under the sampling
    distribution (None when the server sent none); `version` is the policy version of the
    weights that sampled it, when the server says; `finish_reason` is why it ended (`stop`,
    `length`), when the server says.
    """

    completion_ids: list[int]
    logprobs: list[float] | None = None
    prompt_ids: list[int] | None = None
    version: int | None = None
    finish_reason: str | None = None


def chat_logprobs(tokens: Sequence[str], logprobs: Sequence[float]) -> dict[str, Any]:
    """A vLLM chat choice's `logprobs` object: one `content` entry per sampled token."""
    return {
        "content": [
            {"token": t, "logprob": lp, "bytes": None, "top_logprobs": []}
            for t, lp in zip(tokens, logprobs, strict=True)
        ]
    }


def token_id(value: Any, where: str) -> int:
    """A token id from an int or a vLLM `"token_id:N"` string; anything else is an error."""
    if isinstance(value, bool):
        raise SampledTokensError(f"{where}: expected a token id, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.startswith(TOKEN_ID_PREFIX):
        try:
            return int(value[len(TOKEN_ID_PREFIX) :])
        except ValueError:
            pass
    raise SampledTokensError(
        f"{where}: expected a token id (an integer, or 'token_id:N' with "
        f"return_tokens_as_token_ids=true), got {str(value)[:40]!r}"
    )


def _ids(values: Any, where: str) -> list[int]:
    if isinstance(values, list) and all(type(v) is int for v in values):
        return list(values)  # the common case, without a check per id
    if not isinstance(values, Sequence) or isinstance(values, (str, bytes)):
        raise SampledTokensError(
            f"{where}: expected a list of token ids, got {type(values).__name__}"
        )
    return [token_id(v, f"{where}[{i}]") for i, v in enumerate(values)]


def _logprobs(values: list[Any], where: str) -> list[float]:
    if all(type(v) is float and v <= 0.0 for v in values):
        return list(values)  # the common case, without a check per value
    return [_logprob(v, f"{where} {j}") for j, v in enumerate(values)]


def _token_ids(raw: list[Any], where: str) -> list[int] | None:
    """Ids from vLLM's `"token_id:N"` strings; None when the tokens are text."""
    if not raw or not all(isinstance(t, str) and t.startswith(TOKEN_ID_PREFIX) for t in raw):
        return None
    return [token_id(t, f"{where}[{j}]") for j, t in enumerate(raw)]


def _logprob(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise SampledTokensError(f"{where}: expected a log-probability, got {value!r}")
    if value > 1e-6:
        raise SampledTokensError(f"{where}: a log-probability is <= 0, got {value!r}")
    return float(min(value, 0.0))


def _paired(
    ids: list[int] | None, tokens: list[int] | None, logprobs: list[float] | None, where: str
) -> tuple[list[int], list[float] | None]:
    """Completion ids and log-probs, checked against each other."""
    if ids is None:
        ids = tokens
    if ids is None:
        raise SampledTokensError(
            f"{where}: the server sent no token ids; ask with return_token_ids=true (vLLM >= "
            "0.10.2) or logprobs with return_tokens_as_token_ids=true"
        )
    if logprobs is not None and len(logprobs) != len(ids):
        raise SampledTokensError(
            f"{where}: {len(ids)} token ids but {len(logprobs)} log-probs; the answer cannot be "
            "paired token by token"
        )
    if tokens is not None and tokens != ids:
        raise SampledTokensError(f"{where}: token_ids and the log-prob tokens disagree")
    return ids, logprobs


def _version(*places: Any) -> int | None:
    for place in places:
        if not isinstance(place, Mapping):
            continue
        for key in ("weight_version", "policy_version"):
            value = place.get(key)
            if value is None or isinstance(value, bool):
                continue
            try:
                return int(value)
            except (TypeError, ValueError):
                continue
    return None


def _optional_ids(value: Any, where: str) -> list[int] | None:
    return None if value is None else _ids(value, where)


def from_chat_choice(choice: Mapping[str, Any], body: Mapping[str, Any]) -> SampledTokens | None:
    """The tokens of a chat-completions choice, or None when the server sent neither ids nor
    log-probs (a server asked for nothing, or one that cannot report them)."""
    where = f"choice {choice.get('index', 0)}"
    ids = _optional_ids(choice.get("token_ids"), f"{where} token_ids")
    content = (choice.get("logprobs") or {}).get("content") if isinstance(
        choice.get("logprobs"), Mapping
    ) else None  # fmt: skip
    tokens = logprobs = None
    entries = content if isinstance(content, list) and all(
        isinstance(c, Mapping) for c in content
    ) else None  # fmt: skip
    if entries is not None:
        tokens = _token_ids([c.get("token") for c in entries], f"{where} logprob token")
    if ids is None and tokens is None:
        # no token ids at all (e.g. a plain chat answer with text-token log-probs): nothing
        # to check the log-probs against, and the caller did not ask for tokens
        return None
    if entries is not None:
        logprobs = _logprobs([c.get("logprob") for c in entries], f"{where} logprob")
    ids, logprobs = _paired(ids, tokens, logprobs, where)
    prompt = choice.get("prompt_token_ids", body.get("prompt_token_ids"))
    return SampledTokens(ids, logprobs, _optional_ids(prompt, "prompt_token_ids"), _version(body))


def from_completion_choice(choice: Mapping[str, Any], body: Mapping[str, Any]) -> SampledTokens:
    """The tokens of a `/v1/completions` choice (vLLM's shape, or llama.cpp's)."""
    where = f"choice {choice.get('index', 0)}"
    ids = _optional_ids(choice.get("token_ids"), f"{where} token_ids")
    lp = choice.get("logprobs")
    tokens = logprobs = None
    if isinstance(lp, Mapping) and isinstance(lp.get("content"), list):
        tokens, logprobs = _llama_cpp_content(lp["content"], where)
    elif isinstance(lp, Mapping):
        raw = lp.get("tokens")
        if isinstance(raw, list):
            tokens = _token_ids(raw, f"{where} logprobs.tokens")
        values = lp.get("token_logprobs")
        if isinstance(values, list):
            logprobs = _logprobs(values, f"{where} token_logprobs")
    ids, logprobs = _paired(ids, tokens, logprobs, where)
    prompt = choice.get("prompt_token_ids", body.get("prompt_token_ids"))
    return SampledTokens(
        ids,
        logprobs,
        _optional_ids(prompt, "prompt_token_ids"),
        _version(body),
        _reason(choice.get("finish_reason")),
    )


def _reason(value: Any) -> str | None:
    """A finish reason as a string (SGLang's is an object with a `type`)."""
    if isinstance(value, Mapping):
        value = value.get("type")
    return value if isinstance(value, str) else None


def _llama_cpp_content(content: list[Any], where: str) -> tuple[list[int], list[float]]:
    """Ids and log-probs of llama.cpp's `logprobs.content` (`logprob`, or `prob` after its
    sampling chain)."""
    ids, logprobs = [], []
    for j, entry in enumerate(content):
        if not isinstance(entry, Mapping):
            raise SampledTokensError(f"{where} logprobs.content[{j}]: expected an object")
        ids.append(token_id(entry.get("id"), f"{where} logprobs.content[{j}].id"))
        if "logprob" in entry:
            logprobs.append(_logprob(entry["logprob"], f"{where} logprobs.content[{j}].logprob"))
            continue
        prob = entry.get("prob")
        if isinstance(prob, bool) or not isinstance(prob, (int, float)) or not 0 < prob <= 1:
            raise SampledTokensError(
                f"{where} logprobs.content[{j}]: expected a logprob or a prob in (0, 1], got "
                f"{str(prob)[:20]!r}"
            )
        logprobs.append(min(math.log(prob), 0.0))
    return ids, logprobs


def from_sglang(body: Mapping[str, Any], prompt_ids: Sequence[int] | None = None) -> SampledTokens:
    """The tokens of an SGLang `/generate` answer (`return_logprob=true`)."""
    meta = body.get("meta_info")
    meta = meta if isinstance(meta, Mapping) else {}
    triples = meta.get("output_token_logprobs")
    tokens: list[int] | None = None
    logprobs: list[float] | None = None
    if isinstance(triples, list):
        tokens, logprobs = [], []
        for j, t in enumerate(triples):
            if not isinstance(t, Sequence) or isinstance(t, (str, bytes)) or len(t) < 2:
                raise SampledTokensError(
                    f"output_token_logprobs[{j}]: expected [logprob, token_id, text], got {t!r:.60}"
                )
            logprobs.append(_logprob(t[0], f"output_token_logprobs[{j}]"))
            tokens.append(token_id(t[1], f"output_token_logprobs[{j}]"))
    ids = _optional_ids(body.get("output_ids"), "output_ids")
    ids, logprobs = _paired(ids, tokens, logprobs, "the SGLang answer")
    prompt = list(prompt_ids) if prompt_ids is not None else None
    return SampledTokens(
        ids, logprobs, prompt, _version(body, meta), _reason(meta.get("finish_reason"))
    )
