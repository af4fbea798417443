"""Hostile code: each attack ends with a clear error within its limits, and harms neither the
host nor the next call. Every attack runs on each isolating backend (bubblewrap, unshare)."""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from pathlib import Path

import pytest

from gemkit.sandbox import Sandbox

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module", params=["bwrap", "unshare"])
def sb(request):
    sandbox = Sandbox(backend=request.param, timeout=5, workers=2, memory_mb=256)
    yield sandbox
    sandbox.close()


def assert_next_call_works(sb: Sandbox) -> None:
    after = sb.run_sync("print(6 * 7)")
    assert after.ok and after.stdout == "42\n", after


def test_infinite_loop_is_stopped_at_the_time_limit(sb):
    start = time.monotonic()
    r = sb.run_sync("while True:\n    pass", timeout=1)
    assert r.timed_out and r.limit_hit in ("wall", "cpu")
    assert r.exception == "TimeoutError: code ran longer than 1 s"
    assert time.monotonic() - start < 1 + 3  # the limit plus the host's grace at most
    assert_next_call_works(sb)


def test_sleeping_forever_is_stopped_at_the_wall_clock_limit(sb):
    r = sb.run_sync("import time\ntime.sleep(600)", timeout=1)
    assert r.timed_out and r.limit_hit == "wall"
    assert_next_call_works(sb)


def test_fork_bomb_hits_the_process_limit(sb):
    code = (
        "import os\n"
        "n = 0\n"
        "try:\n"
        "    while True:\n"
        "        if os.fork() == 0:\n"
        "            import time; time.sleep(30)\n"
        "        n += 1\n"
        "except OSError as e:\n"
        "    print('refused after', n, type(e).__name__)\n"
    )
    r = sb.run_sync(code, timeout=5)
    assert "refused after" in r.stdout and "BlockingIOError" in r.stdout
    forked = int(r.stdout.split("refused after")[1].split()[0])
    assert forked < sb.max_processes
    assert not r.timed_out
    assert_next_call_works(sb)


def test_fork_bomb_that_ignores_errors_is_killed_with_its_children(sb):
    code = (
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    )
    r = sb.run_sync(code, timeout=1)
    assert r.timed_out
    # nothing it forked survives into the next call
    ps = sb.run_sync("import os\nprint(sum(p.isdigit() for p in os.listdir('/proc')))")
    assert int(ps.stdout) <= 3  # the namespace's init, the supervisor, this call


def test_allocating_8_gb_is_a_memory_error(sb):
    r = sb.run_sync("block = bytearray(8 * 1024**3)")
    assert r.limit_hit == "memory"
    assert r.exception.startswith("MemoryError")
    assert_next_call_works(sb)


def test_writing_1_gb_to_a_file_hits_the_file_size_limit(sb):
    code = "with open('big.bin', 'wb') as f:\n    for _ in range(1024):\n        f.write(b'x' * 2**20)\n"
    start = time.monotonic()
    r = sb.run_sync(code)
    assert r.limit_hit == "file_size"
    assert "file-size limit" in r.exception
    assert time.monotonic() - start < 5
    assert_next_call_works(sb)


def test_filling_the_disk_with_many_files_runs_out_of_space(sb):
    code = (
        "for i in range(100):\n"
        "    with open(f'part{i}', 'wb') as f:\n"
        "        f.write(b'x' * 15 * 2**20)\n"
    )
    r = sb.run_sync(code)
    assert not r.ok and "No space left on device" in r.stderr
    assert_next_call_works(sb)


