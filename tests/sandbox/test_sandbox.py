"""The sandbox as a service: results, isolation between calls, sessions, limits, backends."""

from __future__ import annotations

import asyncio
import json
import os
import site
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from gemkit.sandbox import (
    Sandbox,
    SandboxError,
    SandboxUnavailableError,
    backends,
    memcg,
    outcome,
    seccomp,
    truncation_marker,
    wire,
    worker,
)
from gemkit.sandbox import sandbox as sandbox_module


@pytest.fixture(scope="module")
def sb():
    sandbox = Sandbox(timeout=5, workers=2, max_output=1000)
    yield sandbox
    sandbox.close()


def test_auto_picks_an_isolating_backend(sb):
    assert sb.backend in ("bwrap", "unshare")


def test_the_system_files_shared_with_the_sandbox_are_readable_by_the_code(sb):
    shared = [p for p in backends.ETC_PATHS if os.path.exists(p)]
    r = sb.run_sync(f"import os\nprint([p for p in {shared!r} if not os.access(p, os.R_OK)])")
    assert r.stdout == "[]\n"


def test_stdout_stderr_and_exit_code_are_reported(sb):
    r = sb.run_sync("import sys\nprint('out')\nprint('err', file=sys.stderr)\nsys.exit(3)")
    assert (r.stdout, r.stderr, r.exit_code) == ("out\n", "err\n", 3)
    assert not r.ok


def test_an_exception_reports_its_last_line_and_a_traceback_of_the_users_code(sb):
    r = sb.run_sync("def f():\n    return 1 / 0\nf()")
    assert r.exception == "ZeroDivisionError: division by zero"
    assert 'File "<code>", line 2, in f' in r.stderr and "return 1 / 0" in r.stderr
    assert "gemkit-sandbox" not in r.stderr  # the supervisor's frames are hidden


def test_standard_streams_start_fresh_in_every_stateless_call(sb):
    # the stream objects are built once and shared by every call: nothing a call leaves in
    # them (unflushed output, a closed or replaced stream, text read ahead) reaches the next
    left = sb.run_sync(
        "import sys, os\nsys.stdout.write('left behind')\nsys.stdin.close()\n"
        "sys.stderr = None\nos._exit(0)",
        stdin="unread input\n",
    )
    assert left.stdout == "" and left.exit_code == 0
    r = sb.run_sync(
        "import sys\nprint(sys.stdin.read(), end='')\nprint(sys.stdout.seekable())\n"
        "print('e', file=sys.stderr)",
        stdin="fresh\n",
    )
    assert (r.stdout, r.stderr) == ("fresh\nFalse\n", "e\n")


def test_finished_means_the_code_reached_its_last_line(sb):
    assert sb.run_sync("x = 1").finished
    for early in ("import sys\nsys.exit(0)", "import os\nos._exit(0)", "raise ValueError"):
        assert not sb.run_sync(early + "\nprint('end')").finished


def test_stdin_is_fed_to_the_code(sb):
    r = sb.run_sync("a, b = map(int, input().split())\nprint(a + b)", stdin="2 40\n")
    assert r.stdout == "42\n"


def test_files_are_placed_in_the_working_directory(sb):
    r = sb.run_sync("print(open('data/in.txt').read())", files={"data/in.txt": "hello"})
    assert r.stdout == "hello\n"


def test_files_are_written_with_the_codes_rights_so_planted_symlinks_lead_nowhere(sb):
    session = sb.session()
    try:
        planted = session.run_sync(
            "import os\nos.symlink('/dev/gemkit-planted', 'evil')\nprint(os.access('/dev', os.W_OK))"
        )
        r = session.run_sync("pass", files={"evil": "x"})
        if planted.stdout == "False\n":  # only the supervisor could write /dev: it must not
            assert not r.ok and "could not write the files" in r.exception
    finally:
        session.close()


def test_file_names_outside_the_working_directory_are_refused(sb):
    with pytest.raises(SandboxError, match="relative path"):
        sb.run_sync("pass", files={"../escape.txt": "x"})


def test_stateless_calls_do_not_share_variables_files_or_modules(sb):
    sb.run_sync("x = 1\nopen('left.txt', 'w').write('x')\nimport json\njson.dumps = None")
    r = sb.run_sync(
        "import os, json\nprint('x' in globals(), os.path.exists('left.txt'), json.dumps([1]))"
    )
    assert r.stdout == "False False [1]\n"


