"""The bubblewrap backend: each command in a fresh sandbox over the episode's bounded tmpfs."""

from __future__ import annotations

import functools
import json
import logging
import os
import selectors
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import weakref
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import gemkit
import gemkit.envs
from gemkit.envs.terminal.terminal import (
    ENV,
    SEALED,
    TEST_ENV,
    WORKDIR,
    CommandResult,
    Limits,
    Terminal,
    TerminalError,
    _proc_start_time,
    _result,
    check_file_names,
)

log = logging.getLogger(__name__)

#: host paths the bwrap sandbox sees read-only, when they exist
BWRAP_RO = (
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc/alternatives",
    "/etc/ld.so.cache",
)
#: folders never shown in a sandbox even when they lie under a path of `BWRAP_RO` (a system
#: install of gemkit under /usr holds every task's tests and reference solution)
SECRET_DIRS = tuple(
    sorted({str(Path(gemkit.__file__).parent), str(Path(gemkit.envs.__file__).parent)})
)
#: the uid the agent sees when gemkit does not run as root (any unprivileged number)
SANDBOX_UID = 1000
#: the environment of the host tools that make a sandbox (unshare, nsenter, bwrap): never
#: gemkit's own, whose API keys an agent could read in /proc/1/environ of its sandbox
HOST_TOOL_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin",
    "LANG": "C",
}


@functools.cache
def _host_tool(name: str) -> str:
    """The path of a host tool, found on gemkit's own PATH (the tools run without it)."""
    return shutil.which(name) or name


_uid_counter = iter(range(1 << 30))
_uid_lock = threading.Lock()
_HOLDER_SCRIPT = r"""
opts=nosuid,nodev,size=$2k,nr_inodes=$3
mount -t tmpfs -o "$opts,mode=0755,uid=$4,gid=$4" gemkit-work "$1/work" &&
  mount -t tmpfs -o "$opts,mode=1777" gemkit-tmp "$1/tmp" && echo ready && exec cat >/dev/null
"""


def hidden_dirs(bound: Iterable[str], secret: Iterable[str]) -> list[str]:
    """The `secret` folders that a sandbox binding the `bound` paths would show."""
    roots = [os.path.realpath(b) for b in bound if os.path.exists(b)]
    hidden = []
    for s in secret:
        real = os.path.realpath(s)
        if any(real == r or real.startswith(r.rstrip("/") + "/") for r in roots):
            hidden.append(real)
    return sorted(set(hidden))


def _parents(paths: Iterable[str]) -> list[str]:
    """The folders above `paths` (not `/`), each once, outermost first."""
    found = {str(parent) for p in paths for parent in Path(p).parents if str(parent) != "/"}
    return sorted(found, key=lambda f: (f.count("/"), f))


