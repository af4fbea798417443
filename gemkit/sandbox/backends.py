"""How a sandboxed interpreter is launched: bubblewrap, unshare, or (opt-in only) unsafe-local.

Each backend turns a supervisor config into a command line. The supervisor (`worker.py` and
the files `worker_source` joins to it) then runs every piece of user code in a forked child
with resource limits and, where the backend allows it, under an unprivileged uid of its own,
under a system-call filter, and in the sandbox's memory cgroup. gemkit's own installed packages
(with their task data, tests and reference solutions) and any path the host names as hidden
are covered inside the sandbox.
"""

from __future__ import annotations

import functools
import importlib.util
import itertools
import json
import os
import platform
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from gemkit.errors import GemkitError

BACKENDS = ("bwrap", "unshare", "unsafe-local")
WORKDIR = "/sandbox"
#: host paths every sandbox sees read-only (when they exist)
SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
ETC_PATHS = (
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/alternatives",
    "/etc/ssl",
    "/etc/ca-certificates",
)
ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": WORKDIR,
    "TMPDIR": "/tmp",
    "LANG": "C.UTF-8",
    "USER": "sandbox",  # getpass.getuser() reads these first: there is no /etc/passwd
    "LOGNAME": "sandbox",
    "PYTHONDONTWRITEBYTECODE": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}
#: for the supervisor alone (it takes them out of its environment before any child starts):
#: every symbol bound at start-up, so that no forked child binds one lazily and copies the pages
#: that binding writes
SUPERVISOR_ENV = {"LD_BIND_NOW": "1"}
PIVOT_ROOT_SYSCALL = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "ppc64le": 203, "s390x": 217}
# code runs under uids from this range, one per sandbox process, so that the kernel's per-uid
# process count (RLIMIT_NPROC) is counted per sandbox and never against root, which it exempts
UID_BASE = 1_000_000
UID_SPAN = 1_000_000_000
_uid_counter = itertools.count()


class SandboxUnavailableError(GemkitError):
    """No isolating backend works on this machine (and unsafe-local was not chosen)."""


@dataclass
class LaunchSpec:
    """A command that starts the supervisor, and the config it was given."""

    argv: list[str]
    config: dict
    cwd: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    cleanup: list[str] = field(default_factory=list)
    #: descriptors the supervisor inherits (the memory cgroup's files)
    pass_fds: tuple[int, ...] = ()


def next_uid() -> int:
    """A uid no other running sandbox of this host is likely to use."""
    return UID_BASE + (os.getpid() * 4096 + next(_uid_counter) % 4096) % UID_SPAN


def python_paths(python: str) -> list[str]:
    """Directories the interpreter needs: its prefix, base prefix and the venv it lives in."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    exe = Path(python)
    paths.add(str(exe.parent.parent))
    resolved = exe.resolve()
    paths.add(str(resolved.parent.parent))
    return sorted(p for p in paths if p and os.path.isdir(p) and p != "/")


def shared_paths(python: str, ro_paths: list[str]) -> list[str]:
    """Host paths bound read-only beside the system directories; refuse ones the sandbox hides.

    Paths inside /tmp (a virtualenv in a checkout there) are bound over the sandbox's own
    fresh /tmp; /tmp itself, /proc, /dev and the work directory cannot be shared.
    """
    paths = [
        p
        for p in _minimal_paths([*python_paths(python), *ro_paths])
        if not any(p == s or p.startswith(s + "/") for s in SYSTEM_PATHS)
    ]
    hidden = [
        p
        for p in paths
        if p in ("/tmp", WORKDIR) or p.startswith((WORKDIR + "/", "/proc/", "/dev/"))
    ]
    if hidden:
        raise SandboxUnavailableError(
            f"{', '.join(hidden)} would be hidden inside the sandbox (its /tmp, /proc, /dev and "
            f"{WORKDIR} are its own); install the interpreter or virtualenv elsewhere or pass "
            "python= one that lives outside those folders"
        )
    return paths


#: gemkit's packages, whose folders (data files included) the code must never see
PACKAGES = ("gemkit", "gemkit.envs", "gemkit.synth")


@functools.cache
def package_dirs() -> tuple[str, ...]:
    """The folders gemkit's packages are imported from on this host (found, not imported)."""
    dirs: list[str] = []
    for name in PACKAGES:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        if spec is not None and spec.submodule_search_locations:
            dirs += [str(p) for p in spec.submodule_search_locations]
    return tuple(dirs)


