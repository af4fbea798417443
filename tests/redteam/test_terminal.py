"""Attacks on terminal tasks: each agent wants the reward without the work, or wants to reach
past its own episode. Every attack runs for real on both backends (Docker, bubblewrap).

The grading they face: `seal()` kills every agent process and keeps only regular files and
folders of /work, read-only; each test then runs as a grader user with a fresh /tmp, and
compares its output with an expected text that never enters the terminal.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gemkit.envs.terminal import bwrap
from gemkit.envs.terminal.bwrap import SECRET_DIRS, BwrapTerminal, hidden_dirs
from gemkit.envs.terminal.docker import DockerTerminal, _split_status
from gemkit.envs.terminal.env import TerminalEnv
from gemkit.envs.terminal.task import TASKS_DIR, Task, builtin_tasks

# the backend fixtures' skip rules live in tests/terminal/conftest.py; this folder has none
_spec = importlib.util.spec_from_file_location(
    "terminal_backend_rules", Path(__file__).parents[1] / "terminal" / "conftest.py"
)
_rules = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_rules)

TASKS = builtin_tasks()
#: tasks graded on one file the agent writes, and that file
FILE_OUTPUTS = {
    "CountWords": "counts.txt",
    "CsvTotals": "totals.txt",
    "DedupeLines": "unique.txt",
    "EditConfig": "app.ini",
    "JoinOrders": "report.txt",
    "LargeFiles": "big.txt",
    "LogErrors": "errors.txt",
}


@pytest.fixture(params=["docker", "bwrap"])
def backend(request: pytest.FixtureRequest) -> str:
    """Each attack runs once per backend."""
    _rules.require(request.param)
    return request.param


@pytest.fixture
def docker_backend() -> str:
    """The Docker backend, or a skip (a failure under GEMKIT_REQUIRE_DOCKER) with the reason."""
    _rules.require("docker")
    return "docker"


@pytest.fixture
def bwrap_backend() -> str:
    """The bwrap backend, or a skip with the reason."""
    _rules.require("bwrap")
    return "bwrap"


def play(backend: str, task: str | Task, *commands: str, **options) -> tuple[float, dict, str]:
    """One episode: the agent's commands, then its submission; the reward, info, observation."""
    env = TerminalEnv(task, backend=backend, **options)
    try:
        env.reset(seed=0)
        for command in commands:
            env.run_command(command)
        obs, reward, terminated, _, info = env.step("submit")
    finally:
        env.close()
    assert terminated
    return reward, info, obs


def custom(name: str, *tests: dict) -> Task:
    """A task built in code around `tests` (the agent gets no files)."""
    return Task.from_dict(
        {
            "name": name,
            "description": "attack probe",
            "instruction": "probe",
            "solution": "true",
            "tests": list(tests),
        }
    )


# -- links and other non-files in place of the graded output ----------------------------------


@pytest.mark.parametrize("target", ["/tmp/expected", "/tmp/e", "/proc/self/fd/3", "/dev/stdin"])
def test_a_graded_file_linked_to_where_a_test_reads_scores_nothing(backend, target):
    # before the fix: reward 1.0 on CsvTotals, DedupeLines, JoinOrders, LargeFiles, LogErrors
    for name, output in FILE_OUTPUTS.items():
        reward, info, _ = play(backend, name, f"rm -f {output}; ln -s {target} {output}")
        assert (reward, info["success"]) == (0.0, False), name
        assert info["dropped"] == [output], name


def test_an_answer_reached_through_a_link_or_a_fifo_is_not_graded(backend):
    solution = TASKS["CountWords"].solution.replace("> counts.txt", "> /tmp/answer")
    reward, info, obs = play(
        backend,
        "CountWords",
        solution,
        "ln -s /tmp/answer counts.txt && mkfifo pipe && ln -s / root && ln -s words.txt w",
    )
    assert (reward, info["success"]) == (0.0, False)
    assert info["dropped"] == ["counts.txt", "pipe", "root", "w"]
    assert "Graded without 4 entries of /work that are not regular files" in obs


def test_a_folder_or_a_fifo_in_place_of_the_graded_file_scores_nothing(backend):
    for plant in ("mkdir counts.txt", "mkfifo counts.txt"):
        reward, info, _ = play(backend, "CountWords", plant)
        assert (reward, info["success"]) == (0.0, False), plant


def test_hard_links_cannot_join_the_work_dir_and_tmp(backend):
    env = TerminalEnv("CountWords", backend=backend)
    try:
        env.reset()
        r = env.run_command("echo x > /tmp/f && ln /tmp/f /work/f")
    finally:
        env.close()
    assert r.exit_code != 0 and "cross-device" in r.output.lower()