def _spawn_holder(root: Path, size_kb: int, files: int, owner: int) -> subprocess.Popen:
    """A process that keeps `root`/work and `root`/tmp mounted as bounded tmpfs in a mount
    namespace of its own; they vanish when it ends, which it does when its stdin closes."""
    argv = [_host_tool("unshare"), "--mount", "--propagation", "private"]
    if os.geteuid() != 0:  # a user namespace of our own makes us root enough to mount
        argv[1:1] = ["--user", "--map-root-user"]
    argv += ["--", "/bin/sh", "-c", _HOLDER_SCRIPT, "sh", str(root), str(size_kb), str(files)]
    proc = subprocess.Popen(
        [*argv, str(owner)],
        env=HOST_TOOL_ENV,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        ready = sel.select(20) and proc.stdout.readline() == b"ready\n"
    if not ready:
        proc.kill()
        err = proc.stderr.read().decode("utf-8", "replace").strip()
        proc.wait()
        raise TerminalError(f"could not make the terminal's bounded work area: {err or 'timeout'}")
    return proc


def _stop_holder(proc: subprocess.Popen, fds: list[int], root: str) -> None:
    """Unmount the work area (its holder ends) and delete the folder."""
    for fd in fds:
        os.close(fd)
    proc.kill()
    proc.wait()
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()
    shutil.rmtree(root, ignore_errors=True)


@functools.cache
def bwrap_available() -> str | None:
    """None when bubblewrap can run a shell here over a bounded work area, else the reason."""
    exe = shutil.which("bwrap")
    if exe is None:
        return "bwrap is not installed (Debian/Ubuntu: apt-get install bubblewrap)"
    for tool in ("unshare", "nsenter"):
        if shutil.which(tool) is None:
            return f"{tool} (util-linux) is not installed; the bwrap backend needs it"
    try:
        usage = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=20)
        if "--size" not in usage.stdout + usage.stderr:  # the tests' bounded /tmp needs it
            return "bwrap is older than 0.8.0 (no --size); install a newer bubblewrap"
        out = subprocess.run(
            [exe, "--unshare-all", "--ro-bind", "/", "/", "--", "/bin/sh", "-c", "true"],
            capture_output=True,
            timeout=20,
        )
    except (OSError, subprocess.SubprocessError) as e:
        return f"bwrap failed to start: {e}"
    if out.returncode != 0:
        err = out.stderr.decode("utf-8", "replace").strip()
        return f"bwrap failed to start: {err or f'exit status {out.returncode}'}"
    root = Path(tempfile.mkdtemp(prefix="gemkit-probe-"))
    try:
        (root / "work").mkdir()
        (root / "tmp").mkdir()
        _stop_holder(_spawn_holder(root, 64, 16, 0), [], str(root))
    except (OSError, TerminalError) as e:
        return f"cannot mount a size-bounded tmpfs for the work area (user namespaces off?): {e}"
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return None


FOLDER_PREFIX = "gemkit-terminal-"
_bwrap_swept = False


def cleanup_stale_folders(base: str | None = None) -> int:
    """Delete bwrap work folders whose owning process is gone; return how many."""
    removed = 0
    for path in Path(base or tempfile.gettempdir()).glob(f"{FOLDER_PREFIX}*-*-*"):
        pid, started = path.name[len(FOLDER_PREFIX) :].split("-")[:2]
        if pid.isdigit() and _proc_start_time(int(pid)) != started:
            shutil.rmtree(path, ignore_errors=True)
            removed += 1
    return removed


def seal_tree(top: str | Path) -> list[str]:
    """Delete every entry under `top` that is not a regular file or a folder (never following
    a link) and make the rest read-only (executable files stay executable); return the paths
    deleted, relative to `top`. Only for a tree nobody else can change meanwhile."""
    top = str(top)
    dropped: list[str] = []
    folders = [top]
    i = 0
    while i < len(folders):
        folder = folders[i]
        i += 1
        os.chmod(folder, 0o755)  # the owner may have shut it: we must list and delete in it
        with os.scandir(folder) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    folders.append(entry.path)
                elif entry.is_file(follow_symlinks=False):
                    mode = entry.stat(follow_symlinks=False).st_mode
                    os.chmod(entry.path, 0o555 if mode & 0o111 else 0o444)
                else:
                    os.unlink(entry.path)
                    dropped.append(os.path.relpath(entry.path, top))
    for folder in reversed(folders):
        os.chmod(folder, 0o555)
    return sorted(dropped)


