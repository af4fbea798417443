"""A tiny random causal LM and a word-level tokenizer built from an env's own text.

Nothing is downloaded: the vocabulary comes from playing a few random episodes of the env, and
every well-formed action the env's `random_action` can produce (e.g. `\\boxed{7}`) becomes a
single token, so even a random 2-layer model can emit a valid move in one token.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

PAD, UNK, EOS = "<pad>", "<unk>", "<eos>"
# A boxed move is one piece; otherwise words, and each punctuation mark on its own.
PIECE_PATTERN = r"\\boxed\{[^{}\s]*\}|\w+|[^\w\s]"
_PIECE = re.compile(PIECE_PATTERN)


@dataclass
class EnvText:
    """Text an env produced in a few random episodes: observations and well-formed actions."""

    observations: list[str]
    actions: list[str]


def env_text(
    env_id: str,
    *,
    episodes: int = 16,
    action_samples: int = 512,
    max_steps: int = 40,
    seed: int = 0,
    make_kwargs: dict[str, Any] | None = None,
) -> EnvText:
    """Play `episodes` random episodes of `env_id` and sample actions from `random_action`.

    Envs without `random_action` contribute observations only (their first observation and
    the reply to an empty action).
    """
    from gemkit.registry import make

    env = make(env_id, **(make_kwargs or {}))
    rng = np.random.default_rng(seed)
    sampler = getattr(env.unwrapped, "random_action", None)
    observations: list[str] = []
    actions: list[str] = []
    try:
        for k in range(episodes):
            obs, _ = env.reset(seed=seed + k)
            observations.append(_text(obs))
            for _ in range(max_steps):
                action = sampler(rng) if sampler is not None else ""
                obs, _, terminated, truncated, _ = env.step(action)
                observations.append(_text(obs))
                if terminated or truncated:
                    break
        if sampler is not None:
            env.reset(seed=seed)
            actions = sorted({sampler(rng) for _ in range(action_samples)})
    finally:
        env.close()
    return EnvText(observations, actions)


def _text(obs: Any) -> str:
    if isinstance(obs, str):
        return obs
    if isinstance(obs, list):
        return "\n".join(str(m.get("content") or "") for m in obs if isinstance(m, dict))
    return str(obs)


def word_tokenizer(texts: Iterable[str], actions: Iterable[str] = (), max_vocab: int = 2048) -> Any:
    """A `PreTrainedTokenizerFast` over the words of `texts`, with each action piece kept whole.

    Specials: `<pad>`, `<unk>`, `<eos>`. Words beyond `max_vocab` (rarest first) map to `<unk>`.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    counts: Counter[str] = Counter()
    for text in texts:
        counts.update(_PIECE.findall(text))
    vocab: dict[str, int] = {}
    for piece in [PAD, UNK, EOS]:
        vocab[piece] = len(vocab)
    for action in actions:
        for piece in _PIECE.findall(action):
            vocab.setdefault(piece, len(vocab))
    for piece, _ in counts.most_common():
        if len(vocab) >= max_vocab:
            break
        vocab.setdefault(piece, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.WhitespaceSplit(),
            pre_tokenizers.Split(Regex(PIECE_PATTERN), behavior="isolated"),
        ]
    )
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins pieces with spaces
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token=PAD, unk_token=UNK, eos_token=EOS, padding_side="left"
    )


def tiny_causal_lm(
    vocab_size: int,
    *,
    hidden_size: int = 64,
    layers: int = 2,
    heads: int = 4,
    max_positions: int = 2048,
    pad_token_id: int = 0,
    eos_token_id: int = 2,
    seed: int = 0,
) -> Any:
    """A randomly initialised 2-layer Llama-style `AutoModelForCausalLM` (about 0.1M params)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=max_positions,
        pad_token_id=pad_token_id,
        eos_token_id=eos_token_id,
        bos_token_id=None,
        tie_word_embeddings=True,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = pad_token_id
    model.generation_config.eos_token_id = eos_token_id
    model.generation_config.bos_token_id = None
    return model


def tiny_policy(
    env_id: str,
    *,
    seed: int = 0,
    episodes: int = 16,
    make_kwargs: dict[str, Any] | None = None,
    **model_kwargs: Any,
) -> tuple[Any, Any]:
    """`(model, tokenizer)`: a tiny random model with a tokenizer built from `env_id`'s text."""
    text = env_text(env_id, episodes=episodes, seed=seed, make_kwargs=make_kwargs)
    tokenizer = word_tokenizer(text.observations + text.actions, text.actions)
    model = tiny_causal_lm(
        len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        seed=seed,
        **model_kwargs,
    )
    return model, tokenizer


def load_policy(path: str, *, dtype: Any = None) -> tuple[Any, Any]:
    """`(model, tokenizer)` from a local Hugging Face folder (never downloads).

    The weights load as float32 whatever the checkpoint's dtype (`dtype` to choose another):
    a learner keeps fp32 master weights, since a bfloat16 weight (8 bits of mantissa) rounds
    away an update smaller than about 1/256 of itself, which is most of them at RL learning
    rates.
    """
    from pathlib import Path

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not Path(path).is_dir():
        raise FileNotFoundError(
            f"--model {path!r} is not a folder; pass a local Hugging Face model folder "
            f"(with config.json and tokenizer files), or --tiny for a small random model"
        )
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(
        path, local_files_only=True, dtype=dtype if dtype is not None else torch.float32
    )
    if model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer
