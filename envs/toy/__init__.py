"""Toy tasks (`toy:` family): tiny, fast envs that a small model learns in minutes on a CPU.

They exist to prove a trainer learns (tests, examples, benchmarks), not to measure agents.
"""

from __future__ import annotations

from gemkit.registry import register

register(
    "toy:Copy-v0",
    "gemkit.envs.toy.copy_word:CopyWord",
    kwargs={"num_words": 8, "turns": 3},
    description="Repeat the word shown, one word per turn; reward 1 per correct copy.",
    tags=("toy", "multi-turn", "dense-reward"),
    expert="gemkit.envs.toy.copy_word:CopyWordExpert",
)
register(
    "toy:Copy-v0-single",
    "gemkit.envs.toy.copy_word:CopyWord",
    kwargs={"num_words": 8, "turns": 1},
    description="Repeat the word shown; one turn.",
    tags=("toy", "single-turn"),
    expert="gemkit.envs.toy.copy_word:CopyWordExpert",
)
register(
    "toy:Doors-v0",
    "gemkit.envs.toy.doors:Doors",
    kwargs={"num_doors": 4, "max_turns": 4},
    description="Find the prize behind one of N doors; a wrong door is ruled out.",
    tags=("toy", "multi-turn", "search"),
    expert="gemkit.envs.toy.doors:DoorsExpert",
)
