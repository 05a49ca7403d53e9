"""Bubblewrap backend: the default on Linux (Debian package ``bubblewrap``).

Each run gets new user, PID, network, IPC, UTS and cgroup namespaces (only ``lo``: connect fails with
ENETUNREACH), a root made of read-only binds of exactly what the interpreter loads (not ``/``: the sandbox
user may map to host root, so binding ``/`` would expose ``/root``), a private size-capped ``/tmp``, a
fresh ``/proc`` and ``/dev``, and a scrubbed environment; the sandbox's own root is remounted read-only
(otherwise it is a writable, unbounded tmpfs). When the caller is root, bubblewrap itself is
started under a throw-away unprivileged host uid (one per concurrent run): RLIMIT_NPROC is not enforced
for root, and an unprivileged owner also cannot read root's files even through ``/proc``. Inside, the
program runs as uid 65534 (nobody) with no capabilities and nested user namespaces disabled.

What the root holds is the interpreter's binary, its standard library's folders and, file by file, the
shared libraries it and its extension modules link (:mod:`.interpreter`; not the host's library folders,
and not OpenSSL's libraries: no network, and ``hashlib`` uses its built-in algorithms). What a program can
still learn of the host, and why it stays: the kernel's version and command line (``uname()`` is answered
by the kernel whatever is mounted, so hiding ``/proc/version`` and ``/proc/cmdline`` would hide nothing);
the name of its run folder and its slot uid (``/proc/self/mountinfo`` lists the source of every mount and
the owner of the tmpfs mounts, and ``/proc`` is mounted because interpreters and libraries read it). None
of them is a secret: the folder name is the host process's pid and a random suffix, and the slot uid
owns nothing outside the sandbox.

Memory the rlimits cannot see is capped too: ``/dev/shm`` and ``/tmp`` are their own size-capped tmpfs, a
seccomp filter (:mod:`.seccomp`) refuses memfd, SysV IPC and sockets, ``RLIMIT_NOFILE`` bounds pipe and
socket buffers, and, as root, each run gets its own cgroup (:mod:`.cgroup`) that charges everything
(tmpfs, shm, kernel memory) to the memory limit and caps processes. Without cgroups (not root, or no
writable cgroupfs) what stays uncovered: the count of empty files in ``/tmp`` and kernel objects in
general, which are then bounded only by the time limit.

What the guarantees cost per run (CPU of the run's processes, A/B on the 2-core VM, heavily loaded, so
roughly twice an idle machine's): bubblewrap itself, i.e. its namespaces and the root built from
read-only binds, ~17 ms over a bare interpreter; within that the network namespace ~1.7 ms, ``/dev`` and
``/proc`` ~1.6 ms, the unprivileged slot uid (``setpriv``, one more exec) ~1.4 ms, the capped tmpfs
mounts and the second user namespace (uid 65534, no nested namespaces) ~0.4 ms each; the seccomp filter
and the per-run cgroup (joined by the starting thread, see :mod:`.cgroup`) are within the noise.

Where a run's wait goes, and what warm spares (:mod:`.spares`) leave of it (same VM at load 3-4,
``run("pass")``, medians of 30, bare ``python -I -S -c pass`` 17.6-17.8 ms):

=====================================================  ===========  ================
stage                                                  cold start   on a warm spare
=====================================================  ===========  ================
run folder (tmpfs), cgroup mkdir + limits               1.1 ms       0.5 ms (fill, limits)
start: thread into the cgroup, vfork, setpriv exec      4.6 ms       ahead of the run
bwrap set-up, dash, interpreter up to the program       ~35 ms       ahead of the run
program, interpreter exit, namespaces torn down         ~8 ms        ~15 ms (see below)
kill check, reap, cgroup rmdir, folder removed          0.7 ms       0.6 ms
caller waits                                            55.6 ms      17.5 ms
=====================================================  ===========  ================

The two columns come from separate runs (load 3 and 4); the warm one's ~15 ms runs from the arguments
sent to the monitor's exit (the process backend: 9.8 ms), the cold one's ~8 ms from the program's first
line to the exit. The CPU per run does not change: the start-up is moved ahead, not removed. Children's
CPU +12.7 ms over bare at load 3 (bwrap +5 ms for its exec, the user and mount namespaces and binds, the
rest as listed above), plus 3.2 ms of the host's own (1.7 ms starting the spare: cgroup 0.6, start 0.7;
1.3 ms running it; 0.2 ms releasing it). Measured alternatives, not taken: ``Popen(user=)`` instead of
``setpriv`` +14.6 against +12.7 ms (no gain at a small host, and it rules out ``vfork`` for a large one);
a tmpfs ``/dev`` with four device binds instead of ``--dev`` 28.9 against 29.4 ms CPU at load 8 (noise);
no network namespace -1.1 ms (kept: it is the guard where the seccomp filter has no table).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from pathlib import Path

from lopd_envs.sandbox import interpreter, seccomp
from lopd_envs.sandbox.base import (
    BOOTSTRAP,
    INIT_BOOTSTRAP,
    SPARE_BOOTSTRAP,
    UIDS,
    Limits,
    RunResult,
    as_root,
    scrubbed_env,
)
from lopd_envs.sandbox.spares import MAX_AGE, Command, SpareSandbox

WORKDIR = "/sandbox"


class BubblewrapSandbox(SpareSandbox):
    name = "bubblewrap"
    isolating = True

    def __init__(self, limits: Limits | None = None, python: interpreter.Interpreter | None = None,
                 extra_ro_binds: dict[str, str] | None = None, spares: int | None = None, max_age: float = MAX_AGE):
        problem = self.probe()
        if problem:
            from lopd_envs.sandbox.base import SandboxUnavailable
            raise SandboxUnavailable(problem)
        super().__init__(limits, spares, max_age)
        self.python = python or interpreter.resolve(as_root())
        self.extra_ro_binds = dict(extra_ro_binds or {})

    def argv(self, wd: Path, limits: Limits, seccomp_fd: int | None = None, as_pid_1: bool = False,
             spare: bool = False, program_is_init: bool = False) -> list[str]:
        """The full bwrap command line for one run (public so tests can show what is isolated).
        ``seccomp_fd``: an inherited fd holding the filter of :mod:`.seccomp` (one per run).
        ``as_pid_1``: no bwrap reaper in the PID namespace; our own init is (see :data:`INIT`). bwrap's
        reaper hands its exit status to the outer bwrap through an eventfd, and the outer one exits without
        waiting for it, leaving a ``[bwrap] <defunct>`` for the host's PID 1 on every run; with our init
        the outer bwrap waits for a real exit. ``spare``: the bootstrap waits for its arguments on stdin
        (:data:`~lopd_envs.sandbox.base.SPARE_BOOTSTRAP`, see :meth:`bootstrap_args`). ``program_is_init``:
        the program itself is the PID namespace's init (implies ``as_pid_1``; no dash, no fork): nothing it
        starts can signal it (an init drops the signals it has no handler for when they come from inside its
        namespace, SIGKILL and SIGSTOP included), and once it dies everything inside does. It must reap its
        own children. A session worker that runs untrusted checks as children uses it (see :mod:`.session`)."""
        as_pid_1 = as_pid_1 or program_is_init
        cmd = ["bwrap", "--unshare-all", "--unshare-user", "--disable-userns", "--uid", "65534", "--gid", "65534",
               *(["--as-pid-1"] if as_pid_1 else []), "--die-with-parent", "--new-session", "--hostname", "sandbox",
               "--cap-drop", "ALL"]
        for target, link in self.python.symlinks:
            cmd += ["--symlink", target, link]
        cmd += mounts(self.python, tuple(self.extra_ro_binds))
        for src, dest in self.extra_ro_binds.items():
            cmd += ["--ro-bind", src, dest]
        shell = init_shell(self.python) if as_pid_1 and not program_is_init else None
        if shell is not None:
            cmd += ["--ro-bind", shell, shell]
        tmpfs = str(max(limits.file_size, 1 << 20))
        # /dev/shm is a folder of the /dev tmpfs (uncapped) unless it is its own capped tmpfs
        cmd += ["--proc", "/proc", "--dev", "/dev", "--size", tmpfs, "--tmpfs", "/dev/shm",
                "--size", tmpfs, "--tmpfs", "/tmp",
                "--ro-bind", str(wd), WORKDIR, "--remount-ro", "/", "--chdir", WORKDIR, "--clearenv"]
        for key, value in scrubbed_env("/tmp").items():
            cmd += ["--setenv", key, value]
        if seccomp_fd is not None:
            cmd += ["--seccomp", str(seccomp_fd)]
        cmd += ["--", *([shell, "-c", INIT, "init"] if shell is not None else []), self.python.executable, "-I",
                "-S", "-c", SPARE_BOOTSTRAP if spare else INIT_BOOTSTRAP if program_is_init else BOOTSTRAP,
                *([] if spare else self.bootstrap_args(wd, limits))]
        return cmd

    def spare_command(self, folder: Path, limits: Limits) -> Command:
        fd = seccomp.filter_fd()
        return Command(self.argv(folder, limits, fd, as_pid_1=True, spare=True), env={}, monitor=True,
                       pass_fds=() if fd is None else (fd,))

    def spare_key(self, limits: Limits) -> tuple:
        return (max(limits.file_size, 1 << 20), self.python, tuple(self.extra_ro_binds.items()), seccomp.program())

    def bootstrap_args(self, folder: Path, limits: Limits) -> list[str]:
        return [*limits.rlimit_args(), f"{WORKDIR}/main.py"]

    def checked(self, result: RunResult) -> RunResult:
        """bwrap's own start-up failures (``bwrap: ...`` on stderr) are the sandbox's error, not the program's."""
        if result.exit_code not in (0, None) and result.stderr.startswith("bwrap:"):
            return RunResult(result.stdout, result.stderr, result.exit_code, result.timed_out, False,
                             result.wall_time, self.name, self.isolating, error=result.stderr.strip()[:500])
        return result

    @classmethod
    def probe(cls) -> str | None:
        return _probe()


