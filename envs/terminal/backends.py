"""Where a task's shell commands run: a Docker container, or a bubblewrap sandbox without one.

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

import base64
import functools
import io
import json
import logging
import os
import secrets
import selectors
import shutil
import signal
import socket
import subprocess
import tarfile
import tempfile
import threading
import time
import weakref
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gemkit
import gemkit.envs
from gemkit.envs.terminal.images import AGENT_UID, GRADER_UID
from gemkit.errors import GemkitError

log = logging.getLogger(__name__)

BACKENDS = ("docker", "bwrap")
LABEL = "gemkit.terminal"
WORKDIR = "/work"
ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "HOME": WORKDIR, "LANG": "C"}
#: the tests' environment: HOME is their fresh /tmp, not the agent's /work (no rc files)
TEST_ENV = {**ENV, "HOME": "/tmp"}
#: what a command gets once the terminal is sealed for grading
SEALED = "The terminal is sealed: the episode is over and its tests run; reset() starts anew."


class TerminalError(GemkitError):
    """A terminal backend cannot start or was used wrongly."""


@dataclass(frozen=True)
class Limits:
    """Resource limits of one terminal (per container, or per bwrap command)."""

    memory_mb: int = 256
    cpus: float = 1.0
    pids: int = 64
    disk_mb: int = 64
    max_output: int = 10_000
    max_files: int = 20_000


@dataclass
class CommandResult:
    """What one command did: its merged stdout+stderr (maybe cut), exit status, time limit hit.

    `raw` holds the bytes behind `output` (before decoding and the cut marker), so a grader
    can compare them exactly.
    """

    output: str
    exit_code: int
    timed_out: bool = False
    output_bytes: int = 0
    duration: float = 0.0
    raw: bytes = field(default=b"", repr=False)

    @property
    def truncated(self) -> bool:
        """True when the output was cut at the terminal's `max_output`."""
        return self.output_bytes > len(self.raw)


def truncation_marker(total: int, shown: int) -> str:
    """The line that ends a cut output."""
    return f"\n[... output truncated: {total} bytes in all, the first {shown} shown ...]"


def _result(head: bytes, total: int, limit: int, code: int, timed_out: bool, begin: float):
    text = head[:limit].decode("utf-8", "replace")
    if total > limit:
        text += truncation_marker(total, limit)
    duration = time.monotonic() - begin
    return CommandResult(text, code, timed_out, total, duration, head[:limit])


def _tar_files(files: dict[str, str | bytes]) -> bytes:
    """A tar of task files; a file whose content starts with `#!` is made executable."""
    buf = io.BytesIO()
    now = int(time.time())
    with tarfile.open(fileobj=buf, mode="w") as tar:
        dirs: set[str] = set()
        for name, content in files.items():
            data = content.encode() if isinstance(content, str) else content
            parts = Path(name).parts
            for i in range(1, len(parts)):
                d = "/".join(parts[:i])
                if d not in dirs:
                    dirs.add(d)
                    info = tarfile.TarInfo(d)
                    info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o777, now
                    tar.addfile(info)
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), now
            info.mode = 0o777 if data.startswith(b"#!") else 0o666
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def check_file_names(files: dict[str, Any]) -> None:
    """Refuse task file names that would land outside the work dir."""
    for name in files:
        p = Path(name)
        if p.is_absolute() or ".." in p.parts or not p.parts:
            raise TerminalError(f"task file {name!r} must be a relative path inside {WORKDIR}")