def masked_paths(python: str, shared: list[str], hidden: tuple[str, ...]) -> list[str]:
    """The paths to cover inside the sandbox: gemkit's package folders and `hidden`, each
    where the sandbox would otherwise see it (inside a system or shared path)."""
    visible = [*SYSTEM_PATHS, *shared, *ETC_PATHS]
    out = []
    for path in [*package_dirs(), *hidden]:
        for p in {os.path.abspath(path), os.path.realpath(path)}:
            if os.path.lexists(p) and not os.path.islink(p):
                if any(p == v or p.startswith(v.rstrip("/") + "/") for v in visible):
                    out.append(p)
    out = _minimal_paths(out)
    exe = os.path.realpath(python)
    needed = [p for p in out if exe.startswith(p + "/") or p in python_paths(python)]
    if needed:
        raise SandboxUnavailableError(
            f"{', '.join(needed)} cannot be hidden: the interpreter the sandbox runs lives there"
        )
    return out


#: the supervisor's source files, in the order their definitions need (`worker.py` runs `main`)
WORKER_FILES = ("wire.py", "child.py", "supervisor.py", "seccomp.py", "worker.py")


@functools.cache
def worker_source() -> str:
    """The supervisor's program: its files joined in order, less their imports of each other.

    The sandbox's interpreter cannot import gemkit (its packages are hidden there), so the
    files run as one module; `from __future__ import annotations` opens it once.
    """
    import ast

    parts = ["from __future__ import annotations\n"]
    for name in WORKER_FILES:
        text = Path(__file__).with_name(name).read_text(encoding="utf-8")
        lines = text.splitlines(keepends=True)
        for node in reversed(ast.parse(text).body):
            if (
                isinstance(node, ast.ImportFrom)
                and node.module
                and (node.module == "__future__" or node.module.startswith("gemkit.sandbox."))
            ):
                del lines[node.lineno - 1 : node.end_lineno]
            elif isinstance(node, ast.Import | ast.ImportFrom) and any(
                (getattr(node, "module", None) or a.name).startswith("gemkit") for a in node.names
            ):
                raise RuntimeError(
                    f"{name}:{node.lineno}: the supervisor may import no gemkit module"
                )
        parts.append("".join(lines))
    return "\n".join(parts)


def _bootstrap() -> str:
    """The `-c` program that starts the supervisor from its source (argv[1]).

    A forked child compiles the source and hands back the code as marshal data: compiling 40 KB
    of Python leaves over a megabyte of fragmented heap behind, and every page of the
    supervisor's heap costs on each call (each fork copies its page tables, each child unmaps
    them). The source is compiled under a marker filename, so the supervisor's frames can be
    hidden from tracebacks.
    """
    return (
        "import os,sys,marshal\n"
        "r,w=os.pipe()\n"
        "if os.fork()==0:\n"
        " os.close(r)\n"
        " v=memoryview(marshal.dumps(compile(sys.argv[1],'<gemkit-sandbox>','exec')))\n"
        " while v:v=v[os.write(w,v):]\n"
        " os._exit(0)\n"
        "os.close(w);c=[]\n"
        "while 1:\n"
        " d=os.read(r,1<<16)\n"
        " if not d:break\n"
        " c.append(d)\n"
        "os.close(r);os.wait();del sys.argv[1]\n"
        "exec(marshal.loads(b''.join(c)),{'__name__':'__main__','__builtins__':__builtins__})\n"
    )


@functools.cache
def site_setup(python: str) -> dict | None:
    """What `site` sets up in `python` at start-up: sys.path and the prefixes (None if unknown).

    Read once per interpreter. The supervisor starts without `site` (`-S`) and takes these
    as they are: the modules that .pth files import (an editable install's finder pulls in
    pathlib, re, urllib...) would otherwise sit in its heap, and every page of that heap costs
    on each call. The .pth files' import lines still run, in a call whose import finds nothing
    without them (see `worker._SiteOnMiss`).
    """
    code = (
        "import sys,json;print(json.dumps({'path':sys.path,'prefix':sys.prefix,"
        "'exec_prefix':sys.exec_prefix}))"
    )
    try:
        out = subprocess.run(
            [python, "-I", "-c", code], capture_output=True, text=True, timeout=60, env={}
        )
        info = json.loads(out.stdout)
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    if out.returncode != 0 or not isinstance(info, dict) or not isinstance(info.get("path"), list):
        return None
    return info


def _python_argv(python: str, config: dict) -> list[str]:
    """The interpreter's command line that starts the supervisor with `config`."""
    site = site_setup(python)
    flags = ["-I"]
    if site is not None:
        config["site"] = site
        flags.append("-S")
    return [python, *flags, "-c", _bootstrap(), worker_source(), json.dumps(config)]


