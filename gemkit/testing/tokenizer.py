"""A small byte-level BPE tokenizer with a ChatML template, trained locally from given text.

For tests of token plumbing that need what real tokenizers do and a word-level one does not:
merges (`"ap" + "ple"` and `"apple"` are different ids for the same text, so decoding and
re-encoding changes ids), and chat-template control tokens (`<|im_start|>`, `<|im_end|>`).
Nothing is downloaded.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

IM_START, IM_END, PAD = "<|im_start|>", "<|im_end|>", "<|pad|>"
CHATML_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def chatml_bpe_tokenizer(texts: Iterable[str], vocab_size: int = 400) -> Any:
    """A `PreTrainedTokenizerFast` (byte-level BPE) over `texts`; EOS is `<|im_end|>`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[PAD, IM_START, IM_END],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(texts), trainer)
    out = PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token=PAD, eos_token=IM_END, padding_side="left"
    )
    out.chat_template = CHATML_TEMPLATE
    return out
