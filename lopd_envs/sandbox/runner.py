"""Running one sandbox command to the end, whatever happens on the host side.

:func:`execute` starts the command (born inside its own cgroup where the host allows it), feeds stdin, reads
both streams up to the output cap, lets a scorer callback watch stdout and set per-test deadlines, and on
*every* way out (normal exit, timeout, output overflow, a deadline, a callback that raises, an interrupt)
kills and reaps the whole process tree before it returns. "Dead" is checked, not assumed: the run's cgroup
(or, without one, the run's private uid) must hold no process any more, so the caller may hand the uid
slot to the next run. :func:`execute` is :func:`launch` then :func:`finish`; a warm spare is launched
ahead of need and finished when a run takes it (see :mod:`.spares`).

Kill order matters for zombies. bubblewrap runs as an outer monitor (our child) whose child is the PID
namespace's init. Killing the monitor first orphans that init, which then becomes a ``[bwrap] <defunct>``
for the host's PID 1 to reap. So the processes *inside* are killed first (the namespace dies with its
init), the monitor sees its child exit, exits by itself and is reaped here; it is killed only if it does
not. When it is (a loaded machine, a monitor slower than the grace period), or whenever a parent inside
dies before its child, the orphans go to the nearest child subreaper: usually the host's init, which reaps
them, but a host that is itself a subreaper or PID 1 (many process supervisors and container inits) is
handed them and must reap them, or keep them as zombies. :func:`stop` then reaps exactly the run's own
(:func:`reap_orphans`, by the pids it killed and the run's private uid), never ``waitpid(-1)``.
"""

from __future__ import annotations

import ctypes
import functools
import os
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import IO, cast

from lopd_envs.sandbox import cgroup
from lopd_envs.sandbox.base import Interact, Limits, OutputBudget, RunResult, as_user
from lopd_envs.sandbox.cgroup_teardown import kill_until_gone
from lopd_envs.sandbox.supervise import Supervision


@dataclass
class Started:
    """A launched sandbox command: its process, its cgroup (or ``None``) and the uid it runs as."""

    proc: subprocess.Popen
    group: cgroup.Cgroup | None
    uid: int | None
    monitor: bool
    started: float


def launch(argv: Sequence[str], limits: Limits, env: Mapping[str, str] | None = None, cwd: str | None = None,
           uid: int | None = None, monitor: bool = False, pass_fds: Sequence[int] = ()) -> Started:
    """Start ``argv`` (as ``uid``) with three pipes, born inside a fresh cgroup where the host allows it.
    ``monitor``: ``argv[0]``'s process only supervises the real program (bubblewrap) and is left to exit by
    itself once the rest is dead. ``pass_fds`` are inherited by the command and closed here once it started."""
    start = time.monotonic()
    argv, ids = as_user(list(argv), uid)
    try:
        group = cgroup.create(limits.memory, limits.processes)
    except BaseException:
        _close_all(pass_fds)
        raise
    if group is not None and not group.enterable:
        argv = group.wrap(argv)

    def spawn() -> subprocess.Popen:
        return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=dict(env) if env is not None else None, cwd=cwd, start_new_session=True,
                                close_fds=True, pass_fds=tuple(pass_fds), **ids)

    try:
        proc = group.start_inside(spawn) if group is not None and group.enterable else spawn()
    except BaseException:
        if group is not None:
            group.kill()  # a start interrupted after the child was born: it must not outlive the run
            group.remove()
        raise
    finally:
        _close_all(pass_fds)
    return Started(proc, group, uid, monitor, start)