@functools.cache
def _bwrap_features() -> frozenset[str]:
    exe = shutil.which("bwrap")
    if exe is None:
        return frozenset()
    try:
        out = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return frozenset()
    text = out.stdout + out.stderr
    flags = {"--size", "--perms", "--disable-userns", "--cap-add", "--unshare-cgroup-try"}
    return frozenset({"bwrap", *(f for f in flags if f in text)})


def _minimal_paths(paths: list[str]) -> list[str]:
    """Drop paths that lie inside another path of the list."""
    out: list[str] = []
    for p in sorted(set(paths), key=len):
        if not any(p == q or p.startswith(q.rstrip("/") + "/") for q in out):
            out.append(p)
    return sorted(out)


def bwrap_command(
    python: str,
    config: dict,
    *,
    disk_mb: int,
    ro_paths: list[str],
    hidden: tuple[str, ...] = (),
) -> LaunchSpec:
    """The bubblewrap command line for one supervisor."""
    feats = _bwrap_features()
    exe = shutil.which("bwrap") or "bwrap"
    root = os.geteuid() == 0
    argv = [
        exe,
        "--unshare-net",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--die-with-parent",
        "--new-session",
        "--hostname",
        "sandbox",
    ]
    if "--unshare-cgroup-try" in feats:
        argv.append("--unshare-cgroup-try")
    if root:
        # privileged mode: no user namespace; the supervisor keeps only the capabilities it
        # needs to drop each child to its own unprivileged uid and to clean up after it
        argv += ["--cap-drop", "ALL"]
        for cap in (
            "CAP_SETUID",
            "CAP_SETGID",
            "CAP_KILL",
            "CAP_CHOWN",
            "CAP_DAC_OVERRIDE",
            "CAP_FOWNER",
        ):
            argv += ["--cap-add", cap]
        config["uid"] = config["gid"] = next_uid()
    else:
        argv.append("--unshare-user")
        if "--disable-userns" in feats:
            argv.append("--disable-userns")
        config["drop_caps"] = True
    made: set[str] = set()

    def parents(path: str) -> None:
        # bwrap would create missing parents as 0700 in privileged mode: the dropped uid could
        # not traverse them, so make them 0755 first
        parts = Path(path).parts[1:-1]
        cur = ""
        for part in parts:
            cur += "/" + part
            if cur in made or cur in SYSTEM_PATHS:
                continue
            made.add(cur)
            argv.extend((["--perms", "0755"] if "--perms" in feats else []) + ["--dir", cur])

    for path in SYSTEM_PATHS:
        if os.path.islink(path):
            argv += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            argv += ["--ro-bind", path, path]
    shared = shared_paths(python, ro_paths)
    # a virtualenv under /tmp (a CI checkout there) is bound over the sandbox's fresh /tmp below
    in_tmp = [p for p in shared if p.startswith("/tmp/")]
    for path in shared:
        if path not in in_tmp:
            parents(path)
            argv += ["--ro-bind", path, path]
    for path in ETC_PATHS:
        if os.path.exists(path):
            parents(path)
            argv += ["--ro-bind", path, path]
    argv += ["--proc", "/proc", "--dev", "/dev"]
    for mount, mode in (("/tmp", "1777"), (WORKDIR, "0777")):
        if "--perms" in feats:
            argv += ["--perms", mode]
        if "--size" in feats:
            argv += ["--size", str(disk_mb * 1024 * 1024)]
        argv += ["--tmpfs", mount]
    if "--perms" not in feats:
        argv += ["--chmod", "1777", "/tmp", "--chmod", "0777", WORKDIR]
    for path in in_tmp:
        parents(path)
        argv += ["--ro-bind", path, path]
    for path in masked_paths(python, shared, hidden):
        if os.path.isdir(path):
            argv += ["--tmpfs", path, "--remount-ro", path]
        else:
            argv += ["--ro-bind", "/dev/null", path]
    # nothing but /tmp and the working directory is writable: both are emptied after each call
    argv += ["--remount-ro", "/"]
    argv += ["--chdir", WORKDIR, "--clearenv"]
    for key, value in {**ENV, **SUPERVISOR_ENV}.items():
        argv += ["--setenv", key, value]
    # the wipe after each call empties /tmp but keeps these binds and the folders leading to them
    config.update(workdir=WORKDIR, scratch=["/tmp"], keep=in_tmp, pidns=True, seccomp=True)
    argv += _python_argv(python, config)
    return LaunchSpec(argv=argv, config=config, pass_fds=_memcg_fds(config))