def test_folders_a_call_leaves_are_removed_even_when_made_unwritable():
    code = (
        "import os\n"
        "for top in ('.', '/tmp'):\n"
        "    os.makedirs(f'{top}/deep/er', exist_ok=True)\n"
        "    open(f'{top}/deep/er/f.txt', 'w').write('x')\n"
        "    os.chmod(f'{top}/deep/er', 0o500)\n"
        "    os.chmod(f'{top}/deep', 0o500)\n"
        "print(sorted(os.listdir('.')), 'deep' in os.listdir('/tmp'))"
    )
    with Sandbox(timeout=5, workers=1) as one:
        first = one.run_sync(code)
        # a worker that could not wipe its folders reports itself unclean and is replaced
        assert len(one._idle) == 1, "the worker was replaced: its folders were not wiped"
        worker = one._idle[0]
        second = one.run_sync(code)
        assert one._idle == [worker], "the worker was replaced: its folders were not wiped"
    assert first.stdout == second.stdout == "['deep'] True\n", (first, second)


def test_output_beyond_the_limit_is_cut_with_a_marker(sb):
    r = sb.run_sync("print('a' * 5000)")
    assert r.stdout == "a" * 1000 + truncation_marker(5001, 1000)
    assert r.stdout.endswith("[... output truncated: 5001 bytes total, showing first 1000 ...]")


def test_a_timeout_per_call_overrides_the_default(sb):
    r = sb.run_sync("import time\ntime.sleep(2)\nprint('done')", timeout=0.5)
    assert r.timed_out and r.exception == "TimeoutError: code ran longer than 0.5 s"


async def test_async_calls_run_concurrently_on_the_pool(sb):
    results = await asyncio.gather(*(sb.run(f"print({i} * 2)") for i in range(6)))
    assert [r.stdout for r in results] == [f"{i * 2}\n" for i in range(6)]


async def test_async_calls_overlap_time_out_and_survive_cancellation():
    # with an idle worker the event loop talks to the sandbox itself (no thread): the calls
    # must still overlap, hit their time limit, and a cancelled call must cost only its worker
    sandbox = Sandbox(timeout=5, workers=2)
    try:
        sandbox.warm(2)
        # each call reports when it started and ended (the wall clock is the host's): on two
        # workers the two intervals overlap, however slow the machine is at the moment
        sleeper = "import time\nt = time.time()\ntime.sleep(0.6)\nprint(t, time.time())"
        sleepers = await asyncio.gather(*(sandbox.run(sleeper) for _ in range(2)))
        (a0, a1), (b0, b1) = (map(float, r.stdout.split()) for r in sleepers)
        assert a0 < b1 and b0 < a1, "two calls on two workers must run at the same time"
        r = await sandbox.run("while True:\n    pass", timeout=0.5)
        assert r.timed_out and r.limit_hit in ("wall", "cpu")
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(sandbox.run("import time\ntime.sleep(30)"), 0.3)
        after = await asyncio.gather(*(sandbox.run(f"print({i})") for i in range(4)))
        assert [a.stdout for a in after] == ["0\n", "1\n", "2\n", "3\n"]
        big = await sandbox.run("import sys\nprint(len(sys.stdin.read()))", stdin="x" * 300_000)
        assert big.stdout == "300000\n"  # a request larger than a pipe's buffer
    finally:
        sandbox.close()


async def test_more_async_calls_than_workers_wait_on_the_loop_for_the_next_free_one(monkeypatch):
    sandbox = Sandbox(timeout=5, workers=2)
    try:
        sandbox.warm(2)

        def no_thread(req):  # the thread path: a full pool must not need it
            raise AssertionError("a call waited for a worker in a thread")

        monkeypatch.setattr(sandbox, "_run_request", no_thread)
        code = "import time\nt = time.time()\ntime.sleep(0.2)\nprint(t)"
        results = await asyncio.gather(*(sandbox.run(code) for _ in range(6)))
        starts = sorted(float(r.stdout) for r in results)
        # two at a time: the third starts only once one of the first two is done
        assert starts[2] - starts[0] >= 0.15, starts
        assert len(sandbox._idle) == 2 and not sandbox._waiters
    finally:
        sandbox.close()


