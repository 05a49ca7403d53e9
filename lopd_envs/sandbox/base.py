"""The one interface every code-execution backend implements, and the pieces they share.

Untrusted code (model output) never runs in the caller's process: a backend starts a fresh interpreter,
behind as much isolation as the machine allows, feeds it ``stdin``, and collects capped output. The
limits are applied by a tiny bootstrap (:data:`BOOTSTRAP`) that runs *inside* the sandboxed interpreter
before the program, as hard rlimits the program cannot raise again. Setting them there rather than in a
``preexec_fn`` keeps the parent thread-safe (a worker pool starts many runs from threads at once).
"""

from __future__ import annotations

import math
import os
import shutil
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from lopd_envs.sandbox.folders import workdir

MiB = 1 << 20
#: A scorer's callback on the program's stdout chunks (its reply, if any, goes to the program's stdin).
#: Optional methods the runners call: ``deadline()`` (monotonic time by which the next record must come,
#: or None) and ``started()`` (the program has just been handed to a live sandbox: a clock starts here).
Interact = Callable[[bytes], bytes | None]
GiB = 1 << 30

#: Run inside the sandboxed interpreter via ``python -I -S -c BOOTSTRAP <limits...> <program>``.
#: argv: address space, CPU seconds, file size, processes, stack (-1 = leave), open files, then the program
#: path. The program runs as ``__main__`` in a fresh namespace; the bootstrap's own names are deleted first.
#: Found to be the init of a PID namespace (bubblewrap without dash, see ``bubblewrap.INIT``) it forks first:
#: the init only reaps and exits with the program's status (128 + signal when killed), so the program is an
#: ordinary process (an init ignores signals it has no handler for, even SIGKILL from inside) and the outer
#: bwrap waits for a real exit (see bubblewrap.py).
_LIMITS = r"""
import resource as _r, sys as _s
for _k, _v in zip((_r.RLIMIT_AS, _r.RLIMIT_CPU, _r.RLIMIT_FSIZE, _r.RLIMIT_NPROC, _r.RLIMIT_STACK, _r.RLIMIT_NOFILE,
                   _r.RLIMIT_CORE), [int(_x) for _x in _s.argv[1:7]] + [0]):
    if _v >= 0:
        try:
            _r.setrlimit(_k, (_v, _v))
        except (ValueError, OSError):
            _r.setrlimit(_k, (min(_v, _r.getrlimit(_k)[1]), _r.getrlimit(_k)[1]))
"""
_INIT_FORKS = r"""
import posix as _o  # not os: already loaded, where importing os costs ~5 ms of a run that may not need it
if _o.getpid() == 1:  # init of a PID namespace (bwrap --as-pid-1): reap, and run the program as a child
    _c = _o.fork()
    if _c:
        for _fd in (0, 1, 2):
            _o.close(_fd)
        while True:
            _w, _st = _o.wait()
            if _w == _c:
                _o._exit(_o.WEXITSTATUS(_st) if _o.WIFEXITED(_st) else 128 + _o.WTERMSIG(_st))
del _o
"""
_RUN = r"""
_p = _s.argv[7]
_s.argv = [_p] + _s.argv[8:]
with open(_p, "rb") as _f:
    _c = compile(_f.read(), _p, "exec")
del _r, _k, _v, _f
exec(_c, {"__name__": "__main__", "__file__": _p, "__builtins__": __builtins__})
"""
BOOTSTRAP = _LIMITS + _INIT_FORKS + _RUN
#: :data:`BOOTSTRAP` for a program that is meant to be the init of its PID namespace (a session worker that
#: must outlive what it starts: see :mod:`.session`): the same limits, no fork.
INIT_BOOTSTRAP = _LIMITS + _RUN

#: A warm spare's bootstrap (see :mod:`.spares`): :data:`BOOTSTRAP`, preceded by a wait for its arguments,
#: which the host sends as the first bytes of stdin once the spare is given a run (a 4-byte big-endian length,
#: then the arguments joined by NUL). Exact reads from fd 0, so nothing of the program's stdin is consumed;
#: EOF before the arguments (the spare was discarded, or its host died) ends the interpreter at once, with
#: status 125 (never a run's "ok").
SPARE_BOOTSTRAP = r"""
import posix as _o, sys as _s
def _g(_n):
    _b = b""
    while len(_b) < _n:
        _d = _o.read(0, _n - len(_b))
        if not _d:
            _o._exit(125)
        _b += _d
    return _b
_s.argv[1:] = _g(int.from_bytes(_g(4), "big")).decode("utf-8", "surrogateescape").split("\0")
del _g
""" + BOOTSTRAP


def spare_arguments(args: Sequence[str]) -> bytes:
    """The stdin prefix that hands :data:`SPARE_BOOTSTRAP` its arguments."""
    body = "\0".join(args).encode("utf-8", "surrogateescape")
    return len(body).to_bytes(4, "big") + body


