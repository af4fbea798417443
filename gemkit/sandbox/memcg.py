"""A memory cgroup per sandbox, so that every byte a call's code holds counts against its limit.

`RLIMIT_AS` caps one process's address space. It never sees pages that are not mapped (a
memfd, a file in a tmpfs, a pipe's buffer) and it counts per process, so code that forks holds
`max_processes` times the limit. A memory cgroup charges all of that: anonymous memory of every
process in it, shared memory, tmpfs and memfd pages, and the kernel memory they use (pipes,
page tables). Each sandbox gets one, below the cgroup gemkit itself runs in (so any limit set
on gemkit also holds for its sandboxes); the supervisor moves each child it forks into it
(`worker._child_plan`), and stays outside it itself.

Where no memory cgroup can be made (cgroups not mounted, not root, the memory controller not
delegated), the sandbox still works and `why_unavailable()` says why; memory is then limited
per process only (see docs/sandbox.md).
"""

from __future__ import annotations

import functools
import itertools
import logging
import os
import time
from dataclasses import dataclass

log = logging.getLogger(__name__)

PREFIX = "gemkit-sandbox-"
_counter = itertools.count()


@dataclass(frozen=True)
class Hierarchy:
    """Where gemkit's own memory cgroup is, and its version (1 or 2)."""

    path: str
    version: int

    def limit_files(self) -> tuple[str, ...]:
        """The files that set a group's limit, in the order they must be written."""
        if self.version == 1:
            return ("memory.limit_in_bytes", "memory.memsw.limit_in_bytes")
        return ("memory.max", "memory.swap.max")

    @property
    def events(self) -> str:
        """The file that counts the processes the limit killed (`oom_kill N`)."""
        return "memory.oom_control" if self.version == 1 else "memory.events"


def _mounts() -> list[tuple[str, str, str]]:
    """(mount point, file-system type, super options) of every mount this process sees."""
    out = []
    try:
        with open("/proc/self/mountinfo", encoding="utf-8") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                fields, tail = left.split(), right.split()
                if len(fields) >= 5 and len(tail) >= 3:
                    out.append((fields[4].replace("\\040", " "), tail[0], tail[2]))
    except OSError:
        pass
    return out


def find_hierarchy(cgroup_text: str, mounts: list[tuple[str, str, str]]) -> Hierarchy | str:
    """gemkit's memory cgroup from /proc/self/cgroup and the mounts, or why there is none."""
    v1 = v2 = None
    for line in cgroup_text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if "memory" in parts[1].split(","):
            v1 = parts[2]
        elif parts[0] == "0" and parts[1] == "":
            v2 = parts[2]
    if v1 is not None:
        for point, fstype, options in mounts:
            if fstype == "cgroup" and "memory" in options.split(","):
                return Hierarchy(os.path.join(point, v1.lstrip("/")).rstrip("/"), 1)
        return "the cgroup v1 memory hierarchy is not mounted"
    if v2 is not None:
        for point, fstype, _ in mounts:
            if fstype == "cgroup2":
                path = os.path.join(point, v2.lstrip("/")).rstrip("/")
                try:
                    with open(os.path.join(path, "cgroup.subtree_control")) as f:
                        delegated = "memory" in f.read().split()
                except OSError:
                    delegated = False
                if not delegated:
                    return (
                        f"the memory controller is not enabled for the children of {path} "
                        "(cgroup.subtree_control)"
                    )
                return Hierarchy(path, 2)
        return "cgroup2 is not mounted"
    return "this process is in no memory cgroup (cgroups not mounted)"


@functools.cache
def hierarchy() -> Hierarchy | str:
    """This process's memory cgroup hierarchy (found once), or why there is none."""
    try:
        with open("/proc/self/cgroup", encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return "/proc/self/cgroup cannot be read (not Linux?)"
    found = find_hierarchy(text, _mounts())
    if isinstance(found, str):
        return found
    if not os.access(found.path, os.W_OK):
        return f"{found.path} is not writable by this user (memory cgroups need root)"
    _remove_stale(found.path)
    return found


@functools.cache
def why_unavailable() -> str | None:
    """None when sandboxes get a memory cgroup each; else the reason, in words."""
    found = hierarchy()
    if isinstance(found, str):
        return found
    try:
        group = MemoryGroup.create(64 * 1024 * 1024)
    except OSError as e:
        return f"a memory cgroup cannot be made under {found.path}: {e.strerror or e}"
    group.remove()
    return None


def _remove_stale(parent: str) -> None:
    """Remove the empty groups that sandboxes of processes no longer running left behind."""
    try:
        names = os.listdir(parent)
    except OSError:
        return
    for name in names:
        if not name.startswith(PREFIX):
            continue
        pid = name[len(PREFIX) :].split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not os.path.exists(f"/proc/{pid}"):
            try:
                os.rmdir(os.path.join(parent, name))
            except OSError:
                pass


@dataclass
class MemoryGroup:
    """One sandbox's memory cgroup, and the two files its supervisor is handed."""

    path: str
    procs_fd: int  # cgroup.procs, open for writing: a child writes "0" to move itself in
    events_fd: int  # the oom_kill count, open for reading

    @classmethod
    def create(cls, limit_bytes: int) -> MemoryGroup:
        """A new group capped at `limit_bytes` (swap included, where swap is counted)."""
        found = hierarchy()
        if isinstance(found, str):
            raise OSError(0, found)
        path = os.path.join(found.path, f"{PREFIX}{os.getpid()}-{next(_counter)}")
        os.mkdir(path)
        try:
            for name in found.limit_files():
                target = os.path.join(path, name)
                if not os.path.exists(target):  # no swap accounting on this kernel
                    continue
                with open(target, "w") as f:
                    f.write("0" if name == "memory.swap.max" else str(int(limit_bytes)))
            procs = os.open(os.path.join(path, "cgroup.procs"), os.O_WRONLY)
            try:
                events = os.open(os.path.join(path, found.events), os.O_RDONLY)
            except OSError:
                os.close(procs)
                raise
        except OSError:
            _rmdir(path, 0)
            raise
        return cls(path, procs, events)

    def close_fds(self) -> None:
        """Close this process's copies of the two files (the supervisor holds its own)."""
        for fd in (self.procs_fd, self.events_fd):
            try:
                os.close(fd)
            except OSError:
                pass
        self.procs_fd = self.events_fd = -1

    def remove(self, wait: float = 2.0) -> None:
        """Remove the group once its processes are gone (they are being killed)."""
        self.close_fds()
        _rmdir(self.path, wait)


def _rmdir(path: str, wait: float) -> None:
    deadline = time.monotonic() + wait
    while True:
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError as e:
            # EBUSY while the killed processes finish exiting
            if time.monotonic() >= deadline:
                log.debug("memory cgroup %s not removed: %s", path, e)
                return
            time.sleep(0.005)