#: The PID namespace's init, run by :func:`init_shell`: start the program (its bootstrap) as an ordinary child,
#: wait, exit with its status (128 + signal when killed). The program must not be the init itself: an init
#: ignores the signals it has no handler for, even a SIGKILL it raises. Not ``exec`` (the program would be
#: PID 1) and not a background job (that would ignore SIGINT in the program). The bootstrap can be the init
#: too (it forks when it finds itself PID 1), but forking an interpreter costs the program's copy-on-write
#: faults on the whole heap: 6-9 ms CPU a run here, against ~1 ms for dash's fork.
INIT = '"$@"; exit $?'


@functools.cache
def init_shell(python: interpreter.Interpreter) -> str | None:
    """dash, where the host has it and it needs no library outside the interpreter's mounts (else ``None``:
    the bootstrap is the init). Only dash: it is small, and it does not turn the last command into an
    ``exec``, which would make the program PID 1."""
    for name in ("/usr/bin/dash", "/bin/dash", shutil.which("dash") or ""):
        if not name or not os.path.exists(name):
            continue
        real = os.path.realpath(name)
        if not interpreter.world_usable(real):
            continue
        if not interpreter.unmounted_libraries([real], python.paths):
            return real
    return None


@functools.cache
def mounts(python: interpreter.Interpreter, extra: tuple[str, ...] = ()) -> list[str]:
    """The ``--ro-bind`` arguments of the interpreter: its folders and binary at their host paths, and its
    shared libraries, with those that the compiled modules under the ``extra`` binds need (numpy: libstdc++,
    libgcc_s), through one gathered folder per library folder (:func:`.interpreter.library_binds`).
    Computed once per interpreter and set of extra binds."""
    libraries = set(python.libraries)
    if extra:
        libraries.update(interpreter.libraries_under(extra, python.paths))
    args = []
    for path in python.paths:
        if path not in libraries:
            args += ["--ro-bind", path, path]
    for src, dest in interpreter.library_binds(sorted(libraries)):
        args += ["--ro-bind", src, dest]
    return args


