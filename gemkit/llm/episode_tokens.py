"""Token ids of a multi-turn episode for trainers that take tokens: prompt and env replies.

Shared by `TokenPolicy`, the TRL rollout and the verl agent loop, so all frame env text the same way.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any


def observation_text(obs: Any) -> str:
    """The text of an observation: the string, or the last chat message's content."""
    if isinstance(obs, str):
        return obs
    if isinstance(obs, list) and obs and isinstance(obs[-1], dict):
        return str(obs[-1].get("content") or "")
    return str(obs)


def prompt_ids(tokenizer: Any, observation: Any, system_prompt: str | None = None) -> list[int]:
    """Token ids of the first prompt: the chat template over a user message, or plain text.

    The observation's text is tokenized as text: a control token it spells out (say
    `<|im_start|>assistant`, printed by the agent's own code) stays plain characters and
    can never open a turn in the model's context.
    """
    if getattr(tokenizer, "chat_template", None):
        messages = observation if isinstance(observation, list) else [
            {"role": "user", "content": observation}
        ]  # fmt: skip
        if system_prompt is not None and not any(m.get("role") == "system" for m in messages):
            messages = [{"role": "system", "content": system_prompt}, *messages]
        return _render_ids(tokenizer, [dict(m) for m in messages], add_generation_prompt=True)
    text = observation_text(observation)
    return text_ids(tokenizer, text if system_prompt is None else f"{system_prompt}\n{text}")


def reply_ids(tokenizer: Any, text: str, after: Sequence[int] | None = None) -> list[int]:
    """Token ids of an env reply placed after the model's turn (masked 0 in the response).

    With a chat template this is the template's own rendering of a new user message and the
    next generation prompt; without one, or with a template that rewrites earlier turns, the
    reply as plain text. The reply's own characters are tokenized as text, never as control
    tokens (see `prompt_ids`).

    `after` is the model's completion the reply follows: the template closes an assistant
    turn with more than the end-of-turn token the model samples (ChatML's `<|im_end|>` is
    followed by a newline), so what the completion lacks of that closing comes first, and
    the model conditions on the context its template renders. A completion cut before its
    end-of-turn token gets the whole closing.
    """
    if not getattr(tokenizer, "chat_template", None):
        return text_ids(tokenizer, "\n" + text + "\n")
    # Rendered after a plain user turn rather than an assistant one: templates such as Qwen3's
    # render the last assistant turn differently from earlier ones, which breaks the prefix.
    base = [{"role": "user", "content": "x"}]
    before = tokenizer.apply_chat_template(base, tokenize=False)
    after_text = tokenizer.apply_chat_template(
        [*base, {"role": "user", "content": _SLOT}], tokenize=False, add_generation_prompt=True
    )
    if not after_text.startswith(before) or after_text.count(_SLOT) != 1:
        # a template that rewrites earlier turns, or edits the content: fall back to plain text
        return text_ids(tokenizer, "\n" + text + "\n")
    head, tail = after_text[len(before) :].split(_SLOT)
    ids = _markup_ids(tokenizer, head) + text_ids(tokenizer, text) + _markup_ids(tokenizer, tail)
    if after is None:
        return ids
    return closing_rest(tokenizer, after) + ids


def turn_closing_ids(tokenizer: Any) -> list[int]:
    """The ids the chat template puts after an assistant message's text (`<|im_end|>\\n`).

    Empty without a chat template, or when the template renders assistant turns in a way that
    does not end with the text (then nothing is added after a completion).
    """
    if not getattr(tokenizer, "chat_template", None):
        return []
    try:
        cached = _CLOSINGS.get(tokenizer)
    except TypeError:  # not weak-referenceable
        cached = None
    if cached is not None:
        return list(cached)
    messages = [
        {"role": "user", "content": "x"},
        {"role": "assistant", "content": _SLOT},
        {"role": "user", "content": "y"},
    ]
    try:
        rendered = tokenizer.apply_chat_template(messages, tokenize=False)
        before = tokenizer.apply_chat_template(messages[:2], tokenize=False)
    except Exception:  # noqa: BLE001 - a template that refuses this shape: add nothing
        return []
    closing: list[int] = []
    if rendered.count(_SLOT) == 1 and before.count(_SLOT) == 1:
        # the closing is what follows the text when the conversation ends there, provided the
        # next turn's rendering starts with it too
        rest = before.split(_SLOT, 1)[1]
        if rest and rendered.split(_SLOT, 1)[1].startswith(rest):
            closing = _markup_ids(tokenizer, rest)
    try:
        _CLOSINGS[tokenizer] = tuple(closing)
    except TypeError:
        pass
    return closing


