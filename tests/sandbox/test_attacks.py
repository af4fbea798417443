"""Hostile code: each attack ends with a clear error within its limits, and harms neither the
host nor the next call. Every attack runs on each isolating backend (bubblewrap, unshare)."""

from __future__ import annotations

import json
import os
import site
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from gemkit.sandbox import Sandbox, backends, memcg

REPO = Path(__file__).resolve().parents[2]
#: what a clean sandbox's /tmp holds: only the folders leading to read-only binds of the host's
#: interpreter or venv, when those live under /tmp (a CI checkout in /tmp/...)
CLEAN_TMP = sorted(
    {p.split("/")[2] for p in backends.shared_paths(sys.executable, []) if p.startswith("/tmp/")}
)


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


# -- every call starts clean: nothing a call makes survives into the next ---------------------

LIBC = "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"


def test_system_v_ipc_objects_cannot_be_made_so_none_survives_into_the_next_call(sb):
    # shared memory, message queues and semaphores outlive the processes that made them
    made = sb.run_sync(
        LIBC + "print(libc.shmget(0x6b1d, 1 << 20, 0o1666), ctypes.get_errno())\n"
        "print(libc.msgget(0x6b1d, 0o1666), ctypes.get_errno())\n"
        "print(libc.semget(0x6b1d, 1, 0o1666), ctypes.get_errno())\n"
    )
    assert made.stdout == "-1 1\n" * 3, made  # EPERM: Operation not permitted
    seen = sb.run_sync(
        "for kind in ('shm', 'msg', 'sem'):\n"
        "    print(kind, len(open('/proc/sysvipc/' + kind).read().splitlines()))"
    )
    assert seen.stdout == "shm 1\nmsg 1\nsem 1\n", seen  # the header line only


def test_posix_message_queues_and_kernel_keyrings_are_refused(sb):
    # a key in the uid's keyring, or a message queue, would be read by every later call
    r = sb.run_sync(
        LIBC + "print(libc.mq_open(b'/gemkit', 0o100 | 2, 0o600, None), ctypes.get_errno())\n"
        "key = libc.syscall(248, b'user', b'gemkit-left', b'secret', 6, ctypes.c_int(-4))\n"
        "print(key, ctypes.get_errno())\n"
    )
    assert r.stdout == "-1 1\n-1 1\n", r
    after = sb.run_sync("print('gemkit-left' in open('/proc/keys').read())")
    assert after.stdout == "False\n", after


def test_a_user_namespace_with_full_capabilities_cannot_be_made(sb):
    r = sb.run_sync(
        LIBC + "print(libc.unshare(0x10000000), ctypes.get_errno())\n"  # CLONE_NEWUSER
        "print(libc.unshare(0x10000000 | 0x20000), ctypes.get_errno())\n"  # + CLONE_NEWNS
        "print(libc.syscall(435, None, 0), ctypes.get_errno())\n"  # clone3: no flags to check
        "import subprocess\n"
        "p = subprocess.run(['unshare', '-U', '-r', 'id'], capture_output=True, text=True)\n"
        "print(p.returncode != 0, 'Operation not permitted' in p.stderr)\n"
    )
    assert r.stdout == "-1 1\n-1 1\n-1 38\nTrue True\n", r  # EPERM, EPERM, ENOSYS


def test_threads_and_subprocesses_still_work_under_the_filter(sb):
    # threads start through clone3, refused: the C library falls back to clone
    r = sb.run_sync(
        "import threading, subprocess\n"
        "out = []\n"
        "t = threading.Thread(target=out.append, args=(1,))\n"
        "t.start(); t.join()\n"
        "print(out, subprocess.run(['echo', 'hi'], capture_output=True, text=True).stdout)"
    )
    assert r.stdout == "[1] hi\n\n", r