def finish(run: Started, stdin: bytes, limits: Limits, backend: str, isolating: bool, grace: float = 0.5,
           interact: Interact | None = None, start: float | None = None) -> RunResult:
    """Feed ``stdin`` to a launched command, collect its output and return what it did. The limits' clock
    starts at ``start`` (default: now). On every way out the whole process tree is killed and reaped first."""
    pump = None
    try:
        pump = _Pump(run.proc, Supervision(limits, interact, start))
        pump.run(stdin)
    except Exception as exc:  # a scorer bug or a selector failure: the run still dies below
        if pump is None:
            raise
        pump.watch.fail(f"the host side of the run failed: {type(exc).__name__}: {exc}")
    finally:
        exit_code = stop(run.proc, run.group, run.uid, run.monitor, grace)
        if pump is not None:
            pump.close()
        oom = run.group.oom_killed() if run.group is not None else False
        if run.group is not None:
            run.group.remove()
    return cast(_Pump, pump).watch.result(exit_code, backend, isolating, oom_killed=oom)  # a failed _Pump() re-raised


def discard(run: Started, grace: float = 0.5) -> None:
    """Kill and reap a launched command that will not be used (a warm spare thrown away)."""
    stop(run.proc, run.group, run.uid, run.monitor, grace)
    for stream in pipes(run.proc):
        try:
            stream.close()
        except OSError:
            pass
    if run.group is not None:
        run.group.remove()


def execute(argv: Sequence[str], stdin: bytes, limits: Limits, backend: str, isolating: bool,
            env: Mapping[str, str] | None = None, cwd: str | None = None, uid: int | None = None,
            grace: float = 0.5, interact: Interact | None = None, monitor: bool = False,
            pass_fds: Sequence[int] = ()) -> RunResult:
    """Run ``argv`` (as ``uid``) to completion and return what it did: :func:`launch`, then :func:`finish`
    with the clock started before the launch."""
    run = launch(argv, limits, env, cwd, uid, monitor, pass_fds)
    return finish(run, stdin, limits, backend, isolating, grace, interact, start=run.started)


def _close_all(fds: Sequence[int]) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


#: An ``interact`` callback may set ``coalesce`` (seconds): after a small read of stdout the loop waits that long
#: before the next one, so that a program writing one short record at a time (a test harness, one line per
#: test) is read a few hundred records at a time instead of being woken for each. On an idle host the reader
#: was otherwise woken every ~2.4 records: a wake-up on both sides per read, ~2.8 us per record of CPU in all
#: (a bare reader of HumanEval-like records; the scorer's own per-read work came on top). Each arrival is then
#: seen at most that much later: the scorer's per-test clock is off by it, and it still acts on every deadline.
COALESCE_BELOW = 16 << 10


class _Pump:
    """The read loop of one local run: moves its bytes; :class:`.supervise.Supervision` decides."""

    def __init__(self, proc: subprocess.Popen, watch: Supervision):
        self.proc, self.watch = proc, watch
        self.out_fd = pipes(proc)[1].fileno()
        self.writer: threading.Thread | None = None

    def run(self, stdin: bytes) -> None:
        self.writer = threading.Thread(target=_feed, args=(self.proc.stdin, stdin, self.watch.interact is None),
                                       daemon=True)
        self.writer.start()
        with selectors.DefaultSelector() as sel:
            for stream in pipes(self.proc)[1:]:
                sel.register(stream, selectors.EVENT_READ)
            coalesce = float(getattr(self.watch.interact, "coalesce", 0.0) or 0.0)
            while sel.get_map():
                wait = self.watch.remaining()
                if wait is None:
                    return
                nap = False
                for key, _ in sel.select(timeout=min(wait, 1.0)):
                    data = os.read(key.fd, 65536)
                    if not data:
                        sel.unregister(key.fileobj)
                        continue
                    stream = OutputBudget.STDOUT if key.fd == self.out_fd else OutputBudget.STDERR
                    _answer(self.proc, self.watch.take(stream, data))
                    if self.watch.over:
                        return
                    nap = nap or (coalesce > 0 and stream == OutputBudget.STDOUT and len(data) < COALESCE_BELOW)
                if nap:  # a trickle of records: let a few more gather (never past a deadline, checked above)
                    wait = self.watch.remaining()
                    if wait is None:
                        return
                    time.sleep(min(coalesce, wait))
        # both streams closed: the program may still run (it closed them itself); wait for its exit
        while self.proc.poll() is None:
            wait = self.watch.remaining()
            if wait is None:
                return
            try:
                self.proc.wait(timeout=min(wait, 0.05))
            except subprocess.TimeoutExpired:
                pass

    def close(self) -> None:
        if self.writer is not None:
            self.writer.join(timeout=1.0)
        stdin, stdout, stderr = pipes(self.proc)
        for stream in (stdout, stderr, stdin):
            try:
                stream.close()
            except OSError:
                pass