def unshare_command(
    python: str,
    config: dict,
    *,
    disk_mb: int,
    ro_paths: list[str],
    hidden: tuple[str, ...] = (),
) -> LaunchSpec:
    """The util-linux `unshare` command line; the supervisor builds its own root and pivots."""
    exe = shutil.which("unshare") or "unshare"
    root = os.geteuid() == 0
    argv = [exe]
    if not root:
        argv += ["--user", "--map-root-user"]
    argv += [
        "--mount",
        "--net",
        "--pid",
        "--ipc",
        "--uts",
        "--cgroup",
        "--fork",
        "--kill-child",
        "--propagation",
        "private",
    ]
    if root:
        config["uid"] = config["gid"] = next_uid()
    else:
        config["drop_caps"] = True
    shared = shared_paths(python, ro_paths)
    ro = [p for p in SYSTEM_PATHS if os.path.exists(p)]
    ro += shared
    ro += [p for p in ETC_PATHS if os.path.exists(p)]
    config.update(
        workdir=WORKDIR,
        scratch=["/tmp"],
        keep=[p for p in ro if p.startswith("/tmp/")],
        pidns=True,
        seccomp=True,
        setup={
            "ro_paths": ro,
            "hidden": masked_paths(python, shared, hidden),
            "disk_bytes": disk_mb * 1024 * 1024,
            "pivot_root": PIVOT_ROOT_SYSCALL.get(platform.machine()),
        },
    )
    argv += _python_argv(python, config)
    return LaunchSpec(
        argv=argv, config=config, env={**ENV, **SUPERVISOR_ENV}, pass_fds=_memcg_fds(config)
    )


def _memcg_fds(config: dict) -> tuple[int, ...]:
    memcg = config.get("memcg")
    return (memcg["procs"], memcg["events"]) if memcg else ()


def unsafe_local_command(python: str, config: dict, *, workdir: str) -> LaunchSpec:
    """No isolation but resource limits: the code runs as this user in a temp directory."""
    config.update(workdir=workdir, scratch=[], pidns=False)
    env = {**ENV, "HOME": workdir, "TMPDIR": workdir, **SUPERVISOR_ENV}
    argv = _python_argv(python, config)
    return LaunchSpec(argv=argv, config=config, cwd=workdir, env=env, cleanup=[workdir])


@functools.cache
def probe(backend: str, python: str) -> str | None:
    """Try a backend once; None if it works, else the reason it does not."""
    try:
        if backend == "bwrap":
            if "bwrap" not in _bwrap_features():
                return "bwrap is not installed (Debian/Ubuntu: apt-get install bubblewrap)"
            spec = bwrap_command(python, {}, disk_mb=1, ro_paths=[])
        elif backend == "unshare":
            if shutil.which("unshare") is None:
                return "unshare (util-linux) is not installed"
            if platform.machine() not in PIVOT_ROOT_SYSCALL:
                return f"unshare backend does not know pivot_root on {platform.machine()}"
            spec = unshare_command(python, {}, disk_mb=1, ro_paths=[])
        else:
            return None
    except SandboxUnavailableError as e:
        return f"{backend}: {e}"
    # the supervisor answers "ready" on stdout once its sandbox is built
    try:
        out = subprocess.run(
            spec.argv, input=b"", capture_output=True, timeout=30, env=spec.env or {}
        )
    except (OSError, subprocess.SubprocessError) as e:
        return f"{backend} failed to start: {e}"
    if b"ready" not in out.stdout:
        err = out.stderr.decode("utf-8", "replace").strip().splitlines()
        return f"{backend} failed to start: {err[-1] if err else 'no output'}"
    return None


def choose_backend(requested: str, python: str) -> str:
    """Resolve `auto` to the first working isolating backend; refuse if there is none."""
    if requested not in (*BACKENDS, "auto"):
        raise SandboxUnavailableError(
            f"unknown sandbox backend {requested!r}; expected 'auto', 'bwrap', 'unshare' or "
            "'unsafe-local'"
        )
    if requested == "unsafe-local":
        return requested
    candidates = ("bwrap", "unshare") if requested == "auto" else (requested,)
    reasons = []
    for name in candidates:
        why = probe(name, python)
        if why is None:
            return name
        reasons.append(why)
    raise SandboxUnavailableError(
        "no sandbox backend works here: "
        + "; ".join(reasons)
        + ". Install bubblewrap (apt-get install bubblewrap), or, only for code you trust, "
        "pass backend='unsafe-local' to run it unisolated with resource limits only."
    )
