"""reasoning-gym tasks (`rg:` family): every dataset as `rg:<name>`, scored by its own verifier.

Registration reads a static table of names (`names.py`), so listing ids never imports
reasoning-gym (about two seconds); the package loads when an env is built, and is an optional
extra: `pip install gemkit[rg]`.
"""

from __future__ import annotations

from gemkit.envs.reasoning_gym.names import DATASETS
from gemkit.errors import RegistrationError
from gemkit.registry import register

_ENTRY = "gemkit.envs.reasoning_gym.env:ReasoningGymEnv"


def _register(name: str, category: str) -> None:
    register(
        f"rg:{name}",
        _ENTRY,
        kwargs={"name": name},
        description=f"reasoning-gym {category} task {name!r}, scored by its own verifier.",
        tags=("rg", "single-turn", "procedural", category),
        requires=("reasoning_gym",),
        extra="rg",
    )


for _name, _category in DATASETS.items():
    _register(_name, _category)


def register_installed() -> list[str]:
    """Register datasets of the installed reasoning-gym missing from the static table."""
    from gemkit.envs.reasoning_gym.names import installed_names

    added = []
    for name, category in installed_names().items():
        if name not in DATASETS:
            try:
                _register(name, category)
            except RegistrationError:  # registered by an earlier call
                continue
            added.append(f"rg:{name}")
    return added
