"""Shared fixtures: a small synthesized trip-planning folder, made once per session."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gemkit.synth.tasks import Database, get_category, synthesize
from gemkit.synth.tasks.run import RunConfig, run_synthesis


@pytest.fixture(scope="session")
def trip_run(tmp_path_factory: pytest.TempPathFactory):
    """Four kept trip tasks at levels 2-5, filtered by pass@2 with the baseline."""
    out = tmp_path_factory.mktemp("trip_run")
    config = RunConfig(n=4, out=out, min_level=2, max_level=5, k=2, seed=3, export=True)
    return run_synthesis(config)


@pytest.fixture(scope="session")
def trip_tasks(tmp_path_factory: pytest.TempPathFactory):
    """Six synthesized trip tasks (levels up to 7), each with its open database."""
    root = tmp_path_factory.mktemp("trip_tasks")
    cat = get_category("trip_planning")
    out = []
    for i in range(6):
        path = Path(root) / f"t{i}.sqlite"
        syn = synthesize(cat, path, np.random.default_rng([11, i]), 7)
        assert syn is not None
        out.append((syn, Database(path)))
    return out
