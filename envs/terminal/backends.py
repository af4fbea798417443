"""Where a task's shell commands run: a Docker container, or a bubblewrap sandbox without one.

Both backends give the same interface (`start`, `run`, `close`) and the same picture: a POSIX
shell in `/work` (writable), `/tmp` (writable), everything else read-only, no network.

- **docker**: one container per episode from a locally built image, `--network none`, a
  read-only root with tmpfs `/work` and `/tmp`, memory/CPU/process limits. Containers carry the
  label `gemkit.terminal=1` and their owner's host, pid and pid start time. A container's
  main process reads an attached stdin that the engine closes when the owner's connection
  drops, so the container stops and removes itself when its owner dies, even by SIGKILL;
  `cleanup_stale()` removes any labelled container whose owner is gone, as a second net.
- **bwrap**: each command runs in a fresh bubblewrap sandbox (all namespaces unshared, so
  no network) over the host's `/usr` (read-only), with `/work` and `/tmp` kept in a host
  temp folder between commands. Background processes end with their command.
"""

from __future__ import annotations

import base64
import functools
import io
import logging
import os
import secrets
import shutil
import socket
import subprocess
import tarfile
import tempfile
import threading
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gemkit.errors import GemkitError

log = logging.getLogger(__name__)

BACKENDS = ("docker", "bwrap")
LABEL = "gemkit.terminal"
WORKDIR = "/work"
ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "HOME": WORKDIR, "LANG": "C"}


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


@dataclass
class CommandResult:
    """What one command did: its merged stdout+stderr (maybe cut), exit status, time limit hit."""

    output: str
    exit_code: int
    timed_out: bool = False
    output_bytes: int = 0
    duration: float = 0.0

    @property
    def truncated(self) -> bool:
        """True when the output was cut at the terminal's `max_output`."""
        return self.output_bytes > len(self.output.encode("utf-8", "replace"))


def truncation_marker(total: int, shown: int) -> str:
    """The line that ends a cut output."""
    return f"\n[... output truncated: {total} bytes in all, the first {shown} shown ...]"


def _decode(data: bytes, total: int, limit: int) -> str:
    text = data[:limit].decode("utf-8", "replace")
    if total > limit:
        text += truncation_marker(total, limit)
    return text


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
    """A shell for one episode. `start` it with the task's files, `run` commands, `close` it."""

    backend = ""

    def __init__(self, limits: Limits | None = None):
        self.limits = limits or Limits()

    def start(self, files: dict[str, str | bytes] | None = None) -> None:
        """Start a fresh terminal holding `files` (relative paths) in the work dir."""
        raise NotImplementedError

    def run(self, command: str, timeout: float = 30.0) -> CommandResult:
        """Run `command` with `sh -c` in the work dir, stopped after `timeout` seconds."""
        raise NotImplementedError

    def clear_scratch(self) -> None:
        """Kill every process the commands left and empty `/tmp` (done before the tests)."""
        raise NotImplementedError

    def close(self) -> None:
        """Stop the terminal and remove everything it made."""

    @property
    def running(self) -> bool:
        """True between `start` and `close`."""
        raise NotImplementedError


# -- docker ------------------------------------------------------------------------------------

# runs a command with its output in a file (so processes it leaves in the background cannot
# hold the exec stream open), then prints the head of that file and a status line
_DOCKER_RUNNER = r"""
d=/tmp/.gemkit; mkdir -p $d 2>/dev/null; o=$d/out.$$
cd /work 2>/dev/null
timeout -s KILL "$2" sh -c "$1" >"$o" 2>&1 </dev/null
s=$?
n=$(wc -c <"$o")
head -c "$3" "$o"
rm -f "$o"
printf '\n%s %s %s\n' "$4" "$s" "$n"
"""


