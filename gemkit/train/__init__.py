"""Training helpers shared by `examples/rebn.py`, `examples/grpo.py` and the integrations.

Needs the `train` extra (torch, transformers). The advantage math is in `gemkit.rl`.

- `gemkit.train.tiny`: a small random causal LM and a word-level tokenizer built locally from an
  env's own text, so a trainer runs end to end with nothing downloaded.
- `gemkit.train.sequences`: prompt encoding, sampling, packing, token log-probs and the
  policy-gradient loss on the model's own tokens.
"""