@dataclass(frozen=True)
class Limits:
    """Resource limits of one run. ``timeout`` is wall-clock seconds; ``cpu_time`` defaults to it."""

    timeout: float = 10.0
    memory: int = 1 * GiB  # RLIMIT_AS (docker: cgroup memory)
    cpu_time: float | None = None
    processes: int = 32  # RLIMIT_NPROC (counted per sandbox uid) / docker pids_limit
    file_size: int = 16 * MiB  # RLIMIT_FSIZE; also the size of the private /tmp
    output: int = 4 * MiB  # stdout + stderr kept; the run is killed once more arrives
    stack: int | None = None  # RLIMIT_STACK (None: the system default)
    #: RLIMIT_NOFILE: a low cap bounds the pipe/socket buffers one process can pin outside its memory limit
    open_files: int = 64

    def rlimit_args(self) -> list[str]:
        cpu = self.cpu_time if self.cpu_time is not None else self.timeout
        return [str(int(self.memory)), str(max(1, math.ceil(cpu)) + 1), str(int(self.file_size)),
                str(int(self.processes)), str(int(self.stack) if self.stack else -1), str(int(self.open_files))]


@dataclass(frozen=True)
class RunResult:
    """What one run produced. ``backend`` and ``isolating`` say where it ran, so results are honest about
    it; ``error`` is set when the sandbox itself failed (the program may not have run at all)."""

    stdout: str
    stderr: str
    exit_code: int | None
    timed_out: bool
    oom: bool
    wall_time: float
    backend: str
    isolating: bool
    truncated: bool = False
    error: str | None = None
    #: the host's scorer ended the run early: a per-test deadline passed, or a record broke its budget
    stopped: bool = False

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not (self.timed_out or self.oom or self.truncated or self.error
                                            or self.stopped)

    def status(self) -> str:
        if self.error:
            return "sandbox_error"
        if self.timed_out:
            return "timeout"
        if self.oom:
            return "out_of_memory"
        if self.truncated:
            return "output_limit"
        if self.stopped:
            return "stopped"
        return "ok" if self.exit_code == 0 else "error"


class OutputBudget:
    """What a run keeps of its output, shared by every backend: stdout and stderr together at most ``cap``
    bytes (one budget for both, not one each, so a run never hands back more than ``Limits.output``), stdout
    also at most ``kept_stdout`` (when a scorer reads it live it keeps its own records). More than ``cap``
    bytes in all, kept or not, means the run is over (``truncated``)."""

    STDOUT, STDERR = 1, 2

    def __init__(self, cap: int, kept_stdout: int | None = None):
        self.cap, self.total, self.kept, self.truncated = cap, 0, 0, False
        self.parts: dict[int, list[bytes]] = {self.STDOUT: [], self.STDERR: []}
        self.stream_room = {self.STDOUT: cap if kept_stdout is None else min(cap, kept_stdout), self.STDERR: cap}

    def add(self, stream: int, data: bytes) -> bool:
        """Count ``data`` of ``stream`` and keep what fits; False once the run is over its budget."""
        room = min(self.stream_room[stream], self.cap - self.kept)
        if room > 0 and data:
            piece = data[:room]
            self.parts[stream].append(piece)
            self.stream_room[stream] -= len(piece)
            self.kept += len(piece)
        self.total += len(data)
        self.truncated = self.truncated or self.total > self.cap
        return not self.truncated

    def text(self, stream: int) -> str:
        return b"".join(self.parts[stream]).decode("utf-8", "replace")


class SandboxUnavailable(RuntimeError):
    """The backend cannot run on this machine (tool missing, engine unreachable, no usable Python)."""


