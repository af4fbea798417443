"""Sandbox guarantees: no network, read-only root, limits, and containers always removed."""

from __future__ import annotations

import gc
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from gemkit.envs.terminal.backends import open_terminal
from gemkit.envs.terminal.bwrap import FOLDER_PREFIX, BwrapTerminal, cleanup_stale_folders
from gemkit.envs.terminal.docker import LABEL, DockerTerminal, cleanup_stale, list_containers
from gemkit.envs.terminal.env import TerminalEnv
from gemkit.envs.terminal.images import IMAGES, docker_client
from gemkit.envs.terminal.task import builtin_tasks
from gemkit.envs.terminal.terminal import Limits


@pytest.fixture
def terminal(backend):
    t = open_terminal(backend)
    t.start()
    yield t
    t.close()


def _wait_until(check, timeout: float = 20.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if check():
            return True
        time.sleep(0.2)
    return check()


def test_a_command_cannot_reach_a_server_on_the_hosts_loopback(terminal):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(5)
    server.settimeout(0.2)
    port = server.getsockname()[1]
    accepted = []
    done = threading.Event()

    def accept() -> None:
        while not done.is_set():
            try:
                accepted.append(server.accept())
            except (TimeoutError, OSError):
                continue

    listener = threading.Thread(target=accept)
    listener.start()
    try:
        if terminal.backend == "docker":  # BusyBox nc
            probe = f"echo hello | nc -w 2 127.0.0.1 {port}"
        else:  # the host's bash, whose /dev/tcp opens a socket
            probe = f"bash -c 'echo hello > /dev/tcp/127.0.0.1/{port}'"
        result = terminal.run(probe, timeout=10)
        outside = terminal.run(
            "echo hi | nc -w 2 192.0.2.1 80 || bash -c 'echo > /dev/tcp/192.0.2.1/80'"
        )
        time.sleep(0.5)  # a connection that got through would be accepted by now
    finally:
        done.set()
        listener.join()
        server.close()
    assert result.exit_code != 0
    assert "refused" in result.output.lower() or "unreachable" in result.output.lower()
    assert outside.exit_code != 0 and not outside.timed_out  # fails at once: no route at all
    assert accepted == []


def test_only_the_work_dir_and_tmp_are_writable(terminal):
    assert (
        terminal.run("echo x > /work/f && echo y > /tmp/f && cat /work/f /tmp/f").output == "x\ny\n"
    )
    for path in ("/f", "/etc/f", "/usr/f", "/bin/f", "/dev/f", "/dev/shm/f"):
        r = terminal.run(f"echo x > {path}")
        assert r.exit_code != 0, path
    # every mount point of the terminal, probed with a new file and a new folder
    probe = (
        "for m in $(awk '{print $2}' /proc/self/mounts); do"
        ' touch "$m/.probe" 2>/dev/null && echo "$m"; mkdir "$m/.probe-d" 2>/dev/null && echo "$m";'
        " done | sort -u"
    )
    assert terminal.run(probe).output.split() == ["/tmp", "/work"]


def test_the_host_files_outside_the_sandbox_are_not_visible(terminal):
    r = terminal.run(f"ls {os.getcwd()} /root /etc/shadow 2>&1; true")
    assert "No such file" in r.output and "pyproject.toml" not in r.output


def test_containers_run_with_no_network_limits_and_a_read_only_root(docker_backend):
    t = DockerTerminal(Limits(memory_mb=128, cpus=0.5, pids=32))
    t.start()
    try:
        attrs = docker_client().api.inspect_container(t.container_id)
    finally:
        t.close()
    host = attrs["HostConfig"]
    assert host["NetworkMode"] == "none" and host["ReadonlyRootfs"] is True
    assert (host["Memory"], host["NanoCpus"], host["PidsLimit"]) == (128 << 20, 5 * 10**8, 32)
    assert set(host["Tmpfs"]) == {"/work", "/tmp", "/.gemkit", "/dev/mqueue"}
    assert "mode=0700" in host["Tmpfs"]["/.gemkit"]  # outputs: root's only
    assert host["Tmpfs"]["/dev/mqueue"].startswith("ro,") and host["IpcMode"] == "none"
    assert "nr_inodes=20000" in host["Tmpfs"]["/work"] and "size=64m" in host["Tmpfs"]["/tmp"]
    assert attrs["Config"]["Labels"][LABEL] == "1"
    assert attrs["Config"]["Image"] == IMAGES["busybox"]


def test_a_fork_bomb_hits_the_process_limit(docker_backend):
    t = DockerTerminal(Limits(pids=24))
    t.start()
    try:
        r = t.run("i=0; while [ $i -lt 40 ]; do sleep 5 & i=$((i+1)); done; wait", timeout=3)
    finally:
        t.close()
    assert "can't fork" in r.output or "Resource temporarily unavailable" in r.output


def test_close_removes_the_container(docker_backend):
    env = TerminalEnv("CountWords", backend=docker_backend)
    env.reset()
    assert len(list_containers(mine=True)) == 1
    env.close()
    assert list_containers(mine=True) == []


def test_a_terminal_dropped_without_close_is_removed_when_collected(docker_backend):
    t = DockerTerminal()
    t.start()
    cid = t.container_id
    del t
    gc.collect()
    assert cid not in list_containers()


_OWNER = """
import sys, time
from gemkit.envs.terminal.env import TerminalEnv
env = TerminalEnv("CountWords", backend=sys.argv[1])
env.reset()
print(env.terminal.container_id if sys.argv[1] == "docker" else env.terminal.root, flush=True)
time.sleep(120)
"""


def _spawn_owner(backend: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", _OWNER, backend], stdout=subprocess.PIPE, text=True
    )
    handle = proc.stdout.readline().strip()
    assert handle, "the owner process did not start its terminal"
    return proc, handle


def test_a_container_is_removed_after_its_owner_is_killed(docker_backend):
    proc, cid = _spawn_owner(docker_backend)
    assert cid in list_containers()
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert _wait_until(lambda: cid not in list_containers())


def test_stale_containers_of_dead_owners_are_cleaned_up(docker_backend):
    client = docker_client()
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    labels = {
        LABEL: "1",
        f"{LABEL}.host": socket.gethostname(),
        f"{LABEL}.pid": dead.stdout.strip(),
        f"{LABEL}.started": "1",
    }
    cid = client.api.create_container(
        IMAGES["busybox"],
        ["sleep", "60"],
        labels=labels,
        host_config=client.api.create_host_config(network_mode="none"),
    )["Id"]
    client.api.start(cid)
    try:
        assert cleanup_stale(client) >= 1
        assert cid not in list_containers()
    finally:
        if cid in list_containers():
            client.api.remove_container(cid, force=True)


def test_a_bwrap_folder_is_removed_after_close_and_after_its_owner_is_killed(bwrap_backend):
    t = BwrapTerminal()
    t.start({"a.txt": "x"})
    root = t.root
    t.close()
    assert not root.exists()
    proc, folder = _spawn_owner(bwrap_backend)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert os.path.basename(folder).startswith(FOLDER_PREFIX)
    cleanup_stale_folders()
    assert not os.path.exists(folder)


def test_the_agent_cannot_end_its_own_container(docker_backend):
    env = TerminalEnv("CountWords", backend=docker_backend)
    try:
        env.reset()
        r = env.run_command("kill -9 1 $(cat /proc/1/task/1/children); id -u")
        alive = env.run_command("echo still here")
    finally:
        env.close()
    assert "Operation not permitted" in r.output and r.output.splitlines()[-1] == "10000"
    assert (alive.exit_code, alive.output) == (0, "still here\n")


def test_a_container_gone_mid_episode_gets_a_message_and_no_reward(docker_backend):
    env = TerminalEnv("CountWords", backend=docker_backend)
    try:
        env.reset()
        env.run_command(builtin_tasks()["CountWords"].solution)
        docker_client().api.remove_container(env.terminal.container_id, force=True)
        after = env.run_command("echo hi")
        obs, reward, terminated, _, info = env.step("submit")
    finally:
        env.close()
    assert after.exit_code == -1 and "container is gone" in after.output
    assert (reward, terminated, info["success"]) == (0.0, True, False)
    assert all("container is gone" in t["output"] for t in info["test_results"])


def test_links_and_processes_planted_in_tmp_cannot_fake_a_pass(backend):
    env = TerminalEnv("CountWords", backend=backend)
    try:
        env.reset()
        # the test writes its expected text to /tmp/expected and compares: a link from there
        # to the answer file would make it compare the file with itself
        env.run_command(
            "touch counts.txt; ln -s /work/counts.txt /tmp/expected; "
            "(while :; do ln -sf /work/counts.txt /tmp/expected; sleep 0.05; done) "
            ">/dev/null 2>&1 &"
        )
        _, reward, _, _, info = env.step("submit")
    finally:
        env.close()
    assert reward == 0.0 and [t["passed"] for t in info["test_results"]] == [True, False]
