"""A trainer that is missing, or installed without one of its dependencies, is said so.

verl and OpenRLHF are big and usually installed `--no-deps` plus the few light packages
their agent APIs import (`ray`, `orjson`, `cachetools`, `pylatexenc`, ...). When one is
missing, the adapter class cannot exist: the error names the package to install, never a
silently missing class or a class without the base the trainer checks for.
"""

from __future__ import annotations

from gemkit.errors import GemkitError

#: import names whose pip package has another name
PIP_NAMES = {
    "hydra": "hydra-core",
    "yaml": "pyyaml",
    "sklearn": "scikit-learn",
    "cv2": "opencv-python",
}


class MissingDependencyError(GemkitError, ImportError):
    """A trainer adapter cannot be built: its trainer, or one of the trainer's imports, is missing."""


def missing_dependency(trainer: str, what: str, error: ImportError) -> MissingDependencyError:
    """The error for `what` (an adapter class) when importing `trainer` failed with `error`."""
    missing = (error.name or "").split(".")[0]
    if not missing or missing == trainer:
        return MissingDependencyError(f"{what} needs {trainer}: pip install {trainer} ({error})")
    package = PIP_NAMES.get(missing, missing)
    return MissingDependencyError(
        f"{what} needs {trainer}, which is installed but cannot be imported without "
        f"{missing!r}: pip install {package} ({error})"
    )