def stop(proc: subprocess.Popen, group: cgroup.Cgroup | None, uid: int | None, monitor: bool,
         grace: float = 0.5) -> int | None:
    """Kill what is left of a run and reap it; returns its exit status. On return no process of the run
    exists any more (checked through its cgroup, else its private uid), so its uid slot may be reused."""
    spare = proc.pid if monitor else None
    seen: set[int] | None = set() if orphans_come_here() else None
    if seen is not None:  # bubblewrap's init may be exiting already: gone from the cgroup's list (so no kill
        seen.update(children(proc.pid))  # below sees it), still the monitor's child, ours once the monitor dies
    if group is not None:
        group.kill(spare, seen=seen)
    elif uid is not None:
        kill_uid(uid, spare, seen=seen)
    if proc.poll() is None and spare is not None:
        try:  # the monitor exits by itself once its child is gone (and reaps it: no orphan zombie)
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
    if proc.poll() is None:
        _kill_group(proc)
        try:
            os.kill(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        proc.wait()
    if group is not None:
        group.kill(seen=seen)  # stragglers (the process backend's daemons); bubblewrap's namespace left none
    elif uid is not None:
        kill_uid(uid, seen=seen)
    else:
        _kill_group(proc)
    if seen is not None:
        reap_orphans(seen - {proc.pid}, uid)
    return proc.returncode


def children(pid: int) -> set[int]:
    """The children of ``pid`` (of every thread), from ``/proc``; empty where the kernel does not list them."""
    found: set[int] = set()
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                found.update(int(x) for x in f.read().split())
        except (OSError, ValueError):
            continue
    return found


PR_GET_CHILD_SUBREAPER = 37


def orphans_come_here() -> bool:
    """Whether orphaned processes are handed to this process (it is PID 1, or a child subreaper, as under
    many process supervisors and container inits) rather than to an init that reaps them. Then a run's
    processes whose parent died first (bubblewrap's intermediate process, our init) become our zombies,
    and nobody else will reap them. Asked each time: a host may become a subreaper at any point."""
    if os.getpid() == 1:
        return True
    try:
        libc = _libc()
        flag = ctypes.c_int(0)
        return libc.prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(flag), 0, 0, 0) == 0 and flag.value != 0
    except (OSError, AttributeError):
        return False


@functools.lru_cache(maxsize=1)
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def reap_orphans(pids: set[int], uid: int | None = None, patience: float = 0.5) -> None:
    """Reap the processes of a stopped run that were handed to us: those of ``pids`` (the run's processes,
    all killed; for up to ``patience`` seconds the kernel may still be handing over the children of a
    parent that is exiting) and, with ``uid`` (the run's private slot uid), any child of ours owned by it
    (:func:`_orphans`: one that had exited before the kill, or was still dying, whose parent was then killed
    before reaping it), waited for while it is dying (:func:`dying`). Never ``waitpid(-1)``: other children of
    the host belong to other code."""
    pending = set(pids)
    if uid is not None:
        pending.update(_orphans(uid))
    stop = time.monotonic() + patience
    while pending:
        for pid in list(pending):
            try:
                if os.waitpid(pid, os.WNOHANG)[0] == pid:
                    pending.discard(pid)
                continue
            except ChildProcessError:  # not (or not yet) ours
                pass
            if not _exiting_elsewhere(pid):
                pending.discard(pid)
        if not pending or time.monotonic() > stop:
            return
        time.sleep(0.001)


