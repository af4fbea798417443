"""Backends for the terminal tests: Docker when an engine answers (CI starts one), and bwrap."""

from __future__ import annotations

import os

import pytest

from gemkit.envs.terminal.bwrap import bwrap_available
from gemkit.envs.terminal.docker import docker_available

_DOCKER_WHY = docker_available()
_BWRAP_WHY = bwrap_available()


def require(backend: str) -> None:
    """Skip the test, saying why, when `backend` cannot run on this machine."""
    if backend == "docker" and _DOCKER_WHY is not None:
        if os.environ.get("GEMKIT_REQUIRE_DOCKER"):  # CI sets it: a silent skip would hide a break
            pytest.fail(f"GEMKIT_REQUIRE_DOCKER is set but Docker cannot be used: {_DOCKER_WHY}")
        pytest.skip(
            f"no usable Docker engine here ({_DOCKER_WHY}); CI starts dockerd and runs these"
        )
    if backend == "bwrap" and _BWRAP_WHY is not None:
        pytest.skip(f"bubblewrap cannot run here: {_BWRAP_WHY}")


@pytest.fixture(params=["docker", "bwrap"])
def backend(request: pytest.FixtureRequest) -> str:
    """Each test taking `backend` runs once per backend."""
    require(request.param)
    return request.param


@pytest.fixture
def docker_backend() -> str:
    """The Docker backend, or a skip with the reason."""
    require("docker")
    return "docker"


@pytest.fixture
def bwrap_backend() -> str:
    """The bwrap backend, or a skip with the reason."""
    require("bwrap")
    return "bwrap"