def _read_capped(
    proc: subprocess.Popen, limit: int, timeout: float, kill: Any
) -> tuple[bytes, int, bool]:
    """Read `proc`'s stdout until it closes, keeping the first `limit` bytes and counting the
    rest (nothing touches a disk); `kill()` it past `timeout` seconds."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    head = bytearray()
    total = 0
    timed_out = False
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while True:
            left = deadline - time.monotonic()
            if left <= 0 and not timed_out:
                timed_out = True
                kill()
                deadline = time.monotonic() + 10  # the dead sandbox's pipe closes at once
                continue
            if left <= 0:
                break  # a writer outlived its sandbox: cannot happen, but never hang on it
            if not sel.select(left):
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            total += len(chunk)
            if len(head) < limit:
                head += chunk[: limit - len(head)]
    return bytes(head), total, timed_out


class BwrapTerminal(Terminal):
    """Each command in a fresh bubblewrap sandbox over the episode's bounded tmpfs pair.

    When gemkit runs as root, commands run under a uid of their own and tests under another
    (so the process limit counts only this terminal's processes); otherwise as the calling
    user (uid 1000 inside), without a process limit. Memory is capped by `RLIMIT_AS`.
    """

    backend = "bwrap"

    def __init__(self, limits: Limits | None = None, *, image: str = "busybox"):
        super().__init__(limits)
        why = bwrap_available()
        if why is not None:
            raise TerminalError(why)
        self.image = image  # the host's tools stand in for the image's
        self.root: Path | None = None
        self._area: Path | None = None  # the holder's view of `root`
        self._holder: subprocess.Popen | None = None
        self._finalizer: weakref.finalize | None = None
        self._lock = threading.Lock()
        self.uid: int | None = None
        self.grader_uid: int | None = None
        if os.geteuid() == 0 and shutil.which("setpriv") and shutil.which("prlimit"):
            with _uid_lock:
                self.uid = 1_500_000_000 + (os.getpid() * 1024 + next(_uid_counter)) % (1 << 29)
            self.grader_uid = self.uid + (1 << 29)

    @property
    def running(self) -> bool:
        """True while this terminal holds its work area."""
        return self.root is not None

    def start(self, files: dict[str, str | bytes] | None = None) -> None:
        """Make a fresh work area (dropping any earlier one) holding `files`."""
        self.close()
        self.sealed = False
        global _bwrap_swept
        if not _bwrap_swept:
            _bwrap_swept = True
            cleanup_stale_folders()
        pid = os.getpid()
        root = Path(tempfile.mkdtemp(prefix=f"{FOLDER_PREFIX}{pid}-{_proc_start_time(pid)}-"))
        for sub in ("work", "tmp"):
            (root / sub).mkdir()
        lim = self.limits
        holder = _spawn_holder(root, lim.disk_mb * 1024, lim.max_files, self.uid or 0)
        try:
            # a descriptor of the mounted folder stays valid whatever happens to the holder's pid
            fd = os.open(f"/proc/{holder.pid}/root{root}", os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            _stop_holder(holder, [], str(root))
            raise
        self._finalizer = weakref.finalize(self, _stop_holder, holder, [fd], str(root))
        self.root, self._holder = root, holder
        self._area = Path(f"/proc/self/fd/{fd}")
        if files:
            check_file_names(files)
            work = self._area / "work"
            for name, content in files.items():
                data = content.encode() if isinstance(content, str) else content
                path = work / name
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
                path.chmod(0o777 if data.startswith(b"#!") else 0o666)
            if self.uid is not None:
                for path in work.rglob("*"):
                    os.lchown(path, self.uid, self.uid)

    def _argv(self, command: str, info_fd: int, *, test: bool = False) -> list[str]:
        """The command line of one sandbox: an agent command, or a test (`test=True`)."""
        assert self.root is not None and self._holder is not None
        argv = [_host_tool("nsenter"), "--target", str(self._holder.pid), "--mount"]
        uid = self.grader_uid if test else self.uid
        bwrap = _host_tool("bwrap")
        if uid is not None:
            argv += ["--", bwrap]
            # every namespace but the user one: in a new user namespace, root could not
            # switch to the sandbox's own uid (it would be unmapped)
            argv += ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts"]
            argv += ["--unshare-cgroup-try"]
        else:
            argv += ["--user", "--preserve-credentials", "--", bwrap, "--unshare-all"]
            argv += ["--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID)]
        argv += ["--die-with-parent", "--new-session", "--info-fd", str(info_fd)]
        # as root, bwrap would make a bound path's missing parents (/etc) 0700, closed to the
        # sandbox's uid
        for parent in _parents(p for p in BWRAP_RO if os.path.lexists(p)):
            argv += ["--perms", "0755", "--dir", parent]
        for path in BWRAP_RO:
            if os.path.islink(path):
                argv += ["--symlink", os.readlink(path), path]
            elif os.path.exists(path):
                argv += ["--ro-bind", path, path]
        for path in hidden_dirs(BWRAP_RO, SECRET_DIRS):
            argv += ["--tmpfs", path, "--remount-ro", path]
        lim = self.limits
        if test:  # the sealed work area read-only, and a /tmp of the test's own
            argv += ["--ro-bind", f"{self.root}/work", WORKDIR]
            argv += ["--perms", "1777", "--size", str(lim.disk_mb << 20), "--tmpfs", "/tmp"]
        else:
            argv += ["--bind", f"{self.root}/work", WORKDIR, "--bind", f"{self.root}/tmp", "/tmp"]
        # a read-only /dev: devices work, but no file can be made there (nor in /dev/shm)
        argv += ["--proc", "/proc", "--dev", "/dev", "--remount-ro", "/dev", "--remount-ro", "/"]
        argv += ["--chdir", WORKDIR, "--clearenv"]
        for key, value in (TEST_ENV if test else ENV).items():
            argv += ["--setenv", key, value]
        limits = ["prlimit", f"--as={lim.memory_mb << 20}", f"--fsize={lim.disk_mb << 20}"]
        if uid is not None:
            argv += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
            argv += ["--", *limits, f"--nproc={lim.pids}", "--"]
            argv += ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]
            argv += ["--inh-caps=-all", "--bounding-set=-all", "--"]
        else:
            argv += ["--", *limits, "--"]
        return [*argv, "/bin/sh", "-c", command]

    def _sandbox(self, command: str, timeout: float, limit: int, *, test: bool) -> CommandResult:
        """Run one sandbox; when it returns, every process of the sandbox is dead."""
        begin = time.monotonic()
        info_r, info_w = os.pipe()
        try:
            proc = subprocess.Popen(
                self._argv(command, info_w, test=test),
                env=HOST_TOOL_ENV,  # the sandbox's pid 1 is bwrap: its environ is readable
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                pass_fds=(info_w,),
            )
        except BaseException:
            os.close(info_r)
            raise
        finally:
            os.close(info_w)
        with os.fdopen(info_r, "rb") as info:
            # bwrap writes the sandbox's pid 1 and closes; killing that pid 1 takes every
            # process of the sandbox's pid namespace with it before bwrap itself can exit
            data = info.read()
        try:
            pidfd = os.pidfd_open(json.loads(data)["child-pid"])
        except (ValueError, KeyError, OSError):
            pidfd = None  # bwrap failed before its sandbox existed; its output says why

        def kill() -> None:
            if pidfd is not None:
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            proc.kill()

        try:
            head, total, timed_out = _read_capped(proc, limit, timeout, kill)
            code = proc.wait()
        finally:
            if pidfd is not None:
                os.close(pidfd)
            if proc.stdout is not None:
                proc.stdout.close()
        return _result(head, total, limit, 137 if timed_out else code, timed_out, begin)

    def run(self, command: str, timeout: float = 30.0) -> CommandResult:
        """Run `command` in a new sandbox; the whole sandbox is killed if it times out."""
        if self.root is None:
            raise TerminalError("the terminal is not started: call start() first")
        with self._lock:
            if self.sealed:
                return CommandResult(SEALED, 1)
            return self._sandbox(command, timeout, self.limits.max_output, test=False)

    def seal(self) -> list[str]:
        """Keep regular files and folders of /work, read-only; empty /tmp."""
        if self._area is None:
            raise TerminalError("the terminal is not started: call start() first")
        with self._lock:  # no agent command is running: each sandbox died with its command
            self.sealed = True
            try:
                dropped = seal_tree(self._area / "work")
                tmp = self._area / "tmp"
                for entry in os.scandir(tmp):
                    if entry.is_dir(follow_symlinks=False):
                        shutil.rmtree(entry.path)
                    else:
                        os.unlink(entry.path)
            except OSError as e:
                raise TerminalError(f"the terminal could not be sealed for its tests: {e}") from e
        return dropped

    def run_test(self, script: str, timeout: float, max_output: int) -> CommandResult:
        """Run `script` as the grader in a fresh sandbox over the sealed /work."""
        if not self.sealed:
            raise TerminalError("seal() the terminal before its tests run")
        with self._lock:
            return self._sandbox(script, timeout, max_output, test=True)

    def close(self) -> None:
        """Unmount the work area and delete its folder."""
        if self._finalizer is not None:
            self._finalizer()
            self._finalizer = None
        self.root = self._area = self._holder = None
