"""Token ids of a multi-turn episode for trainers that take tokens: prompt and env replies.

Shared by the TRL rollout and the verl agent loop, so both frame env text the same way.
"""

from __future__ import annotations

from typing import Any


def observation_text(obs: Any) -> str:
    """The text of an observation: the string, or the last chat message's content."""
    if isinstance(obs, str):
        return obs
    if isinstance(obs, list) and obs and isinstance(obs[-1], dict):
        return str(obs[-1].get("content") or "")
    return str(obs)


def prompt_ids(tokenizer: Any, observation: Any) -> list[int]:
    """Token ids of the first prompt: the chat template over a user message, or plain text."""
    if getattr(tokenizer, "chat_template", None):
        messages = observation if isinstance(observation, list) else [
            {"role": "user", "content": observation}
        ]  # fmt: skip
        return list(_ids(tokenizer.apply_chat_template(messages, add_generation_prompt=True)))
    return list(tokenizer(observation_text(observation), add_special_tokens=False)["input_ids"])


def reply_ids(tokenizer: Any, text: str) -> list[int]:
    """Token ids of an env reply placed after the model's turn (masked 0 in the response).

    With a chat template this is the template's own rendering of a new user message and the
    next generation prompt (the model's turn ended with its EOS, e.g. `<|im_end|>`); without
    one, or with a template that rewrites earlier turns, the reply as plain text.
    """
    if not getattr(tokenizer, "chat_template", None):
        return list(tokenizer("\n" + text + "\n", add_special_tokens=False)["input_ids"])
    # Rendered after a plain user turn rather than an assistant one: templates such as Qwen3's
    # render the last assistant turn differently from earlier ones, which breaks the prefix.
    base = [{"role": "user", "content": "x"}]
    before = tokenizer.apply_chat_template(base, tokenize=False)
    after = tokenizer.apply_chat_template(
        [*base, {"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
    )
    if not after.startswith(before):  # a template that rewrites earlier turns: fall back
        return list(tokenizer("\n" + text + "\n", add_special_tokens=False)["input_ids"])
    return list(tokenizer(after[len(before) :], add_special_tokens=False)["input_ids"])


def _ids(value: Any) -> list[int]:
    if isinstance(value, dict) or hasattr(value, "keys"):
        value = value["input_ids"]
    return list(value)