class Sandbox:
    """A code-execution backend. Subclasses implement :meth:`_run` and :meth:`probe`."""

    name: str = "abstract"
    isolating: bool = False

    def __init__(self, limits: Limits | None = None):
        self.limits = limits or Limits()

    def run(self, code: str, stdin: str | bytes = "", files: Mapping[str, str | bytes] | None = None,
            timeout: float | None = None, memory_limit: int | None = None,
            interact: Interact | None = None, **limits: object) -> RunResult:
        """Run ``code`` as a Python program. Never raises for anything the program does; a broken sandbox
        shows up as ``RunResult.error``.

        ``interact``, when given, sees each chunk of stdout as it arrives and may answer with bytes for the
        program's stdin, which then stays open (a scorer uses it to stop a group of tests early). If it has a
        ``deadline()`` method (see :class:`lopd_envs.codeexec.channel.ResultChannel`), the run is killed
        (``stopped``) once that monotonic time passes: the host's own per-test clock. If it raises, the
        run is killed and reaped and the error is reported in ``RunResult.error``. Every backend here
        streams (docker through its run server's frames); a backend that could not would have to call it
        once with the whole output and ignore the answer."""
        lim = self.limits
        overrides = {k: v for k, v in limits.items() if v is not None}
        if timeout is not None:
            overrides["timeout"] = float(timeout)
        if memory_limit is not None:
            overrides["memory"] = int(memory_limit)
        if overrides:
            lim = Limits(**{**lim.__dict__, **overrides})
        data = stdin.encode() if isinstance(stdin, str) else bytes(stdin)
        start = time.monotonic()
        try:
            return self._execute(code, files or {}, data, lim, interact)
        except Exception as exc:  # noqa: BLE001 - the sandbox broke (not the program): report, never raise
            return RunResult("", "", None, False, False, time.monotonic() - start, self.name, self.isolating,
                             error=f"{type(exc).__name__}: {exc}")

    def _execute(self, code: str, files: Mapping[str, str | bytes], stdin: bytes, limits: Limits,
                 interact: Interact | None) -> RunResult:
        """One run from the program's files on: by default a fresh :class:`workdir` handed to :meth:`_run`
        (backends that start their sandbox ahead of the run override this, see :mod:`.spares`)."""
        with workdir(code, files) as wd:
            return self._run(wd, stdin, limits, interact)

    def _run(self, wd: Path, stdin: bytes, limits: Limits, interact: Interact | None = None) -> RunResult:
        raise NotImplementedError

    def close(self) -> None:
        """Release what the backend keeps between runs (warm spares, containers); runs still work after."""

    @classmethod
    def probe(cls) -> str | None:
        """``None`` when the backend works here, else the reason it does not."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}(isolating={self.isolating})"


# ------------------------------------------------------------------------------- shared helpers


class UidSlots:
    """Distinct unprivileged host uids for concurrent runs. RLIMIT_NPROC counts processes per real uid, so
    each live sandbox gets its own: a fork bomb in one cannot starve its neighbours (or the host).

    ``region`` keeps pools apart: one-shot runs (:data:`UIDS`) and long-lived sessions (:data:`SESSION_UIDS`)
    never share a uid, so idle session workers can neither exhaust the run slots nor be mistaken for a
    run's leftovers."""

    def __init__(self, size: int = 256, region: int = 0):
        self.size, self.region = size, region
        self._reset()
        os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        """The range is chosen by pid, so a forked child draws from its own (its parent's runs hold the
        inherited one), with a fresh lock (another thread may have held the old one at the fork)."""
        base = 1_000_000 + self.region * 50_000 * self.size + (os.getpid() % 50_000) * self.size
        self.uids = range(base, base + self.size)
        self._free = list(self.uids)
        self._cond = threading.Condition()

    def acquire(self) -> int:
        with self._cond:
            while not self._free:
                self._cond.wait()
            return self._free.pop()

    def try_acquire(self) -> int | None:
        """A free uid now, or ``None`` (a warm spare is not worth waiting for a slot a run needs)."""
        with self._cond:
            return self._free.pop() if self._free else None

    def release(self, uid: int) -> None:
        with self._cond:
            self._free.append(uid)
            self._cond.notify()


UIDS = UidSlots()
SESSION_UIDS = UidSlots(region=1)


def as_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def as_user(argv: list[str], uid: int | None) -> tuple[list[str], dict]:
    """Start ``argv`` as ``uid``. Through ``setpriv`` when available: letting ``subprocess`` switch the uid
    itself rules out ``vfork``, and a full ``fork`` of a large parent (a trainer) costs ~30 ms per run."""
    if uid is None:
        return argv, {}
    if SETPRIV:
        return [SETPRIV, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--", *argv], {}
    return argv, {"user": uid, "group": uid, "extra_groups": []}


SETPRIV = shutil.which("setpriv")


def looks_out_of_memory(exit_code: int | None, stderr: str) -> bool:
    """RLIMIT_AS surfaces as Python's MemoryError (or a SIGKILL/SIGSEGV from a failed allocation)."""
    tail = stderr.rstrip().rsplit("\n", 1)[-1] if stderr.strip() else ""
    return exit_code not in (0, None) and (tail.startswith("MemoryError") or exit_code in (-9, 137))


def scrubbed_env(home: str) -> dict[str, str]:
    """The whole environment a sandboxed program sees: no secrets, no proxies, no Python paths."""
    return {"PATH": "/usr/bin:/bin", "HOME": home, "TMPDIR": "/tmp", "LANG": "C.UTF-8",
            "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1", "OMP_NUM_THREADS": "1"}


@dataclass
class RunRequest:
    """One queued run for :class:`~lopd_envs.sandbox.pool.SandboxPool`."""

    code: str
    stdin: str | bytes = ""
    files: Mapping[str, str | bytes] = field(default_factory=dict)
    timeout: float | None = None
    memory_limit: int | None = None


def default_workers() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)