@functools.cache
def _probe() -> str | None:
    """Check once that bwrap exists and can create the namespaces (containers often forbid it)."""
    if not shutil.which("bwrap"):
        return "bwrap is not installed (Debian/Ubuntu: apt-get install bubblewrap)"
    try:
        python = interpreter.resolve(as_root())
    except RuntimeError as exc:
        return str(exc)
    uid = UIDS.acquire() if as_root() else None
    try:
        ids = {"user": uid, "group": uid, "extra_groups": []} if uid is not None else {}
        args = ["bwrap", "--unshare-all", "--unshare-user", "--disable-userns", "--uid", "65534", "--gid", "65534",
                "--as-pid-1", "--die-with-parent"]
        for target, link in python.symlinks:
            args += ["--symlink", target, link]
        args += mounts(python)
        args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--",
                 python.executable, "-I", "-S", "-c", "import json, math, re, collections; print('ok')"]
        out = subprocess.run(args, capture_output=True, text=True, timeout=30, env={}, **ids)
    except Exception as exc:  # noqa: BLE001
        return f"bwrap failed to start: {exc}"
    finally:
        if uid is not None:
            UIDS.release(uid)
    if out.returncode != 0 or out.stdout.strip() != "ok":
        return f"bwrap cannot create a sandbox here: {out.stderr.strip()[:300]}"
    return None
