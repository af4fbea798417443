"""The `toolworld:` ids and the built-in task sets they are played on.

`toolworld:TripPlanning-v0` (and each other category's id) plays a built-in set: 24 tasks of
levels 1-4, seed 0, kept when the baseline agent passes at least once in 2 tries. The set is
synthesized offline the first time it is needed and kept in `$GEMKIT_CACHE_DIR/toolworld`
(default `~/.cache/gemkit/toolworld`); `make(id, path=DIR)` plays any folder written by
`gemkit synth tasks` instead. Synthesis registers these ids (through the `gemkit.envs`
entry point `toolworld.synth`) because they need its records; the env that plays them,
`gemkit.envs.toolworld.env`, never imports synth.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from gemkit.cache import cache_dir
from gemkit.registry import register

#: env name -> (category, description)
WORLDS: dict[str, tuple[str, str]] = {
    "TripPlanning": (
        "trip_planning",
        "Plan a multi-day trip with 15 travel tools under tier, weather and transport rules.",
    ),
    "MeetingScheduling": (
        "meeting_scheduling",
        "Schedule meetings across people's calendars and rooms under capacity and time rules.",
    ),
    "ShoppingBasket": (
        "shopping_basket",
        "Fill a shopping basket under a budget, dietary rules and nutrition targets.",
    ),
}

#: tasks in a built-in set, and the levels they spread over
BUILTIN_TASKS = 24
BUILTIN_MAX_LEVEL = 4
BUILTIN_VERSION = 1
#: pass@k tries of the baseline agent when the set is made
BUILTIN_K = 2


def cache_root() -> Path:
    """Where built-in task sets are kept (`GEMKIT_CACHE_DIR`, else `~/.cache/gemkit`)."""
    return cache_dir("toolworld")


def builtin_dir(category: str, *, n: int = BUILTIN_TASKS, seed: int = 0) -> Path:
    """The folder of a category's built-in task set, synthesized (seeded) on first use."""
    folder = cache_root() / f"{category}-v{BUILTIN_VERSION}-s{seed}-n{n}"
    if (folder / "tasks.jsonl").exists():
        return folder
    from gemkit.synth.tasks.run import RunConfig, run_synthesis

    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{category}-", dir=folder.parent))
    try:
        config = RunConfig(
            category=category,
            n=n,
            out=tmp,
            min_level=1,
            max_level=BUILTIN_MAX_LEVEL,
            k=BUILTIN_K,
            seed=seed,
            export=False,
        )
        run_synthesis(config)
        try:
            tmp.rename(folder)
        except OSError:  # another process finished first: keep theirs
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return folder


def make_builtin(
    category: str = "trip_planning",
    *,
    path: str | Path | None = None,
    records: Any = None,
    builtin_seed: int = 0,
    builtin_n: int = BUILTIN_TASKS,
    **kwargs: Any,
) -> Any:
    """A `toolworld:` env on a folder (`path=`), records in memory, or the built-in set."""
    from gemkit.envs.toolworld.env import make_toolworld

    if path is None and records is None:
        path = builtin_dir(category, n=builtin_n, seed=builtin_seed)
    return make_toolworld(category, path=path, records=records, **kwargs)


for _name, (_category, _description) in WORLDS.items():
    register(
        f"toolworld:{_name}-v0",
        "gemkit.synth.tasks.builtin_sets:make_builtin",
        kwargs={"category": _category},
        description=_description,
        tags=("tools", "planning", "synthesized"),
        expert="gemkit.envs.toolworld.env:make_baseline",
    )