class Terminal:
    """A shell for one episode: `start`, the agent's `run`s, `seal`, the `run_test`s, `close`."""

    backend = ""

    def __init__(self, limits: Limits | None = None):
        self.limits = limits or Limits()
        self.sealed = False

    def start(self, files: dict[str, str | bytes] | None = None) -> None:
        """Start a fresh terminal holding `files` (relative paths) in the work dir."""
        raise NotImplementedError

    def run(self, command: str, timeout: float = 30.0) -> CommandResult:
        """Run `command` as the agent with `sh -c` in the work dir, stopped after `timeout` s."""
        raise NotImplementedError

    def seal(self) -> list[str]:
        """End the agent's part: kill its processes, keep only regular files and folders in
        /work (read-only from now on), empty /tmp; return the paths deleted from /work.

        Raises `TerminalError` when the terminal cannot be sealed (then nothing may be graded).
        """
        raise NotImplementedError

    def run_test(self, script: str, timeout: float, max_output: int) -> CommandResult:
        """Run a test script as the grader in the sealed terminal, with a fresh /tmp.

        Raises `TerminalError` when the test's leftovers cannot be stopped or the terminal is
        gone (no later test may run then).
        """
        raise NotImplementedError

    def close(self) -> None:
        """Stop the terminal and remove everything it made."""

    @property
    def running(self) -> bool:
        """True between `start` and `close`."""
        raise NotImplementedError


# -- docker ------------------------------------------------------------------------------------

# `alive UID`: how many live (not zombie) processes run as UID; `stop USER UID`: kill them all
# from USER's own uid (`kill -1` reaches all its processes at once, and nothing else) and
# wait until none is left
_DOCKER_PROCS = r"""
alive() {
  cat /proc/[0-9]*/status 2>/dev/null |
    awk -v u="$1" '/^State:/ {s = $2} /^Uid:/ && $2 == u && s != "Z" && s != "X" {n++}
                   END {print n + 0}'
}
stop() {
  i=0
  while [ "$(alive "$2")" != 0 ]; do
    [ $i -ge 50 ] && return 1
    su -s /bin/sh "$1" -c 'kill -9 -1' 2>/dev/null
    i=$((i + 1)); [ $i -gt 1 ] && sleep 0.1
  done
  return 0
}
wipe_tmp() { rm -rf /tmp/* /tmp/.[!.]* /tmp/..?* 2>/dev/null; }
"""

# as root, one command as USER ($5, uid $6): its output goes to a file in a folder only root
# can enter (so processes it leaves cannot hold the exec stream open nor write after it),
# then the head of that file and a status line are printed. A test ($7 = test) gets a fresh
# /tmp and leaves no process behind; an agent command leaves none when it timed out. The
# timer is a child that kills the command (still this shell's unreaped child, so its pid is
# not reused) and is stopped, its sleep with it, when the command ends first (BusyBox
# `timeout` leaves a watcher that polls on and could kill whatever took over the pid).
_DOCKER_RUN = (
    _DOCKER_PROCS
    + r"""
exec 2>/dev/null  # the shell's notes on its jobs ("Killed") would join the output
[ "$7" = test ] && wipe_tmp
o=/.gemkit/out.$$
su -s /bin/sh "$5" -c "$1" >"$o" 2>&1 </dev/null &
c=$!
(
  trap 'kill -9 $t; exit 0' TERM
  sleep "$2" & t=$!
  wait $t && kill -9 "$c"
) >/dev/null &
w=$!
wait "$c"
s=$?
kill -TERM "$w"
wait "$w"
left=0
if [ "$7" = test ] || [ "$s" = 137 ]; then stop "$5" "$6" || left=1; fi
n=$(wc -c <"$o")
head -c "$3" "$o"
rm -f "$o"
printf '\n%s %s %s %s\n' "$4" "$s" "$n" "$left"
"""
)

# as root, after the agent's last command: kill it, drop what is not a regular file or a
# folder from /work, make the rest root's and read-only, empty /tmp
_DOCKER_SEAL = (
    _DOCKER_PROCS
    + r"""
stop agent "$1" || { echo "the agent's processes could not be stopped"; exit 3; }
find /work -mindepth 1 ! -type f ! -type d -print -exec rm -f {} + &&
  chown -R 0:0 /work && chmod -R a+rX,a-w,ug-s /work || exit 4
wipe_tmp
printf '%s\n' "$2"
"""
)