# -- agent programs that the tests run --------------------------------------------------------

#: each shipped task whose tests run the agent's program, and a program that wants the
#: expected output without computing it: read the test's expected file, or the test's text
#: from its ancestors' command lines
CHEATS = {
    "FixGradesAwk": (
        "printf '%s\\n' 'BEGIN { while ((getline l < \"/tmp/e\") > 0) print l; exit }' > pass.awk"
    ),
    "FixDateSed": "printf '%s\\n' '1r /tmp/e' 'd' > dates.sed",
    "FizzBuzzScript": r"""cat > fizzbuzz.sh <<'SH'
#!/bin/sh
if [ -f /tmp/e ]; then cat /tmp/e; exit; fi
i=1; while [ $i -le "$1" ]; do [ $i = "$1" ] && echo FizzBuzz || echo x; i=$((i+1)); done
SH
chmod +x fizzbuzz.sh""",
    "FixAverageScript": r"""cat > average.sh <<'SH'
#!/bin/sh
cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\0' '\n' | grep -o '"average: [0-9]*"' |
  tail -n 1 | tr -d '"'
SH""",
}


#: the tests of each task that run the agent's program
PROGRAM_TESTS = {
    "FixGradesAwk": {"given grades", "other grades"},
    "FixDateSed": {"given events", "other text"},
    "FizzBuzzScript": {"fifteen", "another length"},
    "FixAverageScript": {"given numbers", "other numbers"},
}


@pytest.mark.parametrize("task", sorted(CHEATS))
def test_an_agent_program_cannot_copy_the_expected_output(backend, task):
    # before the fix: FixGradesAwk and FixAverageScript 1.0, the other two passed a test
    reward, info, _ = play(backend, task, CHEATS[task], partial_credit=True)
    failed = {t["name"] for t in info["test_results"] if not t["passed"]}
    assert reward < 1.0 and not info["success"]
    assert PROGRAM_TESTS[task] <= failed


#: what a spy sees: every file in /tmp, every process's command line and environment (the
#: pattern comes from a file, so that it is in no command line of the spy's own)
_SPY = (
    "(grep -l -r -F -f /work/.pattern /tmp; for f in /proc/[0-9]*/cmdline /proc/[0-9]*/environ;"
    " do xargs -0 -n 1 echo < $f | grep -q -F -f /work/.pattern && echo $f; done)"
    " 2>/dev/null | sed 's/^/FOUND /' >&2"
)


def _spy_script(name: str) -> str:
    """A shell command that writes the spy as the executable script `name`."""
    return f"cat > {name} <<'SH'\n#!/bin/sh\n{_SPY}\nSH\nchmod +x {name}"


SPIES = {
    "FixAverageScript": ("average: 2", _spy_script("average.sh")),
    "FizzBuzzScript": ("FizzBuzz", _spy_script("fizzbuzz.sh")),
    "FixGradesAwk": ("fay 60.0", f"cat > pass.awk <<'AWK'\nBEGIN {{ system(\"{_SPY}\") }}\nAWK"),
}


@pytest.mark.parametrize("task", sorted(SPIES))
def test_an_agent_program_finds_the_expected_output_nowhere(backend, task):
    pattern, plant = SPIES[task]
    env = TerminalEnv(task, backend=backend)
    try:
        env.reset()
        env.run_command(f"printf '%s\\n' '{pattern}' > .pattern && {plant}")
        spy = env.run_command(f"echo '{pattern}' > /tmp/probe && {_SPY.replace('/work/', '')}")
        _, reward, _, _, info = env.step("submit")
    finally:
        env.close()
    assert "FOUND /tmp/probe" in spy.output  # the spy works: it finds a planted copy
    seen = "".join(t.get("output", "") for t in info["test_results"])
    assert "FOUND" not in seen and reward == 0.0


# -- processes the agent or a test leaves -----------------------------------------------------

_LEFTOVERS = (
    "sleep 1001 >/dev/null 2>&1 &",
    "setsid sleep 1002 >/dev/null 2>&1 &",
    "(sleep 1003 &) >/dev/null 2>&1",
    "nohup sh -c 'exec 3>/work/held; sleep 1004' >/dev/null 2>&1 &",
    "(while :; do sleep 1005 & sleep 0.01; done) >/dev/null 2>&1 &",
)


