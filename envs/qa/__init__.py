"""Question answering (`qa:` family): short answers scored by exact match or token F1.

`qa:Builtin-v0` asks about a fictional world whose facts live only in its corpus
(`env.corpus_path`), so a model has to search: `gemkit.make("qa:Builtin-v0", tools=["search"])`.
`qa:Synth-v0` plays a synthesized set; `gemkit.synth.qa.builtin_set` registers it.
"""

from __future__ import annotations

from gemkit.registry import register

_ENV = "gemkit.envs.qa.env"

register(
    "qa:Builtin-v0",
    f"{_ENV}:builtin",
    description="Questions about a fictional archipelago, answerable from the built-in corpus.",
    tags=("qa", "single-turn", "search"),
)
register(
    "qa:Jsonl-v0",
    f"{_ENV}:from_jsonl",
    description="Questions from your JSONL file or datasets folder (path=...), EM or F1 reward.",
    tags=("qa", "single-turn", "custom-data"),
)