async def test_an_async_call_that_takes_the_last_idle_worker_starts_a_spare(monkeypatch):
    async def until(condition, what):
        deadline = time.monotonic() + 60
        while not condition():
            assert time.monotonic() < deadline, what
            await asyncio.sleep(0.05)

    sandbox = Sandbox(timeout=5, workers=3)
    try:
        sandbox.run_sync("pass")  # a first worker, and a spare started beside it
        await until(lambda: len(sandbox._idle) == 2, "the first spare never came")

        def no_thread(req):  # both idle workers are taken on the loop
            raise AssertionError("a call went through a thread")

        monkeypatch.setattr(sandbox, "_run_request", no_thread)
        results = await asyncio.gather(*(sandbox.run("print(1)") for _ in range(2)))
        assert [r.stdout for r in results] == ["1\n", "1\n"]
        await until(lambda: len(sandbox._idle) == 3, "taking the last idle one started no spare")
    finally:
        sandbox.close()


async def test_a_waiting_call_that_is_cancelled_passes_the_worker_on_and_close_wakes_waiters():
    sandbox = Sandbox(timeout=5, workers=1)
    try:
        sandbox.warm(1)
        busy = asyncio.create_task(sandbox.run("import time\ntime.sleep(0.4)\nprint('busy')"))
        await asyncio.sleep(0.05)
        cancelled = asyncio.create_task(sandbox.run("print('never')"))
        after = asyncio.create_task(sandbox.run("print('after')"))
        await asyncio.sleep(0.05)
        cancelled.cancel()
        assert (await busy).stdout == "busy\n"
        assert (await after).stdout == "after\n"  # got the worker the cancelled call gave up
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        assert len(sandbox._idle) == 1 and sandbox._count == 1
        busy = asyncio.create_task(sandbox.run("import time\ntime.sleep(0.4)"))
        await asyncio.sleep(0.05)
        waiting = asyncio.create_task(sandbox.run("print('never')"))
        await asyncio.sleep(0.05)
        sandbox.close()
        with pytest.raises(SandboxError, match="closed"):
            await waiting
        await asyncio.gather(busy, return_exceptions=True)
    finally:
        sandbox.close()


def test_a_session_keeps_variables_until_reset(sb):
    session = sb.session()
    try:
        session.run_sync("total = 40")
        assert session.run_sync("total += 2\nprint(total)").stdout == "42\n"
        session.reset_sync()
        r = session.run_sync("print(total)")
        assert r.exception == "NameError: name 'total' is not defined"
    finally:
        session.close()


def test_a_session_that_times_out_restarts_empty_and_says_so(sb):
    session = sb.session()
    try:
        session.run_sync("kept = 1")
        r = session.run_sync("while True:\n    pass", timeout=0.5)
        assert r.timed_out and r.session_lost
        after = session.run_sync("print('kept' in globals())")
        assert after.stdout == "False\n"
    finally:
        session.close()


async def test_a_session_works_from_async_code(sb):
    session = sb.session()
    try:
        await session.run("import math")
        r = await session.run("print(math.isqrt(49))")
        assert r.stdout == "7\n"
        await session.reset()
    finally:
        session.close()


def test_a_closed_sandbox_refuses_calls():
    sandbox = Sandbox(timeout=1, workers=1)
    sandbox.close()
    with pytest.raises(SandboxError, match="closed"):
        sandbox.run_sync("pass")


def test_without_a_working_backend_auto_refuses_and_names_unsafe_local(monkeypatch):
    monkeypatch.setattr(backends, "probe", lambda name, python: f"{name} is broken here")
    with pytest.raises(SandboxUnavailableError) as err:
        Sandbox(backend="auto")
    assert "unsafe-local" in str(err.value) and "bubblewrap" in str(err.value)


def test_an_unknown_backend_name_lists_the_valid_ones():
    with pytest.raises(SandboxUnavailableError, match="'auto', 'bwrap', 'unshare'"):
        Sandbox(backend="docker")


def test_unsafe_local_runs_only_when_asked_for_by_name():
    with Sandbox(backend="unsafe-local", timeout=2, workers=1) as local:
        r = local.run_sync("import os\nprint(os.getcwd().split('/')[-1].startswith('gemkit'))")
        assert r.stdout == "True\n"
        assert local.run_sync("while True:\n    pass", timeout=0.5).timed_out


def test_invalid_limits_are_refused_with_the_expected_ranges():
    with pytest.raises(SandboxError, match="timeout and memory_mb must be > 0"):
        Sandbox(timeout=0)


