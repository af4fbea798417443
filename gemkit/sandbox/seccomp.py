"""The system-call filter (a classic-BPF seccomp program) every process of a sandbox runs under."""

from __future__ import annotations

import struct

#: namespace flags of clone/unshare: NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID,
#: NEWNET, NEWTIME (0x80 is an exit signal above 64 in clone's flags, which clone refuses)
_NAMESPACE_FLAGS = 0x00020000 | 0x7E000000 | 0x00000080
#: system calls refused outright: keyrings (kept per uid by the kernel, so seen by every later
#: call), System V IPC and POSIX message queues (objects that outlive their processes), and
#: the kernel interfaces sandboxed code has no use for (io_uring, bpf, userfaultfd, perf)
_REFUSED = (
    "setns add_key request_key keyctl shmget msgget semget mq_open io_uring_setup bpf "
    "userfaultfd perf_event_open"
).split()
_GENERIC_SYSCALLS = {
    "clone": 220, "unshare": 97, "clone3": 435, "setns": 268, "add_key": 217,
    "request_key": 218, "keyctl": 219, "shmget": 194, "msgget": 186, "semget": 190,
    "mq_open": 180, "io_uring_setup": 425, "bpf": 280, "userfaultfd": 282,
    "perf_event_open": 241,
}  # fmt: skip
#: per machine: its AUDIT_ARCH value and system-call numbers
SYSCALLS = {
    "x86_64": (0xC000003E, {
        "clone": 56, "unshare": 272, "clone3": 435, "setns": 308, "add_key": 248,
        "request_key": 249, "keyctl": 250, "shmget": 29, "msgget": 68, "semget": 64,
        "mq_open": 240, "io_uring_setup": 425, "bpf": 321, "userfaultfd": 323,
        "perf_event_open": 298,
    }),
    "aarch64": (0xC00000B7, _GENERIC_SYSCALLS),
    "riscv64": (0xC00000F3, _GENERIC_SYSCALLS),
}  # fmt: skip
_EPERM, _ENOSYS = 1, 38


def seccomp_filter(machine: str) -> bytes | None:
    """The classic-BPF seccomp program for `machine` (None: no table for it).

    Refused with EPERM: any new namespace (a user namespace would hand the code a full set of
    capabilities), joining one, and the calls in `_REFUSED`. With ENOSYS: clone3, whose flags
    a filter cannot read (the C library then falls back to clone, whose flags it can), other
    ABIs (x32, 32-bit) whose numbers this table does not cover. Everything else is allowed.
    """
    if machine not in SYSCALLS:
        return None
    arch, nr = SYSCALLS[machine]
    ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    allow, errno = 0x7FFF0000, 0x00050000
    # (code, k, jump-if-true label, jump-if-false label); a label of None: the next one
    prog: list[tuple] = [(ld, 4, None, None), (jeq, arch, None, "nosys"), (ld, 0, None, None)]
    if machine == "x86_64":
        prog.append((jge, 0x40000000, "nosys", None))  # the x32 ABI
    refused = sorted(nr[name] for name in _REFUSED)
    prog.append((jge, min(refused + [nr["clone"], nr["unshare"]]), None, "allow"))
    prog += [(jeq, nr["clone3"], "nosys", None)]
    prog += [(jeq, nr[name], "flags", None) for name in ("clone", "unshare")]
    prog += [(jeq, n, "perm", None) for n in refused]
    labels = {"allow": len(prog)}
    prog.append((ret, allow, None, None))
    labels["flags"] = len(prog)
    # the flags are the first argument's low 32 bits (little-endian machines)
    prog += [(ld, 16, None, None), (jset, _NAMESPACE_FLAGS, "perm", None), (ret, allow, None, None)]
    labels["perm"] = len(prog)
    prog.append((ret, errno | _EPERM, None, None))
    labels["nosys"] = len(prog)
    prog.append((ret, errno | _ENOSYS, None, None))
    out = bytearray()
    for at, (code, k, yes, no) in enumerate(prog):
        jt = labels[yes] - at - 1 if yes else 0
        jf = labels[no] - at - 1 if no else 0
        out += struct.pack("=HBBI", code, jt, jf, k)
    return bytes(out)


def _install_seccomp(program: bytes) -> None:
    """Put this process (and every process it will fork) under `program`, for good."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    ulong = ctypes.c_ulong

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]

    prog = Program(len(program) // 8, program)
    # no_new_privs: lets a process without CAP_SYS_ADMIN install a filter; programs the code
    # starts gain no privilege from set-uid bits or file capabilities either
    if libc.prctl(38, ulong(1), ulong(0), ulong(0), ulong(0)) != 0:  # PR_SET_NO_NEW_PRIVS
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    if libc.prctl(22, ulong(2), ctypes.byref(prog), ulong(0), ulong(0)) != 0:  # SECCOMP_MODE_FILTER
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP): this kernel has no seccomp")