def test_the_only_places_the_code_can_write_are_tmp_and_the_working_directory(sb):
    # whatever the code can write must be emptied after the call, so there is no other place:
    # every folder and regular file on a writable mount but those two is closed to it
    r = sb.run_sync(
        "import os\n"
        "found = []\n"
        "for line in open('/proc/self/mountinfo'):\n"
        "    top, options = line.split()[4:6]\n"
        "    if 'rw' not in options.split(',') or top in ('/tmp', '/sandbox', '/proc'):\n"
        "        continue\n"
        "    for folder, _, files in os.walk(top) if os.path.isdir(top) else []:\n"
        "        for p in [folder] + [os.path.join(folder, f) for f in files]:\n"
        "            if (os.path.isdir(p) or os.path.isfile(p)) and os.access(p, os.W_OK):\n"
        "                found.append(p)\n"
        "print(found)"
    )
    assert r.stdout == "[]\n", r


def test_files_in_dev_shm_and_tmp_do_not_survive_the_call(sb):
    sb.run_sync(
        "for p in ('/dev/shm/gemkit-left', '/tmp/gemkit-left', 'gemkit-left'):\n"
        "    try:\n        open(p, 'w').write('x')\n    except OSError:\n        pass"
    )
    r = sb.run_sync(
        "import os\n"
        "print([p for p in ('/dev/shm/gemkit-left', '/tmp/gemkit-left', 'gemkit-left')"
        " if os.path.exists(p)])"
    )
    assert r.stdout == "[]\n", r


def test_nothing_a_call_leaves_behind_reaches_the_next_call(sb):
    # a daemon holding an abstract socket, a lock and an inotify watch; a timer; the
    # environment, the working directory, signal dispositions and limits changed
    left = sb.run_sync(
        "import os, socket, fcntl, signal, resource, time\n"
        "os.environ['GEMKIT_LEFT'] = '1'\n"
        "signal.signal(signal.SIGUSR1, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (16, 16))\n"
        "signal.setitimer(signal.ITIMER_REAL, 30)\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    s = socket.socket(socket.AF_UNIX)\n"
        "    s.bind('\\0gemkit-left')\n"
        "    s.listen()\n"
        "    f = open('/tmp/locked', 'w')\n"
        "    fcntl.lockf(f, fcntl.LOCK_EX)\n"
        "    time.sleep(60)\n"
        "os.makedirs('/tmp/elsewhere')\n"
        "os.chdir('/tmp/elsewhere')\n"
        "time.sleep(0.3)\n"
        "print('left')"
    )
    assert left.stdout == "left\n", left
    r = sb.run_sync(
        "import os, socket, signal, resource\n"
        "s = socket.socket(socket.AF_UNIX)\n"
        "try:\n    s.connect('\\0gemkit-left')\n    print('connected')\n"
        "except OSError:\n    print('no socket')\n"
        "print(os.environ.get('GEMKIT_LEFT'), os.getcwd(), os.listdir('/tmp'))\n"
        "print(signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL, signal.getitimer(0))\n"
        "print(resource.getrlimit(resource.RLIMIT_NOFILE)[0] > 16)\n"
        "fds = [f'/proc/self/fd/{f}' for f in os.listdir('/proc/self/fd')]\n"
        "print(sorted(os.readlink(f)[:6] for f in fds if os.path.exists(f)))"
    )
    lines = r.stdout.splitlines()
    assert lines[0] == "no socket", r
    assert lines[1] == f"None /sandbox {CLEAN_TMP}", r
    assert lines[2] == "True (0.0, 0.0)" and lines[3] == "True", r
    # stdio, its report and request pipes, and its own socket
    assert lines[4] == str(["pipe:["] * 5 + ["socket"]), r


def test_a_new_session_after_reset_starts_from_nothing_the_old_one_changed(sb):
    session = sb.session()
    try:
        session.run_sync(
            "import os, signal, resource\nos.environ['GEMKIT_LEFT'] = '1'\n"
            "signal.signal(signal.SIGUSR1, signal.SIG_IGN)\n"
            "resource.setrlimit(resource.RLIMIT_NOFILE, (16, 16))\n"
            "os.chdir('/tmp')\nopen('/tmp/left', 'w').write('x')"
        )
        session.reset_sync()
        r = session.run_sync(
            "import os, signal, resource\n"
            "print(os.environ.get('GEMKIT_LEFT'), os.getcwd(), os.listdir('/tmp'))\n"
            "print(signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL)\n"
            "print(resource.getrlimit(resource.RLIMIT_NOFILE)[0] > 16)"
        )
        assert r.stdout == f"None /sandbox {CLEAN_TMP}\nTrue\nTrue\n", r
    finally:
        session.close()