def test_a_sandbox_started_from_a_short_lived_thread_outlives_it():
    # bubblewrap kills the sandbox when the thread that started it exits (--die-with-parent)
    with Sandbox(timeout=5, workers=1) as sandbox:
        thread = threading.Thread(target=sandbox.run_sync, args=("pass",))
        thread.start()
        thread.join()
        time.sleep(0.2)
        r = sandbox.run_sync("print('alive')")
        assert r.stdout == "alive\n" and r.limit_hit is None


def test_a_shared_path_the_sandbox_would_hide_is_refused_with_the_reason():
    for path in ("/tmp", "/proc/self", "/dev/shm/venv"):
        with pytest.raises(SandboxUnavailableError, match="would be hidden inside the sandbox"):
            Sandbox(ro_paths=(path,))


@pytest.mark.parametrize("backend", ["bwrap", "unshare"])
def test_a_folder_under_tmp_is_shared_read_only_and_the_rest_of_tmp_stays_private(backend):
    # a CI checkout under /tmp puts the virtualenv there (/tmp/checkout/.venv): it must stay
    # usable in the sandbox, and the wipe after each call must empty /tmp around it
    with (
        tempfile.TemporaryDirectory(dir="/tmp") as top,
        tempfile.NamedTemporaryFile(dir="/tmp", suffix=".secret") as secret,
    ):
        shared = os.path.join(top, "venv")
        os.mkdir(shared)
        for folder in (top, shared):
            Path(folder).chmod(0o755)  # readable by the sandbox's unprivileged uid, like a venv
        Path(shared, "data.txt").write_text("shared text")
        with Sandbox(backend=backend, timeout=5, workers=1, ro_paths=(shared,)) as sandbox:
            r = sandbox.run_sync(f"print(open({shared + '/data.txt'!r}).read())")
            assert r.stdout == "shared text\n", r
            worker = sandbox._idle[0]
            r = sandbox.run_sync(f"open({shared + '/data.txt'!r}, 'w').write('x')")
            assert r.exception and ("Read-only" in r.exception or "Permission" in r.exception)
            r = sandbox.run_sync(f"import os; print(os.path.exists({secret.name!r}))")
            assert r.stdout == "False\n"
            planted = os.path.join(top, "planted.txt")
            sandbox.run_sync(
                "open('/tmp/scratch.txt', 'w').write('x')\n"
                f"try:\n    open({planted!r}, 'w').write('x')\nexcept OSError:\n    pass"
            )
            r = sandbox.run_sync(
                f"import os; print(os.path.exists('/tmp/scratch.txt'), os.path.exists({planted!r}))"
            )
            assert r.stdout == "False False\n", r
            # every call left the worker clean: the shared folder is no reason to replace it
            assert sandbox._idle == [worker]
        assert Path(shared, "data.txt").read_text() == "shared text"
        assert not Path(planted).exists()


def test_a_sandbox_that_dies_while_idle_is_replaced_before_the_next_call():
    with Sandbox(timeout=5, workers=1) as sandbox:
        sandbox.run_sync("pass")
        for worker in list(sandbox._idle):
            os.killpg(worker.proc.pid, 9)
            worker.proc.wait()
        r = sandbox.run_sync("print('fresh')")
        assert r.stdout == "fresh\n" and r.ok


async def test_a_sandbox_that_dies_while_idle_is_replaced_before_the_next_async_call():
    with Sandbox(timeout=5, workers=2) as sandbox:
        sandbox.warm(2)
        for worker in list(sandbox._idle):
            os.killpg(worker.proc.pid, 9)
            worker.proc.wait()
        results = await asyncio.gather(*(sandbox.run(f"print({i})") for i in range(3)))
        assert [r.stdout for r in results] == ["0\n", "1\n", "2\n"]
        assert all(r.ok for r in results)


def test_a_session_whose_sandbox_died_says_its_variables_are_gone(sb):
    session = sb.session()
    try:
        session.run_sync("kept = 1")
        os.killpg(session._worker.proc.pid, 9)
        session._worker.proc.wait()
        r = session.run_sync("print('kept' in globals())")
        assert r.stdout == "False\n" and r.session_lost
    finally:
        session.close()


def test_a_session_can_use_more_cpu_in_total_than_one_calls_limit(sb):
    # each call's CPU limit counts from what the session has spent; a timeout just under a
    # whole second makes the second call's limit land past the first one's
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.1:\n    pass\n"
    session = sb.session()
    try:
        results = [session.run_sync(burn + f"print({i})", timeout=9.95) for i in range(3)]
        assert [r.stdout for r in results] == ["0\n", "1\n", "2\n"]
        assert not any(r.session_lost for r in results)
    finally:
        session.close()


