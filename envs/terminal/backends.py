"""Where a task's shell commands run: a Docker container, or a bubblewrap sandbox without one.

`open_terminal` picks the backend (`choose_backend`); the interface both give lives in
`terminal.py`, each backend in its own file (`docker.py`, `bwrap.py`).

Both backends give the same interface and the same picture: a POSIX shell in `/work`
(writable), `/tmp` (writable), everything else read-only, no network; `/work` and `/tmp` are
each a tmpfs bounded in bytes (`disk_mb`) and in files (`max_files`).

An episode has two phases. The agent's commands (`run`) run as an unprivileged agent user.
Then `seal` ends the agent for good: every process it left is killed, every entry of `/work`
that is not a regular file or a folder (links, FIFOs, sockets) is deleted, the rest is made
read-only, and `/tmp` is emptied. Each test (`run_test`) then runs as a grader user the agent
never was, with a fresh `/tmp`, and nothing it starts outlives it. A test's expected output
never enters the terminal: the env compares what the test printed with it (see `env.py`).

- **docker**: one container per episode from a locally built image, `--network none`, a
  read-only root, tmpfs `/work` and `/tmp`, no `/dev/shm` nor message queues,
  memory/CPU/process limits. The
  agent is uid 10000 and the grader uid 10001; the container's init and its lifeline run as
  root, out of the agent's reach. Containers carry the label `gemkit.terminal=1` and their
  owner's host, pid and pid start time. The lifeline reads an attached stdin that the engine
  closes when the owner's connection drops, so the container stops and removes itself when
  its owner dies, even by SIGKILL; `cleanup_stale()` removes any labelled container whose
  owner is gone, as a second net.
- **bwrap**: a holder process keeps the episode's two tmpfs in a mount namespace of its own
  (they vanish with it, even when gemkit is SIGKILLed); each command runs in a fresh bubblewrap
  sandbox entered into that namespace, with every namespace unshared (no network) over the
  host's `/usr` (read-only; gemkit's own files hidden). A sandbox's processes end with it.
"""

from __future__ import annotations

import logging

from gemkit.envs.terminal.bwrap import BwrapTerminal, bwrap_available
from gemkit.envs.terminal.docker import DockerTerminal, docker_available
from gemkit.envs.terminal.terminal import Limits, Terminal, TerminalError

log = logging.getLogger(__name__)

BACKENDS = ("docker", "bwrap")


_auto_choice: str | None = None


def choose_backend(requested: str = "auto") -> str:
    """Resolve `auto` to `docker` when an engine is there, else `bwrap`; refuse if neither works."""
    global _auto_choice
    if requested not in (*BACKENDS, "auto"):
        raise TerminalError(
            f"unknown terminal backend {requested!r}; expected 'docker', 'bwrap' or 'auto'"
        )
    if requested != "auto":
        return requested
    if _auto_choice is None:
        why_docker = docker_available()
        if why_docker is None:
            _auto_choice = "docker"
        else:
            why_bwrap = bwrap_available()
            if why_bwrap is not None:
                raise TerminalError(
                    f"no terminal backend works here: docker: {why_docker}; bwrap: {why_bwrap}"
                )
            log.info("no Docker engine (%s): terminal tasks run under bwrap", why_docker)
            _auto_choice = "bwrap"
    return _auto_choice


def open_terminal(
    backend: str = "auto", limits: Limits | None = None, *, image: str = "busybox"
) -> Terminal:
    """An unstarted terminal of `backend` (`docker`, `bwrap` or `auto`)."""
    name = choose_backend(backend)
    if name == "docker":
        return DockerTerminal(limits, image=image)
    return BwrapTerminal(limits, image=image)