# -- every byte the code can hold counts against memory_mb -------------------------------------


def needs_memory_cgroup(sandbox: Sandbox) -> None:
    if sandbox.memory_scope != "call":
        reason = memcg.why_unavailable()
        pytest.skip(f"memory is counted per process only without a memory cgroup: {reason}")


def test_memfd_files_count_against_the_memory_limit(sb):
    needs_memory_cgroup(sb)
    # memfd pages are not mapped, so the address-space limit never sees them
    r = sb.run_sync(
        "import os\nfds = []\n"
        "for i in range(40):\n"
        "    fd = os.memfd_create('hold')\n"
        "    for _ in range(16):\n"
        "        os.write(fd, b'x' * 2**20)\n"
        "    fds.append(fd)\n"
        "    print(len(fds) * 16, flush=True)\n",
        timeout=20,
    )
    held = int(r.stdout.split()[-1]) if r.stdout.split() else 0
    assert held < 256 and r.limit_hit == "memory", (held, r)
    assert r.exception.startswith("MemoryError: code used more than the 256 MB")
    assert_next_call_can_use_its_memory(sb, 256)


def test_the_processes_of_a_call_share_one_memory_limit(sb):
    needs_memory_cgroup(sb)
    # each process keeps under the address-space limit; together they hold 900 MB
    r = sb.run_sync(
        "import os, select, time\n"
        "r, w = os.pipe()\n"
        "pids = []\n"
        "for i in range(6):\n"
        "    pid = os.fork()\n"
        "    if pid == 0:\n"
        "        block = b'x' * (150 * 2**20)\n"
        "        os.write(w, b'1')\n"
        "        time.sleep(60)\n"
        "        os._exit(0)\n"
        "    pids.append(pid)\n"
        "    while not select.select([r], [], [], 0.01)[0]:\n"
        "        if os.waitpid(pid, os.WNOHANG)[0]:\n"
        "            break\n"
        "    else:\n"
        "        os.read(r, 1)\n"
        "print(sum(os.waitpid(p, os.WNOHANG)[0] == 0 for p in pids))\n",
        timeout=30,
    )
    assert r.ok and int(r.stdout) * 150 < 256, r
    assert_next_call_can_use_its_memory(sb, 256)


def test_files_in_the_sandboxs_tmpfs_count_against_the_memory_limit(sb):
    with Sandbox(
        backend=sb.backend, timeout=10, workers=1, memory_mb=96, disk_mb=64, file_size_mb=64
    ) as small:
        needs_memory_cgroup(small)
        r = small.run_sync(
            "for path in ('/tmp/a', 'b'):\n"
            "    with open(path, 'wb') as f:\n"
            "        for _ in range(60):\n"
            "            f.write(b'x' * 2**20)\n"
            "print('held 120 MB')"
        )
        assert r.limit_hit == "memory" and "held" not in r.stdout, r
        assert_next_call_can_use_its_memory(small, 96)


def test_pipe_buffers_count_against_the_memory_limit(sb):
    # a pipe's buffer is kernel memory no address-space limit sees; the kernel's per-user pipe
    # limit (pipe-user-pages-soft, 64 MB by default) lets one process hold more than 48 MB
    with Sandbox(backend=sb.backend, timeout=10, workers=1, memory_mb=48) as small:
        needs_memory_cgroup(small)
        r = small.run_sync(
            "import fcntl, os\n"
            "held, pipes = 0, []\n"
            "try:\n"
            "    for _ in range(120):\n"
            "        r, w = os.pipe()\n"
            "        pipes.append((r, w))\n"
            "        try:\n"
            "            fcntl.fcntl(w, 1031, 2**20)  # F_SETPIPE_SZ\n"
            "        except OSError:\n"
            "            pass\n"
            "        os.set_blocking(w, False)\n"
            "        try:\n"
            "            while True:\n"
            "                held += os.write(w, b'x' * 65536)\n"
            "        except BlockingIOError:\n"
            "            pass\n"
            "except OSError as e:\n"
            "    print(e)\n"
            "print(held // 2**20)"
        )
        held = int(r.stdout.split()[-1]) if r.stdout.split() else 0
        # the process is killed at the limit (or a write fails) before the pipes hold 48 MB
        assert r.limit_hit == "memory" or held < 48, (held, r)
        assert_next_call_can_use_its_memory(small, 48)