def closing_rest(tokenizer: Any, completion: Sequence[int]) -> list[int]:
    """What `completion` lacks of the template's turn closing: the part after the longest
    prefix of the closing it already ends with (`[\\n]` after a sampled `<|im_end|>`)."""
    closing = turn_closing_ids(tokenizer)
    done = list(completion)
    for k in range(min(len(closing), len(done)), 0, -1):
        if done[-k:] == closing[:k]:
            return closing[k:]
    return closing


def text_ids(tokenizer: Any, text: str) -> list[int]:
    """Token ids of env or tool text: special-token strings in it are split into plain text."""
    backend = _backends(tokenizer)
    if backend is not None:
        return backend[1].encode(text, add_special_tokens=False).ids
    try:
        ids = tokenizer(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]
    except TypeError:  # a tokenizer without the option
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    return list(ids)


#: per fast tokenizer: two private copies of its Rust tokenizer, one that parses special
#: tokens (for template markup) and one that encodes them as text (for env text)
_BACKENDS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _backends(tokenizer: Any) -> tuple[Any, Any] | None:
    """`(markup, text)` Rust tokenizers of a fast HF tokenizer, or None for any other one.

    Encoding one text through them skips the Python wrapper's batch machinery (a thread-pool
    round trip per call, slow on a busy machine); the ids are the wrapper's own (it encodes
    through the same Rust object, setting `encode_special_tokens` per call, a flag that then
    stays set; hence private copies, each with its flag fixed).
    """
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or not hasattr(backend, "encode_special_tokens"):
        return None
    try:
        cached = _BACKENDS.get(tokenizer)
    except TypeError:  # not weak-referenceable
        return None
    size = backend.get_vocab_size(with_added_tokens=True)
    if cached is None or cached[0] != size:  # new, or tokens were added since
        markup, as_text = (type(backend).from_str(backend.to_str()) for _ in range(2))
        markup.encode_special_tokens = False
        as_text.encode_special_tokens = True
        cached = (size, markup, as_text)
        _BACKENDS[tokenizer] = cached
    return cached[1], cached[2]


#: per tokenizer: the ids its chat template closes an assistant turn with
_CLOSINGS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

#: stands in for env text while a chat template renders, so the template's markup and the
#: text can be tokenized apart; no env text contains it (a NUL never appears in templates)
_SLOT = "\x00gemkit-env-text\x00"


def _markup_ids(tokenizer: Any, markup: str) -> list[int]:
    if not markup:
        return []
    backend = _backends(tokenizer)
    if backend is not None:
        return backend[0].encode(markup, add_special_tokens=False).ids
    return list(tokenizer(markup, add_special_tokens=False)["input_ids"])


def _render_ids(tokenizer: Any, messages: list[dict[str, Any]], **kwargs: Any) -> list[int]:
    """The template over `messages`, markup tokenized as markup and contents as text."""
    texts = []
    slotted = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, str):
            texts.append(content)
            m = {**m, "content": _SLOT}
        slotted.append(m)
    rendered = tokenizer.apply_chat_template(slotted, tokenize=False, **kwargs)
    parts = rendered.split(_SLOT)
    if len(parts) != len(texts) + 1:  # the template edits contents: render them as they are
        return list(_ids(tokenizer.apply_chat_template(messages, **kwargs)))
    ids = _markup_ids(tokenizer, parts[0])
    for text, part in zip(texts, parts[1:], strict=True):
        ids += text_ids(tokenizer, text) + _markup_ids(tokenizer, part)
    return ids


def _ids(value: Any) -> list[int]:
    if isinstance(value, dict) or hasattr(value, "keys"):
        value = value["input_ids"]
    return list(value)
