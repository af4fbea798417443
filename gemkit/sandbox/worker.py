"""The supervisor's entry point inside a sandbox: its start-up (site, root, seccomp), then `serve`.

The supervisor is stdlib only and imports nothing from gemkit at run time: the sandbox's
interpreter gets its source as one program (`python -I -c <bootstrap> <source> <config>`),
which `gemkit.sandbox.backends.worker_source` joins from these files, in this order, less
their imports of each other:

- `wire.py`: the protocol (frames host to supervisor, replies back, a child's request and
  report), the host's side of it too;
- `child.py`: the forked child that runs user code (limits, privileges, execution);
- `supervisor.py`: `Supervisor`, which forks the children, pumps their output into memory no
  child inherits, and answers the host;
- `seccomp.py`: the system-call filter every process of the sandbox runs under;
- this file: `main`, which sets the process up (site, the unshare backend's root, seccomp) and
  serves.

The host reads a call's outcome from the reply with `gemkit.sandbox.outcome` (not part of the
supervisor's source).

Protocol: each message is a 4-byte big-endian length followed by that many bytes. A host
request is a `marshal` frame of settings (`{"op": "exec" | "reset" | "ping", ...}`: never call
data) followed by the call's bytes raw (`payload` gives their lengths): the child's request,
made by the host (`encode_request`: code, limits, files, a session's stdin, packed with
`struct`), and a stateless call's stdin. A reply is a JSON header, which the host can parse
safely whatever this process sends, followed raw by the call's kept stdout, stderr and the
child's report (`tail` gives their lengths).

The supervisor never runs user code in its own process: each `exec` runs in a forked child
(stateless mode: a fresh child per call; stateful mode: one long-lived session child), in the
sandbox's memory cgroup, with resource limits, a dropped uid (or, without root, no
capabilities), and no access to the protocol pipes; every process of the sandbox runs under a
seccomp filter (`seccomp_filter`). No byte of a call passes through a Python object here: the
call's bytes move between pipes and memory regions that `fork` leaves out of every child
(`_Region`), so no later call's code can find them in the memory it inherits. The child's
report (`encode_report`) is its own word: the code can forge it (see `outcome.exec_outcome`).
"""

from __future__ import annotations

import gc
import json
import os
import signal
import sys

from gemkit.sandbox.seccomp import _install_seccomp, seccomp_filter
from gemkit.sandbox.supervisor import Supervisor


class _SiteOnMiss:
    """The last import finder: the first import nothing else finds runs `site.main()` first.

    The supervisor starts without `site` (`-S`) and takes the sys.path it would have built;
    this runs what it skipped (the .pth files' import lines, which may install finders, e.g. an
    editable install's, and sitecustomize), once per process, then looks again.
    """

    done = False

    @classmethod
    def find_spec(cls, name: str, path: object = None, target: object = None) -> object:
        """Run `site.main()` once, then search sys.path again; None: not found."""
        if cls.done:
            return None
        cls.done = True
        import site
        from importlib.machinery import PathFinder

        site.main()
        return PathFinder.find_spec(name, path)  # type: ignore[arg-type]


def _adopt_site(info: dict) -> None:
    """Take the sys.path and prefixes `site` would have set, and the builtins it adds."""
    import site

    sys.path[:] = info["path"]
    sys.prefix, sys.exec_prefix = info["prefix"], info["exec_prefix"]
    site.setquit()  # exit() and quit()
    site.setcopyright()
    site.sethelper()
    # a finder in all but its annotations (typing stays out of the supervisor's memory)
    sys.meta_path.append(_SiteOnMiss)  # type: ignore[arg-type]