def test_reading_host_secrets_fails(sb, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET")
    secret.chmod(0o644)
    for path in (
        str(secret),
        "/etc/shadow",
        os.path.expanduser("~/.ssh/id_rsa"),
        str(REPO / "pyproject.toml"),
    ):
        r = sb.run_sync(f"print(open({path!r}).read())")
        assert not r.ok and r.exception.split(":")[0] in ("FileNotFoundError", "PermissionError")
        assert "TOP-SECRET" not in r.stdout
    assert_next_call_works(sb)


def test_writing_host_tmp_and_the_repo_leaves_no_file_on_the_host(sb):
    tmp_target = f"/tmp/gemkit-attack-{uuid.uuid4().hex}"
    repo_target = str(REPO / f"pwned-{uuid.uuid4().hex}")
    sb.run_sync(f"open({tmp_target!r}, 'w').write('pwned')")
    r = sb.run_sync(f"open({repo_target!r}, 'w').write('pwned')")
    assert not r.ok
    assert not os.path.exists(tmp_target)
    assert not os.path.exists(repo_target)
    assert_next_call_works(sb)


def test_connecting_to_a_host_server_gets_no_connection(sb):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.2)
    port = server.getsockname()[1]
    accepted: list[object] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                accepted.append(server.accept())
            except OSError:
                continue

    thread = threading.Thread(target=accept)
    thread.start()
    try:
        r = sb.run_sync(
            f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
        )
        external = sb.run_sync(
            "import socket\nsocket.create_connection(('1.1.1.1', 53), timeout=2)"
        )
    finally:
        time.sleep(0.3)  # a connection in flight would still be accepted
        stop.set()
        thread.join()
        server.close()
    assert not r.ok and r.exception.startswith(("ConnectionRefusedError", "OSError"))
    assert not external.ok
    assert accepted == []
    assert_next_call_works(sb)


def test_killing_the_parent_fails_or_is_survived(sb):
    r = sb.run_sync("import os\nos.kill(os.getppid(), 9)\nprint('still here')")
    # refused (PermissionError), ignored (the parent is a namespace's init), or, where the
    # code shares the supervisor's uid, reported as a crash and the worker replaced
    assert (r.exception or "").startswith(
        ("PermissionError", "SandboxError")
    ) or r.stdout == "still here\n"
    assert_next_call_works(sb)


def test_killing_its_own_process_group_is_reported(sb):
    r = sb.run_sync("import os\nos.killpg(0, 9)")
    assert not r.ok and r.limit_hit == "killed"
    assert "killed by signal 9" in r.exception
    assert_next_call_works(sb)


def test_killing_every_process_it_can_reach_harms_only_itself(sb):
    sb.run_sync("import os\nos.kill(-1, 9)")
    assert_next_call_works(sb)


def test_a_daemon_left_behind_does_not_survive_the_call(sb):
    sb.run_sync("import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(60)\n")
    r = sb.run_sync("import os\nprint(sum(p.isdigit() for p in os.listdir('/proc')))")
    assert int(r.stdout) <= 3


def test_printing_100_mb_is_truncated_with_a_marker(sb):
    start = time.monotonic()
    r = sb.run_sync("import sys\nfor _ in range(100):\n    sys.stdout.write('x' * 2**20)\n")
    assert r.ok and r.stdout_bytes == 100 * 2**20
    marker = f"[... output truncated: {100 * 2**20} bytes total, showing first {sb.max_output} ...]"
    assert r.stdout.endswith(marker)
    assert len(r.stdout) < sb.max_output + 200
    assert time.monotonic() - start < 5
    assert_next_call_works(sb)


async def test_attacks_through_the_async_path_end_the_same_way(sb):
    # `await sb.run(...)` (what the Python tool uses) talks to the worker from the event loop;
    # a sandbox that dies, times out or floods its output must end there as it does above
    killed = await sb.run("import os\nos.killpg(0, 9)")
    assert killed.limit_hit == "killed" and "killed by signal 9" in killed.exception
    parent = await sb.run("import os\nos.kill(os.getppid(), 9)\nprint('still here')")
    assert (parent.exception or "").startswith(
        ("PermissionError", "SandboxError")
    ) or parent.stdout == "still here\n"
    slept = await sb.run("import time\ntime.sleep(60)", timeout=0.5)
    assert slept.timed_out and slept.limit_hit == "wall"
    flood = await sb.run("import sys\nfor _ in range(100):\n    sys.stdout.write('x' * 2**20)\n")
    assert flood.ok and flood.stdout_bytes == 100 * 2**20
    after = await sb.run("print(6 * 7)")
    assert after.ok and after.stdout == "42\n", after
