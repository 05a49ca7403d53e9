"""A small seccomp filter for sandboxed programs, handed to bubblewrap as ``--seccomp FD``.

Test programs compute; they never need memory the memory limit cannot see (``memfd_create``, SysV shared
memory, message queues and semaphores), network sockets (the network namespace is empty anyway), or the
kernel's rarer surfaces (``io_uring``, ``userfaultfd``, ``bpf``, ``perf_event_open``, keyrings, ``ptrace``,
mounts and namespaces, module loading). Those calls fail with ``EPERM``, which Python reports as an
``OSError`` the program may handle; everything else is allowed. ``socketpair`` and ``pipe`` stay (asyncio
and multiprocessing need them); their buffers are bounded by ``RLIMIT_NOFILE`` and the run's cgroup.

The filter is classic BPF written here directly (no libseccomp binding needed): check the architecture
(anything but the one the table is for is killed), refuse the x32 ABI, then compare the syscall number
with each denied one. Only x86-64 and aarch64 tables exist; elsewhere :func:`program` returns ``None`` and
runs go without the filter (the cgroup and rlimits still apply).
"""

from __future__ import annotations

import errno
import functools
import os
import platform
import struct

# struct sock_filter opcodes
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_RET_K = 0x06
_ALLOW = 0x7FFF0000
_KILL_PROCESS = 0x80000000
_ERRNO = 0x00050000
_NR, _ARCH = 0, 4  # offsets in struct seccomp_data

DENIED = ("memfd_create", "memfd_secret", "shmget", "shmat", "shmdt", "shmctl", "semget", "semop", "semctl",
          "semtimedop", "msgget", "msgsnd", "msgrcv", "msgctl", "socket", "io_uring_setup", "io_uring_enter",
          "io_uring_register", "userfaultfd", "bpf", "perf_event_open", "add_key", "request_key", "keyctl",
          "ptrace", "process_vm_readv", "process_vm_writev", "mount", "umount2", "pivot_root", "unshare",
          "setns", "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load", "swapon",
          "swapoff", "reboot", "acct", "quotactl", "open_by_handle_at", "name_to_handle_at", "fanotify_init",
          "move_mount", "fsopen", "fsmount", "open_tree")

_X86_64 = {"memfd_create": 319, "memfd_secret": 447, "shmget": 29, "shmat": 30, "shmdt": 67, "shmctl": 31,
           "semget": 64, "semop": 65, "semctl": 66, "semtimedop": 220, "msgget": 68, "msgsnd": 69, "msgrcv": 70,
           "msgctl": 71, "socket": 41, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
           "userfaultfd": 323, "bpf": 321, "perf_event_open": 298, "add_key": 248, "request_key": 249,
           "keyctl": 250, "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "mount": 165,
           "umount2": 166, "pivot_root": 155, "unshare": 272, "setns": 308, "init_module": 175,
           "finit_module": 313, "delete_module": 176, "kexec_load": 246, "kexec_file_load": 320, "swapon": 167,
           "swapoff": 168, "reboot": 169, "acct": 163, "quotactl": 179, "open_by_handle_at": 304,
           "name_to_handle_at": 303, "fanotify_init": 300, "move_mount": 429, "fsopen": 430, "fsmount": 432,
           "open_tree": 428}
_AARCH64 = {"memfd_create": 279, "memfd_secret": 447, "shmget": 194, "shmat": 196, "shmdt": 197, "shmctl": 195,
            "semget": 190, "semop": 193, "semctl": 191, "semtimedop": 192, "msgget": 186, "msgsnd": 189,
            "msgrcv": 188, "msgctl": 187, "socket": 198, "io_uring_setup": 425, "io_uring_enter": 426,
            "io_uring_register": 427, "userfaultfd": 282, "bpf": 280, "perf_event_open": 241, "add_key": 217,
            "request_key": 218, "keyctl": 219, "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271,
            "mount": 40, "umount2": 39, "pivot_root": 41, "unshare": 97, "setns": 268, "init_module": 105,
            "finit_module": 273, "delete_module": 106, "kexec_load": 104, "kexec_file_load": 294, "swapon": 224,
            "swapoff": 225, "reboot": 142, "acct": 89, "quotactl": 60, "open_by_handle_at": 265,
            "name_to_handle_at": 264, "fanotify_init": 262, "move_mount": 429, "fsopen": 430, "fsmount": 432,
            "open_tree": 428}
#: machine -> (AUDIT_ARCH_* value, syscall numbers, whether the x32 bit must be refused)
TABLES = {"x86_64": (0xC000003E, _X86_64, True), "aarch64": (0xC00000B7, _AARCH64, False)}


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def compile_filter(arch: int, numbers: dict[str, int], refuse_x32: bool, denied=DENIED) -> bytes:
    """The BPF program (``struct sock_filter[]`` bytes) denying ``denied`` with EPERM."""
    nrs = sorted({numbers[name] for name in denied if name in numbers})
    deny = _insn(_RET_K, _ERRNO | errno.EPERM)
    body = [_insn(_LD_W_ABS, _ARCH), _insn(_JEQ_K, arch, 1, 0), _insn(_RET_K, _KILL_PROCESS),
            _insn(_LD_W_ABS, _NR)]
    if refuse_x32:
        body += [_insn(_JGE_K, 0x40000000, 0, 1), deny]
    # one compare per denied number: equal -> jump to the shared deny at the end, else fall through
    for k, nr in enumerate(nrs):
        body.append(_insn(_JEQ_K, nr, len(nrs) - k, 0))
    body += [_insn(_RET_K, _ALLOW), deny]
    return b"".join(body)


@functools.cache
def program() -> bytes | None:
    """The filter for this machine, or ``None`` where no table exists (or ``LOPD_SANDBOX_SECCOMP=0``)."""
    if os.environ.get("LOPD_SANDBOX_SECCOMP", "1") == "0":
        return None
    table = TABLES.get(platform.machine())
    return compile_filter(*table) if table else None


def filter_fd() -> int | None:
    """A fresh read-only fd holding :func:`program` (bubblewrap reads it to the end, so one per run)."""
    prog = program()
    if prog is None:
        return None
    read, write = os.pipe()
    try:
        os.write(write, prog)  # a few hundred bytes: always fits the pipe buffer
    finally:
        os.close(write)
    return read