def assert_next_call_can_use_its_memory(sandbox: Sandbox, memory_mb: int) -> None:
    block = (memory_mb - 48) * 2**20
    r = sandbox.run_sync(f"b = bytearray({block})\nb[::4096] = b'x' * len(b[::4096])\nprint('ok')")
    assert r.stdout == "ok\n", r


# -- no call can read another call's code or output --------------------------------------------

#: scans every readable mapping of the call's own process for the token, held in two halves
#: so that the scanner never holds it whole; prints where it found it
SCAN = """
import ctypes
head, tail = bytes.fromhex({head!r}), bytes.fromhex({tail!r})
size = len(head) + len(tail)
buf = bytearray(1 << 20)
at = ctypes.addressof((ctypes.c_char * len(buf)).from_buffer(buf))
hits = []
for line in open('/proc/self/maps').read().splitlines():
    fields = line.split()
    lo, hi = (int(x, 16) for x in fields[0].split('-'))
    if fields[1][0] != 'r' or fields[-1] in ('[vvar]', '[vvar_vclock]', '[vsyscall]'):
        continue
    pos = lo
    while pos < hi and not hits:
        n = min(len(buf), hi - pos)
        ctypes.memmove(at, pos, n)
        i = buf.find(head, 0, n)
        while i >= 0 and not hits:
            if buf[i + len(head) : i + size] == tail:
                hits.append(line + ' ' + bytes(buf[max(0, i - 24) : i]).hex())
            i = buf.find(head, i + 1, n)
        pos += n - size if n == len(buf) else n
print(hits)
"""


def scan_for(token: str) -> str:
    raw = token.encode()
    return SCAN.format(head=raw[:8].hex(), tail=raw[8:].hex())


def leave_token(run, token: str) -> None:
    """A call that holds the token in its code, output, error, stdin, a file and a traceback."""
    r = run(
        f"# {token}\n"
        "import sys\n"
        "data = sys.stdin.read() + open('given.txt').read()\n"
        "print(data[::-1][::-1] * 3)\n"
        "print(data[:5] + data[5:], file=sys.stderr)\n"
        "raise ValueError(data[1:] + data[:1])",
        stdin=token,
        files={"given.txt": token},
    )
    assert token in r.stdout and token[1:] in (r.exception or ""), r


@pytest.mark.parametrize("backend", ["bwrap", "unshare"])
def test_a_stateless_call_finds_no_byte_of_an_earlier_calls_code_or_output(backend):
    token = "gemkit-token-" + uuid.uuid4().hex
    with Sandbox(backend=backend, timeout=20, workers=1) as one:
        worker = None
        for _ in range(3):  # the token passes through the supervisor several times
            leave_token(one.run_sync, token)
            worker = worker or one._idle[0]
        r = one.run_sync(scan_for(token))
        assert one._idle == [worker], "the scan must run in the worker that saw the token"
    assert r.stdout == "[]\n", r


@pytest.mark.parametrize("backend", ["bwrap", "unshare"])
def test_a_new_session_finds_no_byte_of_the_last_sessions_code_or_output(backend):
    token = "gemkit-token-" + uuid.uuid4().hex
    with Sandbox(backend=backend, timeout=20, workers=1) as one:
        session = one.session()
        try:
            for _ in range(3):
                leave_token(session.run_sync, token)
            worker = session._worker
            session.reset_sync()  # the next episode: a new session in the same sandbox
            r = session.run_sync(scan_for(token))
            assert session._worker is worker, "the scan must run in the sandbox that saw it"
        finally:
            session.close()
    assert r.stdout == "[]\n", r


