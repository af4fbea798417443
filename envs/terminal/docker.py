"""The Docker backend: one locked-down container per episode, removed when its owner dies."""

from __future__ import annotations

import base64
import io
import logging
import os
import secrets
import socket
import tarfile
import threading
import time
import weakref
from pathlib import Path
from typing import Any

from gemkit.envs.terminal.images import AGENT_UID, GRADER_UID
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

LABEL = "gemkit.terminal"


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