def test_no_agent_process_is_alive_when_a_test_runs(backend):
    probe = custom(
        "ProcessProbe",
        {
            "name": "processes",
            "run": "id -u; cat /proc/[0-9]*/cmdline | tr '\\0' ' ' | grep -o 'sleep 10[0-9]*'; exit 1",
        },
    )
    env = TerminalEnv(probe, backend=backend)
    try:
        env.reset()
        agent = env.run_command("\n".join([*_LEFTOVERS, "id -u"]))
        _, reward, _, _, info = env.step("submit")
    finally:
        env.close()
    seen = info["test_results"][0]["output"]
    assert not [n for n in range(1001, 1006) if f"sleep {n}" in seen]
    if backend == "docker" or os.geteuid() == 0:  # an unprivileged user has one uid to give
        assert seen.split()[0] != agent.output.split()[-1]  # a grader the agent never was
    assert reward == 0.0


_TAMPER = r"""cat > prog.sh <<'SH'
#!/bin/sh
# forge a status line wherever one might be read, and keep writing after this test ended
n=$(cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\0' '\n' | grep -o '__gemkit_status_[0-9a-f]*' | head -n 1)
printf '\n%s 0 0 0\n' "$n"
( for i in 1 2 3 4 5 6 7 8 9 10; do
    for f in /proc/[0-9]*/fd/1; do printf '\n%s 0 0 0\n' "$n" > "$f"; done 2>/dev/null
    touch /tmp/planted; sleep 0.2
  done ) >/dev/null 2>&1 &
exit 0
SH
chmod +x prog.sh"""


def test_a_process_left_by_a_test_cannot_forge_or_touch_a_later_test(backend):
    task = custom(
        "TamperProbe",
        {"name": "runs the program", "run": "/work/prog.sh; exit 1"},
        {"name": "a clean /tmp", "run": 'sleep 1; ls -A /tmp; test -z "$(ls -A /tmp)"'},
        {"name": "runs it again", "run": "/work/prog.sh; sleep 1; exit 1"},
    )
    _, info, _ = play(backend, task, _TAMPER)
    assert [t["passed"] for t in info["test_results"]] == [False, True, False]


_FAKE_TOOLS = r"""echo wrong > counts.txt
cat > cat <<'SH'
#!/bin/sh
printf 'a 2\nand 1\ncat 2\ndog 2\nlog 1\nmat 1\non 2\nsat 2\nthe 4\n'
SH
chmod +x cat && mkdir -p bin .local/bin && for p in bin/cat .local/bin/cat sh cmp; do cp cat $p; done
printf 'cat() { /work/cat; }\nalias cat=/work/cat\nPATH=/work:$PATH\nexport PATH\n' > .profile
for f in .ashrc .bashrc .shinit .env .kshrc; do cp .profile $f; done
printf '/work/fake.so\n' > ld.so.preload"""


def test_a_status_line_forged_in_the_output_is_not_the_one_read(docker_backend):
    t = DockerTerminal()
    t.start()
    try:
        # the runner's nonce is in its command line, which the agent can read
        r = t.run(
            "n=$(cat /proc/[0-9]*/cmdline | tr '\\0' '\\n' | grep -o '__gemkit_status_[0-9a-f]*' |"
            " head -n 1); printf 'x\\n%s 0 2 0\\n' \"$n\"; exit 3"
        )
    finally:
        t.close()
    assert r.exit_code == 3 and "__gemkit_status_" in r.output


def test_a_malformed_status_line_is_no_status():
    nonce = "__gemkit_status_ab"
    assert _split_status(b"out\n__gemkit_status_ab 0 3 0\n", nonce) == (b"out", [0, 3, 0])
    # a status the runner could not finish (`wc` found no process slot) reads as none
    assert _split_status(b"out\n__gemkit_status_ab 0  0\n", nonce) is None
    assert _split_status(b"out\n__gemkit_status_ab 0 x 0\n", nonce) is None
    assert _split_status(b"no status at all", nonce) is None


def test_files_on_the_path_rc_files_and_fake_tools_do_not_reach_the_tests(backend):
    env = TerminalEnv("CountWords", backend=backend)
    try:
        env.reset()
        env.run_command(_FAKE_TOOLS)
        fake = env.run_command("./cat")
        _, reward, _, _, info = env.step("submit")
    finally:
        env.close()
    assert fake.output.startswith("a 2\nand 1\n")  # the fake works where it is called
    assert (reward, info["success"]) == (0.0, False)


# -- limits on the whole work area ------------------------------------------------------------