def _no_dump() -> None:
    """Keep same-uid code from opening this process's pipes through /proc or ptrace."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except Exception:
        pass


def _release_free_memory() -> None:
    """Hand back to the kernel the heap that compiling this file left free.

    Every fork copies the page tables of this process and every child unmaps them again, so
    each megabyte kept here costs on every call (glibc only; elsewhere a no-op).
    """
    gc.collect()
    try:
        import ctypes

        ctypes.CDLL(None).malloc_trim(0)
    except Exception:
        pass


def main(argv: list[str]) -> None:
    """Entry point inside the sandbox: the last argument is the JSON config."""
    config = json.loads(argv[-1])
    # set for this process alone (see backends.SUPERVISOR_ENV); the code's own programs never see it
    os.environ.pop("LD_BIND_NOW", None)
    if config.get("site"):
        _adopt_site(config["site"])
    # move the protocol pipes off 0/1 so nothing the code prints can reach the host
    rfd = os.dup(0)
    wfd = os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    _no_dump()
    if config.get("setup"):
        _setup_filesystem(config)
    if config.get("seccomp"):
        program = seccomp_filter(os.uname().machine)
        if program is not None:
            _install_seccomp(program)
    os.chdir(config["workdir"])
    supervisor = Supervisor(config, rfd, wfd)
    _release_free_memory()
    supervisor.serve()


def _setup_filesystem(config: dict) -> None:
    """Build a fresh root (read-only binds + tmpfs) and pivot into it (the unshare backend).

    Runs as root of fresh mount and pid namespaces. After `pivot_root` the host's tree is
    detached, so no chroot-style escape leads back to it. The paths in `hidden` are covered
    (an empty read-only folder, or an empty file), and the root itself is made read-only: the
    code can write only /tmp and the working directory, which are emptied after each call.
    """
    import ctypes

    setup = config["setup"]
    libc = ctypes.CDLL(None, use_errno=True)
    ms_rdonly, ms_nosuid, ms_nodev, ms_noexec = 1, 2, 4, 8
    ms_remount, ms_bind, ms_rec, ms_private = 32, 4096, 16384, 1 << 18

    def mount(src: str | None, dst: str, fstype: str | None, flags: int, data: str | None) -> None:
        enc = [None if x is None else x.encode() for x in (src, dst, fstype, data)]
        if libc.mount(enc[0], enc[1], enc[2], flags, enc[3]) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"mount {src} on {dst}: {os.strerror(err)}")

    mount(None, "/", None, ms_rec | ms_private, None)
    # the new root is a tmpfs mounted, in this private mount namespace, over a host folder
    # that holds none of the paths to bind (a virtualenv may live under /tmp)
    ro_paths = setup["ro_paths"]
    new = next(
        c
        for c in ("/tmp", "/mnt", "/media", "/srv", "/opt", "/home")
        if os.path.isdir(c) and not any(p == c or p.startswith(c + "/") for p in ro_paths)
    )
    mount("tmpfs", new, "tmpfs", ms_nosuid | ms_nodev, "mode=0755,size=16m")
    size = int(setup["disk_bytes"])
    for path, mode in (("/tmp", "1777"), (config["workdir"], "0777")):
        os.makedirs(new + path, mode=0o755, exist_ok=True)
        mount("tmpfs", new + path, "tmpfs", ms_nosuid | ms_nodev, f"mode={mode},size={size}")
    for path in ro_paths:
        target = new + path
        if os.path.islink(path):
            os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
            os.symlink(os.readlink(path), target)
            continue
        if os.path.isdir(path):
            os.makedirs(target, mode=0o755, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
            open(target, "a").close()
        mount(path, target, None, ms_bind | ms_rec, None)
        locked = os.statvfs(path).f_flag & (ms_nosuid | ms_nodev | ms_noexec)
        mount(None, target, None, ms_bind | ms_remount | ms_rdonly | ms_nosuid | locked, None)
    for path in setup.get("hidden", ()):
        target = new + path
        if os.path.isdir(target):
            mount("tmpfs", target, "tmpfs", ms_rdonly | ms_nosuid | ms_nodev, "mode=0755,size=4k")
        else:
            mount("/dev/null", target, None, ms_bind, None)
            mount(None, target, None, ms_bind | ms_remount | ms_rdonly | ms_nosuid, None)
    os.makedirs(new + "/dev", mode=0o755)
    for node in ("null", "zero", "full", "random", "urandom"):
        open(new + "/dev/" + node, "a").close()
        mount("/dev/" + node, new + "/dev/" + node, None, ms_bind, None)
    for link, target in (
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ):
        os.symlink(target, new + "/dev/" + link)
    os.makedirs(new + "/proc", mode=0o755)
    mount("proc", new + "/proc", "proc", ms_nosuid | ms_nodev | ms_noexec, None)
    os.chdir(new)
    if libc.syscall(int(setup["pivot_root"]), b".", b".") != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"pivot_root: {os.strerror(err)}")
    if libc.umount2(b".", 2) != 0:  # MNT_DETACH: the old root disappears from this namespace
        err = ctypes.get_errno()
        raise OSError(err, f"umount old root: {os.strerror(err)}")
    os.chdir("/")
    mount(None, "/", None, ms_remount | ms_bind | ms_rdonly | ms_nosuid | ms_nodev, None)


if __name__ == "__main__":
    main(sys.argv)
