"""A scripted server that reports sampled token ids and log-probs the way vLLM and SGLang do.

`TokenScriptedServer(replies, tokenizer=tok)` is a `ScriptedOpenAIServer` that, given a
tokenizer (any local Hugging Face tokenizer), also answers

- `POST /v1/chat/completions` with vLLM's token fields when asked (`return_token_ids`:
  `choices[i].token_ids` and `prompt_token_ids`; `logprobs`: `logprobs.content`, with
  `"token_id:N"` tokens under `return_tokens_as_token_ids`);
- `POST /v1/completions` with a token-id (or text) `prompt`, vLLM's completion shape;
- `POST /generate` with `input_ids`, SGLang's native shape (`meta_info.output_token_logprobs`).

The "sampled" ids of a reply are its `token_ids` when the script gives them (to play a
sampler that picked a non-canonical split, say), else the tokenization of its content plus
EOS; log-probs are the reply's `logprobs` or seeded draws. `sampled` records, per request,
the prompt ids the server conditioned on and the ids and log-probs it returned, so a test
can check a rollout against the ground truth. `weight_version` (None: not reported, like
vLLM) is reported as SGLang and `gemkit serve model` do.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from aiohttp import web

from gemkit.llm.sampled import TOKEN_ID_PREFIX, chat_logprobs
from gemkit.testing.openai_server import (
    Reply,
    ReplyFn,
    ReplyLike,
    ScriptedOpenAIServer,
    _error,
    _ScriptExhausted,
    _text_of,
)


@dataclass
class Sampled:
    """What the server sampled for one request: the context and the completion."""

    path: str
    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    finish_reason: str


class TokenScriptedServer(ScriptedOpenAIServer):
    """`ScriptedOpenAIServer` plus token ids and log-probs in vLLM's and SGLang's shapes."""

    def __init__(
        self,
        replies: Iterable[ReplyLike] | ReplyFn = (),
        *,
        tokenizer: Any,
        weight_version: int | None = None,
        **kwargs: Any,
    ):
        super().__init__(replies, **kwargs)
        self.tokenizer = tokenizer
        self.weight_version = weight_version
        self.sampled: list[Sampled] = []
        self._lp_rng = np.random.default_rng(kwargs.get("seed", 0) + 1)

    # -- sampling -----------------------------------------------------------------------------

    def sample(self, reply: Reply, prompt_ids: list[int], limit: Any, path: str) -> Sampled:
        """The ids and log-probs this reply stands for, cut at `limit` tokens, recorded."""
        if reply.token_ids is not None:
            ids = [int(x) for x in reply.token_ids]
        else:
            text = reply.content or ""
            ids = list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
            ids.append(int(self.tokenizer.eos_token_id))
        if reply.logprobs is not None:
            logprobs = [float(x) for x in reply.logprobs]
        else:
            logprobs = [float(x) for x in -self._lp_rng.uniform(0.01, 3.0, size=len(ids))]
        finish = reply.finish_reason or "stop"
        if isinstance(limit, int) and 0 < limit < len(ids):
            ids, logprobs, finish = ids[:limit], logprobs[:limit], "length"
        record = Sampled(path, list(prompt_ids), ids, logprobs, finish)
        self.sampled.append(record)
        return record

    def _text(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def _chat_prompt(self, messages: list[Any]) -> list[int]:
        if getattr(self.tokenizer, "chat_template", None):
            ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True)
            return list(ids["input_ids"] if isinstance(ids, Mapping) else ids)
        text = "\n".join(_text_of(m) for m in messages if isinstance(m, Mapping))
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _versioned(self, payload: dict[str, Any]) -> dict[str, Any]:
        if self.weight_version is not None:
            payload["weight_version"] = str(self.weight_version)
        return payload

    # -- chat ---------------------------------------------------------------------------------

    def _finish_choice(
        self, body: dict[str, Any], reply: Reply, choice: dict[str, Any]
    ) -> dict[str, Any]:
        if not (body.get("return_token_ids") or body.get("logprobs")):
            return choice
        prompt = self._chat_prompt(body["messages"])
        s = self.sample(reply, prompt, body.get("max_tokens"), "/v1/chat/completions")
        if s.finish_reason == "length" and not reply.tool_calls:
            choice["message"]["content"] = self._text(s.completion_ids)
            choice["finish_reason"] = "length"
        if body.get("return_token_ids"):
            choice["token_ids"] = s.completion_ids
            choice["prompt_token_ids"] = prompt  # read back into the top level below
        if body.get("logprobs"):
            as_ids = bool(body.get("return_tokens_as_token_ids"))
            tokens = [
                f"{TOKEN_ID_PREFIX}{t}" if as_ids else self._text([t]) for t in s.completion_ids
            ]
            choice["logprobs"] = chat_logprobs(tokens, s.logprobs)
        return choice

    def _completion(
        self, number: int, body: dict[str, Any], replies: list[Reply]
    ) -> dict[str, Any]:
        out = super()._completion(number, body, replies)
        for choice in out["choices"]:  # vLLM puts the chat prompt's ids at the top level
            prompt = choice.pop("prompt_token_ids", None)
            if prompt is not None:
                out["prompt_token_ids"] = prompt
        return self._versioned(out)

    # -- completions and SGLang ---------------------------------------------------------------

    def _add_routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_post("/generate", self._generate)

    async def _scripted(self, request: web.Request, check: Any) -> tuple[Any, Any]:
        try:
            body = await request.json()
        except ValueError:
            body = None
        rec = self._record(request, body)
        if self._unauthorized(request):
            rec.outcome = "rejected"
            return rec, _error(401, "invalid API key", "invalid_api_key")
        problem = check(body)
        if problem:
            rec.outcome = "rejected"
            return rec, _error(400, problem, "invalid_request")
        try:
            reply = await self._next_reply(body)
        except _ScriptExhausted:
            rec.outcome = "rejected"
            return rec, _error(400, "no scripted reply left", "script_exhausted")
        rec.outcome = "answered"
        return rec, (body, reply)

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        def check(body: Any) -> str | None:
            if not isinstance(body, dict) or "prompt" not in body:
                return "request body must be a JSON object with a 'prompt'"
            return None

        rec, result = await self._scripted(request, check)
        if isinstance(result, web.StreamResponse):
            return result
        body, reply = result
        prompt = body["prompt"]
        if isinstance(prompt, str):
            prompt_ids = list(self.tokenizer(prompt, add_special_tokens=False)["input_ids"])
        else:
            prompt_ids = [int(x) for x in prompt]
        s = self.sample(reply, prompt_ids, body.get("max_tokens"), "/v1/completions")
        choice: dict[str, Any] = {
            "index": 0,
            "text": self._text(s.completion_ids),
            "finish_reason": s.finish_reason,
            "stop_reason": None,
        }
        if body.get("logprobs") is not None:
            as_ids = bool(body.get("return_tokens_as_token_ids"))
            choice["logprobs"] = {
                "tokens": [
                    f"{TOKEN_ID_PREFIX}{t}" if as_ids else self._text([t]) for t in s.completion_ids
                ],
                "token_logprobs": s.logprobs,
                "top_logprobs": [None] * len(s.logprobs),
                "text_offset": [0] * len(s.logprobs),
            }
        if body.get("return_token_ids"):
            choice["token_ids"] = s.completion_ids
            choice["prompt_token_ids"] = s.prompt_ids  # what it conditioned on
        usage = {
            "prompt_tokens": len(prompt_ids),
            "completion_tokens": len(s.completion_ids),
            "total_tokens": len(prompt_ids) + len(s.completion_ids),
        }
        payload = {
            "id": f"cmpl-scripted-{rec.number}",
            "object": "text_completion",
            "model": body.get("model") or self.model,
            "choices": [choice],
            "usage": usage,
        }
        return web.json_response(self._versioned(payload))

    async def _generate(self, request: web.Request) -> web.StreamResponse:
        def check(body: Any) -> str | None:
            if not isinstance(body, dict) or not isinstance(body.get("input_ids"), list):
                return "request body must be a JSON object with 'input_ids'"
            return None

        rec, result = await self._scripted(request, check)
        if isinstance(result, web.StreamResponse):
            return result
        body, reply = result
        params = body.get("sampling_params") or {}
        limit = params.get("max_new_tokens")
        s = self.sample(reply, [int(x) for x in body["input_ids"]], limit, "/generate")
        meta: dict[str, Any] = {
            "id": f"scripted-{rec.number}",
            "prompt_tokens": len(s.prompt_ids),
            "completion_tokens": len(s.completion_ids),
            "finish_reason": {"type": s.finish_reason},
        }
        if body.get("return_logprob"):
            meta["output_token_logprobs"] = [
                [lp, t, None] for t, lp in zip(s.completion_ids, s.logprobs, strict=True)
            ]
        if self.weight_version is not None:
            meta["weight_version"] = str(self.weight_version)
        payload = {"text": self._text(s.completion_ids), "output_ids": s.completion_ids}
        return web.json_response({**payload, "meta_info": meta})