def _orphans(uid: int) -> list[int]:
    """Children of this process, in any state, whose real uid is ``uid``: a private slot uid owns nothing but
    the run, so each is one of its processes handed to us (a zombie, or one still dying: bubblewrap's init
    of a spare discarded while it was starting, say, was created after the kill listed the run's processes
    and is orphaned when the monitor is killed)."""
    own, found, want = str(os.getpid()).encode(), [], f"Uid:\t{uid}\t".encode()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                parent = f.read().rsplit(b")", 1)[1].split()[1]
            if parent != own:
                continue
            with open(f"/proc/{name}/status", "rb") as f:
                if want in f.read(1024):
                    found.append(int(name))
        except (OSError, ValueError, IndexError):
            continue
    return found


def _exiting_elsewhere(pid: int) -> bool:
    """Whether ``pid`` is dying and not ours yet, so that it may still be handed to us: a zombie whose parent
    is not us, or a process on its way out that is not a zombie yet. Gone, alive (a reused pid) or
    unreadable: nothing to wait for."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        with open(f"/proc/{pid}/status", "rb") as f:
            status = f.read(4096)
    except OSError:
        return False
    return dying(stat, status)


#: ``PF_EXITING`` in ``/proc/<pid>/stat``'s flags: the task has entered ``do_exit``.
PF_EXITING = 0x4
#: SIGKILL's bit in ``/proc/<pid>/status``'s ``SigPnd`` / ``ShdPnd`` masks (signal n is bit n - 1).
SIGKILL_BIT = 1 << (signal.SIGKILL - 1)


def dying(stat: bytes, status: bytes) -> bool:
    """From a process's ``stat`` and ``status``: a zombie, or a process on its way to being one (inside
    ``do_exit``, or with a SIGKILL pending). A killed process is not a zombie at once: under load the kernel
    takes a while to tear it down, and a PID namespace's init (bubblewrap's) first waits for every process of
    its namespace to die. Read as alive, such a process was dropped from the reaping, and was handed to a
    subreaper host a moment later as a zombie nobody reaped (seen as a ``(dash)`` zombie in about 1 run in 10
    of ``test_no_zombies_under_a_subreaper_host`` on a loaded machine)."""
    try:
        fields = stat.rsplit(b")", 1)[1].split()
        state, flags = fields[0], int(fields[6])
    except (IndexError, ValueError):
        return False
    if state == b"Z" or flags & PF_EXITING:
        return True
    for line in status.splitlines():
        if line.startswith((b"SigPnd:", b"ShdPnd:")):
            try:
                if int(line.split()[1], 16) & SIGKILL_BIT:
                    return True
            except (IndexError, ValueError):
                continue
    return False


def uid_pids(uid: int) -> list[int]:
    """Processes whose real uid is ``uid`` (a sandbox slot uid owns nothing else). Read from ``status``:
    a process that made itself non-dumpable has its ``/proc`` entry owned by root."""
    pids, want = [], f"Uid:\t{uid}\t".encode()
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/status", "rb") as f:
                    if want in f.read(1024):
                        pids.append(int(name))
            except OSError:
                continue
    return pids


def kill_uid(uid: int, spare: int | None = None, patience: float = 2.0, seen: set[int] | None = None) -> bool:
    """SIGKILL every process of ``uid`` except ``spare`` until none is left (no cgroup: the fallback)."""
    return kill_until_gone(lambda: uid_pids(uid), spare, patience, seen)


def _feed(pipe, data: bytes, close: bool = True) -> None:
    try:
        if data:
            pipe.write(data)
            pipe.flush()
        if close:
            pipe.close()
    except (BrokenPipeError, OSError, ValueError):
        pass


def pipes(proc: subprocess.Popen) -> tuple[IO[bytes], IO[bytes], IO[bytes]]:
    """A run's stdin, stdout and stderr: :func:`launch` opens all three as pipes, so none is None."""
    return cast("tuple[IO[bytes], IO[bytes], IO[bytes]]", (proc.stdin, proc.stdout, proc.stderr))


def _answer(proc: subprocess.Popen, message: bytes | None) -> None:
    """Send an ``interact`` answer to the program (it may have closed its end: then nothing happens)."""
    if not message:
        return
    try:
        os.write(pipes(proc)[0].fileno(), message)
    except (BrokenPipeError, OSError, ValueError):
        pass


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, OSError):
        pass