def _proc_start_time(pid: int) -> str:
    """The start time of process `pid` (clock ticks since boot), or '' when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[1].split()[19]


def owner_labels() -> dict[str, str]:
    """Labels naming this process as a container's owner."""
    pid = os.getpid()
    return {
        LABEL: "1",
        f"{LABEL}.host": socket.gethostname(),
        f"{LABEL}.pid": str(pid),
        f"{LABEL}.started": _proc_start_time(pid),
    }


def _owner_alive(labels: dict[str, str]) -> bool:
    if labels.get(f"{LABEL}.host") != socket.gethostname():
        return True  # another machine's container: not ours to judge
    try:
        pid = int(labels.get(f"{LABEL}.pid", ""))
    except ValueError:
        return False
    started = _proc_start_time(pid)
    return bool(started) and started == labels.get(f"{LABEL}.started", started)


def cleanup_stale(client: Any = None) -> int:
    """Remove labelled containers whose owning process (on this host) is gone; return how many."""
    from gemkit.envs.terminal.images import docker_client

    client = client or docker_client()
    removed = 0
    for c in client.api.containers(all=True, filters={"label": f"{LABEL}=1"}):
        if _owner_alive(c.get("Labels") or {}):
            continue
        try:
            client.api.remove_container(c["Id"], force=True)
            removed += 1
        except Exception as e:  # already going away (auto-remove) or removed by another process
            log.debug("could not remove stale container %s: %s", c["Id"][:12], e)
    return removed


def list_containers(client: Any = None, *, mine: bool = False) -> list[str]:
    """Ids of the labelled terminal containers (only this process's with `mine`)."""
    from gemkit.envs.terminal.images import docker_client

    client = client or docker_client()
    filters = {"label": [f"{LABEL}=1"] + ([f"{LABEL}.pid={os.getpid()}"] if mine else [])}
    return [c["Id"] for c in client.api.containers(all=True, filters=filters)]


_swept = False
_sweep_lock = threading.Lock()


def _remove(client: Any, cid: str, sock: Any) -> None:
    """Remove a container and drop its lifeline (used by close, `weakref.finalize` and atexit)."""
    try:
        client.api.remove_container(cid, force=True)
    except Exception as e:
        if "No such container" not in str(e) and "already in progress" not in str(e):
            log.warning("could not remove terminal container %s: %s", cid[:12], e)
    try:
        sock.close()
    except Exception:  # the socket may already be closed
        pass


def _split_status(raw: bytes, nonce: str) -> tuple[bytes, list[int]] | None:
    """The output and the status numbers (exit status, bytes, processes left) of a runner's
    reply, or None when it has no well-formed status (the runner could not finish)."""
    head, sep, status = raw.rpartition(f"\n{nonce} ".encode())
    fields = status.split()
    if not sep or len(fields) != 3 or not all(f.isdigit() for f in fields):
        return None
    return head, [int(f) for f in fields]