def test_os_exit_in_a_session_is_reported_and_the_session_restarts(sb):
    session = sb.session()
    try:
        r = session.run_sync("import os\nos._exit(3)")
        assert r.limit_hit == "exited" and r.session_lost
        assert r.exception == "SystemExit: the Python process exited during the call (status 3)"
        assert session.run_sync("print('again')").stdout == "again\n"
    finally:
        session.close()


def test_the_code_sees_the_path_prefix_and_builtins_a_normal_start_gives(sb):
    # the supervisor starts without site (-S) and adopts what site would have set up
    code = "import sys,json;print(json.dumps({'path':sys.path,'prefix':sys.prefix}))"
    normal = json.loads(
        subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True).stdout
    )
    r = sb.run_sync(code + "\nprint(callable(help), type(quit).__name__)\nexit(3)")
    seen, builtins = r.stdout.splitlines()
    assert json.loads(seen) == normal
    assert builtins == "True Quitter" and r.exit_code == 3


def test_the_first_import_nothing_finds_runs_what_site_skipped_once(monkeypatch, tmp_path):
    (tmp_path / "gemkit_site_probe.py").write_text("X = 7\n")
    calls: list[int] = []

    def main() -> None:  # what a .pth line might do: make a module importable
        calls.append(1)
        sys.path.append(str(tmp_path))

    finder = type("Finder", (worker._SiteOnMiss,), {"done": False})  # a fresh one
    monkeypatch.setattr(site, "main", main)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(sys, "meta_path", [*sys.meta_path, finder])
    try:
        import gemkit_site_probe  # type: ignore[import-not-found]

        assert gemkit_site_probe.X == 7 and calls == [1]
        with pytest.raises(ModuleNotFoundError):
            import gemkit_site_probe_missing  # type: ignore[import-not-found]  # noqa: F401
        assert calls == [1]  # once per process
    finally:
        sys.modules.pop("gemkit_site_probe", None)


def test_the_code_inherits_no_future_flags_from_the_supervisor(sb):
    # the supervisor's source opens with `from __future__ import annotations`; the user's code must not
    code = "def f(x: int) -> None: pass\nprint(f.__annotations__['x'] is int)"
    assert sb.run_sync(code).stdout == "True\n"
    session = sb.session()
    try:
        assert session.run_sync(code).stdout == "True\n"
    finally:
        session.close()


# -- memory cgroups, the reply format, the system-call filter ----------------------------------

V1_CGROUPS = "5:memory:/user.slice/app\n1:cpu:/\n0::/user.slice/app\n"
V2_CGROUPS = "0::/user.slice/app\n"
MOUNTS = [
    ("/sys/fs/cgroup/memory", "cgroup", "rw,memory"),
    ("/sys/fs/cgroup/unified", "cgroup2", "rw"),
]


def test_the_memory_cgroup_is_found_below_the_one_gemkit_runs_in():
    found = memcg.find_hierarchy(V1_CGROUPS, MOUNTS)
    assert found == memcg.Hierarchy("/sys/fs/cgroup/memory/user.slice/app", 1)
    assert found.limit_files()[0] == "memory.limit_in_bytes"


def test_without_a_usable_memory_cgroup_the_reason_is_given():
    assert "not mounted" in memcg.find_hierarchy(V1_CGROUPS, MOUNTS[1:])
    assert "no memory cgroup" in memcg.find_hierarchy("", MOUNTS)
    # cgroup v2 without the memory controller handed down to gemkit's children
    reason = memcg.find_hierarchy(V2_CGROUPS, [("/nonexistent-cgroup2", "cgroup2", "rw")])
    assert "cgroup.subtree_control" in reason


def test_without_a_memory_cgroup_the_sandbox_limits_each_process_and_says_so(monkeypatch, caplog):
    monkeypatch.setattr(memcg, "why_unavailable", lambda: "cgroups are not mounted here")
    monkeypatch.setattr(sandbox_module, "_SAID_SCOPE", [])
    with caplog.at_level("WARNING"), Sandbox(timeout=5, workers=1, memory_mb=128) as sandbox:
        assert sandbox.memory_scope == "process"
        r = sandbox.run_sync("block = bytearray(512 * 1024**2)")
        assert r.limit_hit == "memory" and r.exception.startswith("MemoryError")
        assert sandbox.run_sync("print('ok')").stdout == "ok\n"
    assert "limits each process only (no memory cgroup: cgroups are not mounted here)" in (
        caplog.text
    )