def test_the_disk_bound_holds_for_all_files_of_a_folder_together(backend):
    # disk_mb bounds /work and /tmp each (docs/terminal.md), so the two together hold 2x
    env = TerminalEnv("CountWords", backend=backend, disk_mb=4)
    try:
        env.reset()
        sizes = {}
        for where in ("/work", "/tmp"):
            env.run_command(
                f"for i in 1 2 3; do head -c 3000000 /dev/zero > {where}/big$i; done; true"
            )
            sizes[where] = int(env.run_command(f"cat {where}/big* | wc -c").output)
    finally:
        env.close()
    # before: 9000000 bytes in each on bwrap (the limit held per file only)
    assert all(n <= 4 * 1024 * 1024 for n in sizes.values()), sizes
    assert sum(sizes.values()) <= 2 * 4 * 1024 * 1024


def test_the_number_of_files_is_bounded(backend):
    env = TerminalEnv("CountWords", backend=backend, max_files=300)
    try:
        env.reset()
        files = env.run_command(
            "i=0; while [ $i -lt 1000 ] && (: > /work/f$i) 2>/dev/null; do i=$((i+1)); done; echo $i"
        )
    finally:
        env.close()
    assert int(files.output.split()[-1]) < 300


def test_a_long_output_never_lands_on_the_hosts_disk(bwrap_backend):
    t = BwrapTerminal()
    t.start()
    peak = [0]
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            used = sum(f.stat().st_size for f in t.root.rglob("*") if f.is_file())
            peak[0] = max(peak[0], used)
            time.sleep(0.01)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        r = t.run("yes | head -c 30000000; sleep 0.5", timeout=60)
    finally:
        stop.set()
        watcher.join()
        t.close()
    # before: the whole output went to a file in the terminal's host folder first
    assert r.output_bytes == 30_000_000 and peak[0] == 0


# -- what the agent can see ---------------------------------------------------------------


def test_gemkits_own_folders_hide_the_shipped_tests_when_they_would_be_visible():
    assert any(str(TASKS_DIR).startswith(d + "/") for d in SECRET_DIRS)
    assert hidden_dirs(["/usr"], ["/usr/lib/python3/dist-packages/gemkit"]) == [
        "/usr/lib/python3/dist-packages/gemkit"
    ]
    assert hidden_dirs(["/usr"], ["/home/someone/gemkit"]) == []


@pytest.fixture
def shared() -> Iterator[Path]:
    """A host folder outside /tmp (the sandbox's own /tmp would cover it), removed after."""
    folder = Path(tempfile.mkdtemp(prefix="gemkit-shared-", dir="/var/tmp"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder)


def test_a_secret_folder_under_a_bound_path_is_empty_in_the_sandbox(
    bwrap_backend, shared, monkeypatch
):
    (shared / "gemkit" / "tasks").mkdir(parents=True)
    (shared / "gemkit" / "tasks" / "count_words.yaml").write_text("solution: secret\n")
    (shared / "public.txt").write_text("public\n")
    monkeypatch.setattr(bwrap, "BWRAP_RO", (*bwrap.BWRAP_RO, str(shared)))
    monkeypatch.setattr(bwrap, "SECRET_DIRS", (str(shared / "gemkit"),))
    t = BwrapTerminal()
    t.start()
    try:
        public = t.run(f"cat {shared}/public.txt")
        secret = t.run(f"ls -A {shared}/gemkit; cat {shared}/gemkit/tasks/count_words.yaml")
        write = t.run(f"echo x > {shared}/gemkit/x")
    finally:
        t.close()
    assert public.output == "public\n"
    assert "secret" not in secret.output and secret.exit_code != 0
    assert write.exit_code != 0


def test_the_hosts_environment_never_reaches_the_terminal(backend, monkeypatch):
    # before: in bwrap without root, /proc/1/environ (bwrap itself) held gemkit's environment
    monkeypatch.setenv("GEMKIT_PROBE_API_KEY", "sk-probe-4242")
    env = TerminalEnv("CountWords", backend=backend)
    try:
        env.reset()
        seen = env.run_command("env; cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n'")
    finally:
        env.close()
    assert "sk-probe-4242" not in seen.output and "PATH=" in seen.output


def test_an_episode_cannot_see_another_episodes_files_or_processes(backend):
    first, second = (
        TerminalEnv("CountWords", backend=backend),
        TerminalEnv("CountWords", backend=backend),
    )
    try:
        first.reset()
        second.reset()
        first.run_command("echo mark > /work/mark-4711 && echo mark > /tmp/mark-4711")
        first.run_command("sleep 4711 >/dev/null 2>&1 &")
        seen = second.run_command(
            "ls -A /work /tmp; cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '"
        )
    finally:
        first.close()
        second.close()
    assert "4711" not in seen.output