class DockerTerminal(Terminal):
    """A container per episode: no network, read-only root, tmpfs work dir, hard limits."""

    backend = "docker"

    def __init__(self, limits: Limits | None = None, *, image: str = "busybox", client: Any = None):
        super().__init__(limits)
        from gemkit.envs.terminal.images import docker_client, ensure_image

        # a long command holds its HTTP call open; the command's own limit stops it first
        self.client = client or docker_client(timeout=3600)
        self.image = ensure_image(self.client, image)
        self.container_id: str | None = None
        self._finalizer: weakref.finalize | None = None
        self._nonce = "__gemkit_status_" + secrets.token_hex(8)
        global _swept
        with _sweep_lock:
            if not _swept:
                _swept = True
                n = cleanup_stale(self.client)
                if n:
                    log.info("removed %d terminal container(s) left by dead processes", n)

    @property
    def running(self) -> bool:
        """True while this terminal holds a container."""
        return self.container_id is not None

    def start(self, files: dict[str, str | bytes] | None = None) -> None:
        """Start a fresh container (closing any earlier one) and copy `files` into /work."""
        self.close()
        self.sealed = False
        api = self.client.api
        lim = self.limits
        # docker mounts tmpfs noexec by default; the agent owns /work, /tmp is shared sticky
        bound = f"size={lim.disk_mb}m,nr_inodes={lim.max_files},exec"
        host_config = api.create_host_config(
            auto_remove=True,
            init=True,  # the engine's tini as pid 1 reaps orphans (else zombies eat pids)
            network_mode="none",
            ipc_mode="none",  # no /dev/shm: /work and /tmp are the only writable places
            read_only=True,
            tmpfs={
                WORKDIR: f"{bound},mode=0755,uid={AGENT_UID},gid={AGENT_UID}",
                "/tmp": f"{bound},mode=1777",
                "/.gemkit": f"size={lim.disk_mb}m,nr_inodes=64,mode=0700",  # outputs, root's
                "/dev/mqueue": "ro,size=4k",  # the engine mounts a writable one: mask it
            },
            mem_limit=f"{lim.memory_mb}m",
            memswap_limit=f"{lim.memory_mb}m",
            nano_cpus=int(lim.cpus * 1e9),
            pids_limit=lim.pids,
            cap_drop=["NET_RAW", "SYS_CHROOT", "MKNOD", "AUDIT_WRITE", "SETFCAP"],
            security_opt=["no-new-privileges"],
        )
        config = api.create_container_config(
            self.image,
            ["sh", "-c", "cat >/dev/null"],
            stdin_open=True,
            working_dir=WORKDIR,
            environment=ENV,
            labels=owner_labels(),
            host_config=host_config,
            network_disabled=True,
        )
        # the engine closes stdin when our attach connection drops (this process died): `cat`
        # ends, the container stops, and auto-remove deletes it
        config["StdinOnce"] = True
        cid = api.create_container_from_config(config, None)["Id"]
        try:
            sock = api.attach_socket(cid, params={"stdin": 1, "stream": 1})
        except Exception:
            api.remove_container(cid, force=True)
            raise
        self.container_id = cid
        self._finalizer = weakref.finalize(self, _remove, self.client, cid, sock)
        api.start(cid)
        if files:
            self._put_files(files)

    def _exec(self, argv: list[str], *, root: bool = False) -> tuple[int, bytes]:
        api = self.client.api
        user = "0:0" if root else f"{AGENT_UID}:{AGENT_UID}"
        env = TEST_ENV if root else ENV
        exec_id = api.exec_create(
            self.container_id, argv, workdir=WORKDIR, environment=env, user=user
        )["Id"]
        output = api.exec_start(exec_id)
        code = api.exec_inspect(exec_id).get("ExitCode")
        return (code if code is not None else -1), output

    def _put_files(self, files: dict[str, str | bytes]) -> None:
        # the root is read-only and /work a tmpfs, where the engine's archive upload cannot
        # write: send the tar through exec arguments, in chunks under the kernel's
        # per-argument size limit; the agent unpacks it, so it owns its files
        check_file_names(files)
        data = base64.b64encode(_tar_files(files)).decode()
        chunk = 96_000
        if len(data) <= chunk:  # the usual case: one round trip
            code, out = self._exec(
                ["sh", "-c", 'printf %s "$1" | base64 -d | tar -x -o -C /work', "sh", data]
            )
        else:
            self._exec(["sh", "-c", "mkdir -p /tmp/.gemkit && : >/tmp/.gemkit/in.b64"])
            for i in range(0, len(data), chunk):
                self._exec(
                    ["sh", "-c", 'printf %s "$1" >>/tmp/.gemkit/in.b64', "sh", data[i : i + chunk]]
                )
            code, out = self._exec(
                [
                    "sh",
                    "-c",
                    "base64 -d /tmp/.gemkit/in.b64 | tar -x -o -C /work && rm /tmp/.gemkit/in.b64",
                ]
            )
        if code != 0:
            raise TerminalError(f"copying task files into the container failed: {out[-500:]!r}")

    def _exec_or_gone(self, argv: list[str], *, root: bool = False) -> tuple[int, bytes] | str:
        """`_exec`, or why the container cannot run it (the engine's words)."""
        import docker

        try:
            return self._exec(argv, root=root)
        except docker.errors.APIError as e:  # the container is gone (removed, crashed)
            return getattr(e, "explanation", None) or str(e)

    def _run_as(
        self, user: str, uid: int, script: str, timeout: float, limit: int, *, test: bool
    ) -> CommandResult | str:
        """One command through `_DOCKER_RUN`, or why it could not run."""
        secs = max(1, int(round(timeout)))
        begin = time.monotonic()
        args = [script, str(secs), str(limit), self._nonce, user, str(uid)]
        argv = ["sh", "-c", _DOCKER_RUN, "sh", *args, "test" if test else "agent"]
        reply = self._exec_or_gone(argv, root=True)
        if test and reply == (0, b""):
            # the engine now and then loses an exec's whole output; a test may run again (it
            # starts from the same sealed terminal), an agent's command may not
            reply = self._exec_or_gone(argv, root=True)
        if isinstance(reply, str):
            return f"the terminal's container is gone: {reply}"
        code, raw = reply
        parts = _split_status(raw, self._nonce)
        if parts is None:  # the runner itself failed (container gone, out of memory or pids)
            text = raw.decode("utf-8", "replace").strip()
            return f"the command could not run: {text[-300:] or f'exit status {code}'}"
        head, (exit_code, total, left) = parts
        if left:
            return f"the processes {user} left could not be stopped"
        timed_out = exit_code == 137 and time.monotonic() - begin >= secs - 0.5
        return _result(head, total, limit, exit_code, timed_out, begin)

    def run(self, command: str, timeout: float = 30.0) -> CommandResult:
        """Run `command` in the container; its processes are all killed if it times out."""
        if self.container_id is None:
            raise TerminalError("the terminal is not started: call start() first")
        if self.sealed:
            return CommandResult(SEALED, 1)
        result = self._run_as(
            "agent", AGENT_UID, command, timeout, self.limits.max_output, test=False
        )
        return CommandResult(result, -1) if isinstance(result, str) else result

    def seal(self) -> list[str]:
        """Kill the agent's processes, keep regular files and folders of /work read-only."""
        if self.container_id is None:
            raise TerminalError("the terminal is not started: call start() first")
        self.sealed = True
        done = secrets.token_hex(8)
        reply = self._exec_or_gone(
            ["sh", "-c", _DOCKER_SEAL, "sh", str(AGENT_UID), done], root=True
        )
        if isinstance(reply, str):
            raise TerminalError(f"the terminal's container is gone: {reply}")
        code, raw = reply
        text = raw.decode("utf-8", "replace")
        if code != 0 or not text.endswith(f"{done}\n"):
            raise TerminalError(
                f"the terminal could not be sealed for its tests: {text.strip()[-300:]!r}"
            )
        return sorted(line[len(WORKDIR) + 1 :] for line in text.splitlines()[:-1])

    def run_test(self, script: str, timeout: float, max_output: int) -> CommandResult:
        """Run `script` as the grader; every process it starts is dead when this returns."""
        if not self.sealed:
            raise TerminalError("seal() the terminal before its tests run")
        result = self._run_as("grader", GRADER_UID, script, timeout, max_output, test=True)
        if isinstance(result, str):
            raise TerminalError(result)
        return result

    def close(self) -> None:
        """Remove the container now."""
        if self._finalizer is not None:
            self._finalizer()
            self._finalizer = None
        self.container_id = None


# -- bubblewrap -------------------------------------------------------------------------------

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


# -- choosing ----------------------------------------------------------------------------------


def docker_available() -> str | None:
    """None when a Docker engine answers and the task image can be had, else the reason."""
    from gemkit.envs.terminal.images import ImageError, docker_client, ensure_image

    try:
        ensure_image(docker_client(), "busybox")
    except ImageError as e:
        return str(e)
    except Exception as e:
        return f"the Docker engine failed: {type(e).__name__}: {e}"
    return None


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