@pytest.mark.skipif(memcg.why_unavailable() is not None, reason="no memory cgroup here")
def test_each_sandbox_has_its_memory_cgroup_until_it_closes():
    with Sandbox(timeout=5, workers=1) as sandbox:
        r = sandbox.run_sync("print(open('/proc/self/cgroup').read())")
        assert memcg.PREFIX in r.stdout
        (pooled,) = sandbox._idle
        path = pooled.group.path
        limit_file = memcg.hierarchy().limit_files()[0]
        assert int(Path(path, limit_file).read_text()) == sandbox.memory_mb * 1024 * 1024
    assert not os.path.exists(path)


def test_a_reply_whose_parts_do_not_add_up_is_refused():
    head = wire.encode_reply({"tail": [5, 0, 0], "stdout_bytes": 5}, 3)[wire.HEADER.size :]
    with pytest.raises(ValueError, match="do not add up"):
        outcome.decode_reply(head + b"abc")
    assert outcome.decode_reply(wire.encode_reply({"pong": True})[4:]) == {"pong": True}


def test_the_code_s_own_report_cannot_name_a_limit_it_did_not_hit_through_its_exception_text():
    report = wire.encode_report(
        {
            "exit_code": 1,
            "finished": False,
            "exception": {"type": "ValueError", "last_line": "ValueError: x\0memory"},
        }
    )
    parsed = wire.parse_report(report[wire.HEADER.size :])
    assert parsed["exception"] == {"type": "ValueError", "last_line": "ValueError: x\0memory"}


def test_an_outsized_exception_line_is_cut_to_fit_the_report():
    line = "ValueError: " + "é" * 100_000
    report = wire.encode_report(
        {"exit_code": 1, "finished": False, "exception": {"type": "ValueError", "last_line": line}}
    )
    assert len(report) <= wire.HEADER.size + wire.MAX_RESULT
    parsed = wire.parse_report(report[wire.HEADER.size :])
    assert parsed["exception"]["last_line"].endswith(" [...]")


def test_the_supervisors_program_is_its_files_joined_without_their_imports_of_each_other():
    import ast

    program = backends.worker_source()
    tree = ast.parse(program)  # one module: its files' definitions meet in one namespace
    imported = [
        n.module if isinstance(n, ast.ImportFrom) else a.name
        for n in ast.walk(tree)
        if isinstance(n, ast.Import | ast.ImportFrom)
        for a in n.names
    ]
    assert not [m for m in imported if m and m.startswith("gemkit")]  # gemkit is hidden there
    assert program.startswith("from __future__ import annotations\n")
    assert program.count("from __future__ import") == 1  # a second one would not compile
    defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef)}
    for name in backends.WORKER_FILES:
        source = ast.parse((Path(backends.__file__).parent / name).read_text())
        names = {n.name for n in source.body if isinstance(n, ast.FunctionDef | ast.ClassDef)}
        assert names <= defined, name
    assert tree.body[-1].test.comparators[0].value == "__main__"  # worker.py's main runs last


def test_a_supervisor_file_that_imports_gemkit_is_refused_by_name(tmp_path, monkeypatch):
    (tmp_path / "part.py").write_text("from gemkit.errors import GemkitError\n")
    monkeypatch.setattr(backends, "__file__", str(tmp_path / "backends.py"))
    monkeypatch.setattr(backends, "WORKER_FILES", ("part.py",))
    with pytest.raises(RuntimeError, match="part.py:1: the supervisor may import no gemkit"):
        backends.worker_source.__wrapped__()


def test_the_filter_has_a_table_for_each_machine_it_knows_and_none_for_others():
    for machine in seccomp.SYSCALLS:
        program = seccomp.seccomp_filter(machine)
        assert program and len(program) % 8 == 0
    assert seccomp.seccomp_filter("sparc64") is None


def test_hidden_paths_must_be_absolute_and_cannot_hold_the_interpreter():
    with pytest.raises(SandboxError, match="must be absolute"):
        Sandbox(hidden_paths=("data/answers",))
    with pytest.raises(SandboxUnavailableError, match="cannot be hidden"):
        Sandbox(hidden_paths=(sys.prefix,))