# kills every process but init (pid 1), the container's lifeline ($1) and itself
_KILL_ALL = r"""
for p in /proc/[0-9]*; do
  p=${p#/proc/}
  [ "$p" = 1 ] || [ "$p" = "$1" ] || [ "$p" = $$ ] || kill -9 "$p" 2>/dev/null
done
true
"""


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
        self._lifeline = "1"
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
        api = self.client.api
        lim = self.limits
        size = f"size={lim.disk_mb}m,mode=1777,exec"  # docker mounts tmpfs noexec by default
        host_config = api.create_host_config(
            auto_remove=True,
            init=True,  # the engine's tini as pid 1 reaps orphans (else zombies eat pids)
            network_mode="none",
            read_only=True,
            tmpfs={WORKDIR: size, "/tmp": size},
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
        _, children = self._exec(["cat", "/proc/1/task/1/children"])
        self._lifeline = children.decode().split()[0] if children.split() else "1"
        if files:
            self._put_files(files)

    def _exec(self, argv: list[str]) -> tuple[int, bytes]:
        api = self.client.api
        exec_id = api.exec_create(self.container_id, argv, workdir=WORKDIR, environment=ENV)["Id"]
        output = api.exec_start(exec_id)
        code = api.exec_inspect(exec_id).get("ExitCode")
        return (code if code is not None else -1), output

    def _put_files(self, files: dict[str, str | bytes]) -> None:
        # the root is read-only and /work a tmpfs, where the engine's archive upload cannot
        # write: send the tar through exec arguments, in chunks under the kernel's
        # per-argument size limit
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

    def run(self, command: str, timeout: float = 30.0) -> CommandResult:
        """Run `command` in the container; its processes are all killed if it times out."""
        if self.container_id is None:
            raise TerminalError("the terminal is not started: call start() first")
        limit = self.limits.max_output
        secs = max(1, int(round(timeout)))
        begin = time.monotonic()
        try:
            code, raw = self._exec(
                ["sh", "-c", _DOCKER_RUNNER, "sh", command, str(secs), str(limit), self._nonce]
            )
        except Exception as e:  # the agent can end its own container (kill its init's child)
            import docker

            if not isinstance(e, docker.errors.APIError):
                raise
            why = getattr(e, "explanation", None) or str(e)
            return CommandResult(f"the terminal's container is gone: {why}", -1)
        duration = time.monotonic() - begin
        head, sep, status = raw.rpartition(f"\n{self._nonce} ".encode())
        if not sep:  # the runner itself failed (container gone, out of memory)
            text = raw.decode("utf-8", "replace").strip()
            return CommandResult(
                f"the command could not run: {text or f'exit status {code}'}", code or -1
            )
        fields = status.split()
        exit_code, total = int(fields[0]), int(fields[1])
        timed_out = exit_code == 137 and duration >= secs - 0.5
        if timed_out:
            # `timeout` kills only the shell: kill whatever it left running too
            self._exec(["sh", "-c", _KILL_ALL, "sh", self._lifeline])
        return CommandResult(_decode(head, total, limit), exit_code, timed_out, total, duration)

    def clear_scratch(self) -> None:
        """Kill every process but the container's init and lifeline; empty /tmp."""
        import docker

        script = _KILL_ALL + "rm -rf /tmp/* /tmp/.[!.]* 2>/dev/null; true"
        try:
            self._exec(["sh", "-c", script, "sh", self._lifeline])
        except docker.errors.APIError as e:  # the container is gone: the tests will say so
            log.debug("could not clear the terminal before its tests: %s", e)

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
_uid_counter = iter(range(1 << 30))
_uid_lock = threading.Lock()


def bwrap_available() -> str | None:
    """None when bubblewrap can run a shell here, else the reason it cannot."""
    exe = shutil.which("bwrap")
    if exe is None:
        return "bwrap is not installed (Debian/Ubuntu: apt-get install bubblewrap)"
    try:
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


@functools.cache
def _bwrap_has_perms() -> bool:
    try:
        out = subprocess.run(["bwrap", "--help"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return False
    return "--perms" in out.stdout + out.stderr


def _perms(mode: str) -> list[str]:
    return ["--perms", mode] if _bwrap_has_perms() else []


class BwrapTerminal(Terminal):
    """Each command in a fresh bubblewrap sandbox over one host temp folder (`/work`, `/tmp`).

    When gemkit runs as root, commands run under a uid of their own (so the process limit
    counts only this terminal's processes); otherwise as the calling user, without a
    process limit. Memory is capped by `RLIMIT_AS`, file size by `RLIMIT_FSIZE`.
    """

    backend = "bwrap"

    def __init__(self, limits: Limits | None = None, *, image: str = "busybox"):
        super().__init__(limits)
        why = bwrap_available()
        if why is not None:
            raise TerminalError(why)
        self.image = image  # the host's tools stand in for the image's
        self.root: Path | None = None
        self._finalizer: weakref.finalize | None = None
        self.uid: int | None = None
        if os.geteuid() == 0 and shutil.which("setpriv") and shutil.which("prlimit"):
            with _uid_lock:
                self.uid = 1_500_000_000 + (os.getpid() * 1024 + next(_uid_counter)) % (1 << 29)

    @property
    def running(self) -> bool:
        """True while this terminal holds its folder."""
        return self.root is not None

    def start(self, files: dict[str, str | bytes] | None = None) -> None:
        """Make a fresh work folder (dropping any earlier one) holding `files`."""
        self.close()
        global _bwrap_swept
        if not _bwrap_swept:
            _bwrap_swept = True
            cleanup_stale_folders()
        pid = os.getpid()
        root = Path(tempfile.mkdtemp(prefix=f"{FOLDER_PREFIX}{pid}-{_proc_start_time(pid)}-"))
        self.root = root
        self._finalizer = weakref.finalize(self, shutil.rmtree, str(root), True)
        for sub in ("work", "tmp"):
            (root / sub).mkdir()
            (root / sub).chmod(0o1777 if sub == "tmp" else 0o777)
        if files:
            check_file_names(files)
            for name, content in files.items():
                data = content.encode() if isinstance(content, str) else content
                path = root / "work" / name
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
                path.chmod(0o777 if data.startswith(b"#!") else 0o666)
        if self.uid is not None:
            for path in [root / "work", *(root / "work").rglob("*")]:
                os.lchown(path, self.uid, self.uid)

    def _argv(self, command: str) -> list[str]:
        assert self.root is not None
        if self.uid is not None:
            # every namespace but the user one: in a new user namespace, root could not
            # switch to the sandbox's own uid (it would be unmapped)
            argv = ["bwrap", "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts"]
            argv += ["--unshare-cgroup-try"]
        else:
            argv = ["bwrap", "--unshare-all"]
        argv += ["--die-with-parent", "--new-session"]
        # as root, bwrap would make the missing /etc 0700, closed to the sandbox's uid
        argv += [*_perms("0755"), "--dir", "/etc"]
        for path in BWRAP_RO:
            if os.path.islink(path):
                argv += ["--symlink", os.readlink(path), path]
            elif os.path.exists(path):
                argv += ["--ro-bind", path, path]
        argv += ["--bind", str(self.root / "work"), WORKDIR]
        argv += ["--bind", str(self.root / "tmp"), "/tmp"]
        argv += ["--proc", "/proc", "--dev", "/dev", "--remount-ro", "/"]
        argv += ["--chdir", WORKDIR, "--clearenv"]
        for key, value in ENV.items():
            argv += ["--setenv", key, value]
        lim = self.limits
        limits = [
            "prlimit",
            f"--as={lim.memory_mb * 1024 * 1024}",
            f"--fsize={lim.disk_mb * 1024 * 1024}",
        ]
        if self.uid is not None:
            argv += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
            limits.append(f"--nproc={lim.pids}")
            argv += ["--", *limits, "--"]
            argv += ["setpriv", f"--reuid={self.uid}", f"--regid={self.uid}", "--clear-groups"]
            argv += ["--inh-caps=-all", "--bounding-set=-all", "--"]
        elif shutil.which("prlimit"):
            argv += ["--", *limits, "--"]
        else:
            argv += ["--"]
        return [*argv, "/bin/sh", "-c", command]

    def run(self, command: str, timeout: float = 30.0) -> CommandResult:
        """Run `command` in a new sandbox; the whole sandbox is killed if it times out."""
        if self.root is None:
            raise TerminalError("the terminal is not started: call start() first")
        limit = self.limits.max_output
        out_path = self.root / "out"
        begin = time.monotonic()
        timed_out = False
        with open(out_path, "w+b") as out:
            proc = subprocess.Popen(
                self._argv(command),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            try:
                code = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                timed_out = True
                proc.kill()  # bwrap's init dies with it, taking every process of the sandbox
                code = proc.wait()
                code = 137
            total = out.seek(0, os.SEEK_END)
            out.seek(0)
            head = out.read(limit)
        out_path.unlink()
        duration = time.monotonic() - begin
        return CommandResult(_decode(head, total, limit), code, timed_out, total, duration)

    def clear_scratch(self) -> None:
        """Empty /tmp (no process outlives its command here)."""
        if self.root is None:
            raise TerminalError("the terminal is not started: call start() first")
        tmp = self.root / "tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        tmp.chmod(0o1777)

    def close(self) -> None:
        """Delete the work folder."""
        if self._finalizer is not None:
            self._finalizer()
            self._finalizer = None
        self.root = None


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