# -- expected data lives where the code cannot reach it ----------------------------------------

#: run by an interpreter that imports gemkit from a regular (non-editable) install
READ_DATA = """
import importlib.util, json, sys
from gemkit.sandbox import Sandbox, memcg
data = importlib.util.find_spec('gemkit.envs.code').submodule_search_locations[0] + '/data'
with Sandbox(backend=sys.argv[1], timeout=10, workers=1) as sb:
    r = sb.run_sync(
        'import os, sys\\n'
        f'print(os.path.exists({data!r}), os.path.exists({data + "/builtin.jsonl"!r}))\\n'
        'print([os.listdir(p + "/gemkit") for p in sys.path if os.path.isdir(p + "/gemkit")])'
    )
print(json.dumps({'installed': data, 'stdout': r.stdout, 'stderr': r.stderr}))
"""


@pytest.fixture(scope="module")
def installed_python(tmp_path_factory):
    """A virtualenv with gemkit installed from a copy of this checkout (not editable)."""
    top = tmp_path_factory.mktemp("installed")
    top.chmod(0o755)
    src = top / "src"
    tracked = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for name in filter(None, tracked):
        path = REPO / os.fsdecode(name)
        if path.is_file():
            (src / path.relative_to(REPO)).parent.mkdir(parents=True, exist_ok=True)
            (src / path.relative_to(REPO)).write_bytes(path.read_bytes())
    venv = top / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    lib = venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    target = lib / "site-packages"
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation"]
    subprocess.run([*pip, "--no-index", "--target", str(target), str(src)], check=True)
    # gemkit's own dependencies come from this interpreter's site-packages (a plain path line:
    # its .pth files, the editable install's among them, are not run)
    (target / "deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    for folder in (venv, *venv.rglob("*")):
        if folder.is_dir():
            folder.chmod(0o755)
    return str(venv / "bin" / "python")


@pytest.mark.parametrize("backend", ["bwrap", "unshare"])
def test_an_installed_gemkits_package_and_data_are_hidden_from_the_code(installed_python, backend):
    out = subprocess.run(
        [installed_python, "-c", READ_DATA, backend],
        capture_output=True,
        text=True,
        cwd="/",
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout.splitlines()[-1])
    assert "/site-packages/gemkit/" in seen["installed"], seen  # the install, not this checkout
    assert seen["stdout"] == "False False\n[[]]\n", seen  # an empty folder in its place


def test_a_dataset_the_host_names_is_hidden_even_inside_a_shared_folder(sb, tmp_path):
    shared = tmp_path / "shared"
    (shared / "answers").mkdir(parents=True)
    for folder in (tmp_path, shared, shared / "answers"):
        folder.chmod(0o755)
    (shared / "tool.py").write_text("X = 1\n")
    (shared / "answers" / "expected.jsonl").write_text('{"answer": 42}\n')
    (shared / "key.txt").write_text("secret\n")
    for p in (shared / "tool.py", shared / "answers" / "expected.jsonl", shared / "key.txt"):
        p.chmod(0o644)
    hidden = (str(shared / "answers"), str(shared / "key.txt"))
    with Sandbox(
        backend=sb.backend, timeout=5, workers=1, ro_paths=(str(shared),), hidden_paths=hidden
    ) as one:
        r = one.run_sync(
            "import os\n"
            f"print(os.path.exists({str(shared / 'tool.py')!r}))\n"
            f"print(os.listdir({str(shared / 'answers')!r}))\n"
            f"try:\n    print(repr(open({str(shared / 'key.txt')!r}).read()))\n"
            "except OSError:\n    print('unreadable')"
        )
    # a hidden file reads as empty (or cannot be opened at all)
    assert r.stdout in ("True\n[]\n''\n", "True\n[]\nunreadable\n"), r


def test_the_code_cannot_reach_the_cgroup_that_counts_its_memory(sb):
    r = sb.run_sync(
        "import os\n"
        "print(os.path.exists('/sys/fs/cgroup'))\n"
        "print([line for line in open('/proc/self/mountinfo') if 'cgroup' in line])"
    )
    assert r.stdout == "False\n[]\n", r
