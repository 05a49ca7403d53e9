"""One cgroup per sandboxed run: a memory cap that counts what rlimits cannot see, a process cap, and a
reliable "kill everything, then know it is dead".

RLIMIT_AS caps one process's address space, but tmpfs pages (``/tmp``, ``/dev/shm``), memfds, SysV shared
memory, pipe and socket buffers and kernel objects (inodes of many empty files) live outside it. The memory
cgroup charges all of them to the sandbox, so ``memory`` becomes a real cap on what the run holds. The
cgroup's process list is also the authoritative answer to "is the sandbox dead?": a run's uid slot is
handed back only once it is empty.

Both cgroup layouts are supported, because hosts differ: cgroup v2 (``memory.max``, ``memory.swap.max``,
``pids.max``) when the memory controller can be delegated below our own cgroup, else the v1 ``memory``
and ``pids`` hierarchies (``memory.limit_in_bytes``, ``memory.memsw.limit_in_bytes``,
``memory.kmem.tcp.limit_in_bytes``). Only root can do this; without it (or with ``LOPD_SANDBOX_CGROUP=0``)
runs fall back to rlimits alone, which leave the shared-memory classes above bounded only by the tmpfs
size caps, the seccomp filter and the time limit (see :mod:`lopd_envs.sandbox.seccomp`).

A process enters its cgroup *before* it runs anything, so there is no window in which a fork escapes the
cap. Two ways, the cheap one where the host allows it:

* v1: :meth:`Cgroup.start_inside`. The thread that starts the run moves *itself* into the run's cgroups
  (``0`` written to each ``tasks`` file), starts the child (which is born inside: a new task inherits its
  creating thread's cgroups), and moves back. Moving the calling thread is the one cgroup migration the
  kernel does without its global ``cgroup_threadgroup_rwsem``; any other write to ``cgroup.procs`` waits
  for an RCU grace period, which cost 10-25 ms a run here (two hierarchies). The main thread hands the
  start to a helper thread instead: v1 charges a process's memory to the cgroup of its leader thread, so
  the host's own allocations would count against the run while it sat there.
* v2 (threads of one process cannot sit in different domain cgroups): :meth:`Cgroup.wrap` prefixes the
  command line with ``sh -c 'echo $$ > cgroup.procs; exec ...'`` (an extra exec and the RCU wait).

Nothing is left behind (issue 55): a process's run cgroups live in its own ``lopd-sandbox-<pid>`` folder,
which its exit removes with whatever is still in it (a warm spare's cgroup included), and a process that
makes its folder first removes those whose owner pid is gone (killed, or ended by ``os._exit``).
"""

from __future__ import annotations

import atexit
import functools
import itertools
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from lopd_envs.sandbox.cgroup_teardown import PREFIX, kill_until_gone, remove_stale, remove_tree

T = TypeVar("T")

ENV_CGROUP = "LOPD_SANDBOX_CGROUP"
#: Headroom above the program's memory limit for bubblewrap, the bootstrap and the interpreter itself.
OVERHEAD = 64 << 20
#: Processes above ``Limits.processes`` for the wrapper and bubblewrap's two monitor processes.
EXTRA_PIDS = 4

_counter = itertools.count()
_lock = threading.Lock()


@dataclass(frozen=True)
class Layout:
    """Where this process may create sandbox cgroups: one folder per controller hierarchy."""

    version: int  # 1 or 2
    memory: Path
    pids: Path | None  # v2: same folder as memory


def _mounts() -> list[tuple[str, str, set[str]]]:
    """(mount point, filesystem type, super options) of every cgroup mount."""
    out = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, rest = left.split(), right.split()
        if len(rest) >= 3 and rest[0] in ("cgroup", "cgroup2"):
            out.append((fields[4], rest[0], set(rest[2].split(","))))
    return out


def _own_paths() -> dict[str, str]:
    """Our cgroup path per hierarchy: ``"0"`` (v2) or each v1 controller name."""
    paths = {}
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            num, controllers, path = line.split(":", 2)
            for c in (controllers.split(",") if controllers else [num]):
                paths[c] = path
    except (OSError, ValueError):
        pass
    return paths


#: The ``lopd-sandbox-<pid>`` folders this process made (a forked child starts with none: see the fork hook).
_made: list[Path] = []


def _writable_child(base: Path) -> Path | None:
    """``base/lopd-sandbox-<pid>``, created if we may (and removable: tested with a throw-away child);
    removed again, with every run cgroup left in it, when this process exits (:func:`_remove_made`).
    The folders of owners that are gone (killed, or ended by ``os._exit``) are removed first."""
    remove_stale(base)
    folder = base / f"{PREFIX}{os.getpid()}"
    try:
        folder.mkdir(exist_ok=True)
        probe = folder / "probe"
        probe.mkdir(exist_ok=True)
        probe.rmdir()
    except OSError:
        return None
    with _lock:
        if folder not in _made:
            _made.append(folder)
    return folder


def _remove_made() -> None:
    """At exit: every cgroup folder this process made, with the run cgroups still in it. Registered when
    this module is imported, so it runs after the spares' and sessions' own exit hooks (atexit runs the
    last registered first), which kill and reap their sandboxes; what is left is killed here."""
    with _lock:
        folders, _made[:] = list(_made), []
    for folder in folders:
        remove_tree(folder, patience=0.5)


atexit.register(_remove_made)


def _remove_quietly(folder: Path) -> None:
    try:
        folder.rmdir()
    except OSError:
        pass


@functools.cache
def layout() -> Layout | None:
    """Detected once per process; ``None`` when per-run cgroups are not possible here."""
    if os.environ.get(ENV_CGROUP, "1") == "0" or not hasattr(os, "geteuid") or os.geteuid() != 0:
        return None
    mounts, own = _mounts(), _own_paths()
    for point, fstype, _ in mounts:  # cgroup v2 with the memory controller delegable below us
        if fstype != "cgroup2" or "0" not in own:
            continue
        base = Path(point) / own["0"].lstrip("/")
        try:
            enabled = set((base / "cgroup.subtree_control").read_text().split())
            if not {"memory", "pids"} <= enabled:
                (base / "cgroup.subtree_control").write_text("+memory +pids")
        except OSError:
            continue
        folder = _writable_child(base)
        if folder is not None:
            try:
                (folder / "cgroup.subtree_control").write_text("+memory +pids")
                return Layout(2, folder, folder)
            except OSError:
                pass
    memory = pids = None
    for point, fstype, options in mounts:
        if fstype != "cgroup":
            continue
        if "memory" in options and "memory" in own:
            memory = _writable_child(Path(point) / own["memory"].lstrip("/"))
        if "pids" in options and "pids" in own:
            pids = _writable_child(Path(point) / own["pids"].lstrip("/"))
    return Layout(1, memory, pids) if memory is not None else None


class Cgroup:
    """The cgroup(s) of one run: create with limits, :meth:`wrap` the command, :meth:`kill`, :meth:`remove`."""

    def __init__(self, where: Layout, memory: int, processes: int):
        with _lock:
            name = f"run-{next(_counter)}"
        self.version = where.version
        self.folders = [where.memory / name] + ([where.pids / name] if where.pids and where.pids != where.memory
                                                else [])
        for folder in self.folders:
            folder.mkdir()
        self.memory: int | None = None  # None: still the kernel's default, unlimited
        self.processes: int | None = None
        try:
            self.limit(memory, processes)
        except OSError:
            self.remove()
            raise

    def limit(self, memory: int, processes: int) -> None:
        """Set (or change: a warm spare gets its run's limits here) the memory and process caps. v1 keeps
        ``memsw`` >= the memory limit at every step, so a raise writes it first and a cut writes it last."""
        if (memory, processes) == (self.memory, self.processes):
            return
        mem, cap = self.folders[0], str(int(memory) + OVERHEAD)
        if self.version == 2:
            _write(mem / "memory.max", cap)
            _write(mem / "memory.swap.max", "0", optional=True)
            _write(mem / "pids.max", str(processes + EXTRA_PIDS))
        else:
            order = ["memory.limit_in_bytes", "memory.memsw.limit_in_bytes"]
            raised = self.memory is not None and memory > self.memory
            for name in (order[::-1] if raised else order):
                _write(mem / name, cap, optional=name != order[0])
            _write(mem / "memory.kmem.tcp.limit_in_bytes", cap, optional=True)
            if len(self.folders) > 1:
                _write(self.folders[1] / "pids.max", str(processes + EXTRA_PIDS))
        self.memory, self.processes = memory, processes

    @property
    def enterable(self) -> bool:
        """Whether :meth:`start_inside` works here (cgroup v1, where a single thread may change cgroups, and
        a thread may move into a run's cgroups and back: checked once)."""
        return self.version == 1 and _thread_moves_work(tuple(f.parent for f in self.folders))

    def start_inside(self, start: Callable[[], T]) -> T:
        """``start()`` called from a thread that sits in this run's cgroups for the duration of the call, so
        the child it starts is born inside them (v1 only, see :attr:`enterable`)."""
        if threading.get_native_id() == os.getpid():  # the leader thread: its cgroup is charged for memory
            return _on_helper_thread(lambda: self._start_inside(start))
        return self._start_inside(start)

    def _start_inside(self, start: Callable[[], T]) -> T:
        homes = [folder.parent.parent for folder in self.folders]  # the process's own cgroups (see layout)
        for folder in self.folders:
            _join(folder)
        try:
            return start()
        finally:
            for home in homes:  # the thread never stays: kill() would otherwise see the host as the run's
                _join(home)

    def wrap(self, argv: Sequence[str]) -> list[str]:
        """``argv`` started from inside the cgroup(s): the shell joins them, then ``exec``s (same pid)."""
        joins = " && ".join(f'echo $$ > "${k + 1}"' for k in range(len(self.folders)))
        return ["/bin/sh", "-c", f'{joins} && shift {len(self.folders)} && exec "$@"', "sh",
                *[str(f / "cgroup.procs") for f in self.folders], *argv]

    def pids(self) -> list[int]:
        try:
            return [int(p) for p in (self.folders[0] / "cgroup.procs").read_text().split()]
        except (OSError, ValueError):
            return []

    def kill(self, spare: int | None = None, patience: float = 2.0, seen: set[int] | None = None) -> bool:
        """SIGKILL every process in the cgroup except ``spare`` until none is left; True when empty."""
        return kill_until_gone(self.pids, spare, patience, seen)

    def oom_killed(self) -> bool:
        """Whether the kernel killed a process of this cgroup for memory."""
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        try:
            for line in (self.folders[0] / name).read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill" and int(value) > 0:
                    return True
        except (OSError, ValueError):
            pass
        return False

    def memory_peak(self) -> int | None:
        name = "memory.peak" if self.version == 2 else "memory.max_usage_in_bytes"
        try:
            return int((self.folders[0] / name).read_text())
        except (OSError, ValueError):
            return None

    def remove(self) -> None:
        for folder in self.folders:
            for _ in range(200):
                try:
                    folder.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:  # still busy for a moment after its last process died
                    time.sleep(0.001)


def _join(folder: Path) -> None:
    """Move the calling thread (``0``: the writer itself) into ``folder``'s cgroup."""
    fd = os.open(folder / "tasks", os.O_WRONLY)
    try:
        os.write(fd, b"0")
    finally:
        os.close(fd)


@functools.cache
def _thread_moves_work(parents: tuple[Path, ...]) -> bool:
    """Move a helper thread into a throw-away cgroup under each of ``parents`` and back to the process's own
    cgroup. A host that delegates the subtree but not the parent's ``tasks`` file fails here, not in a
    run (where a thread stuck inside would make the run's cgroup undeletable)."""
    probes = [parent / f"probe-{os.getpid()}" for parent in parents]

    def move() -> bool:
        moved = []
        try:
            for probe in probes:
                probe.mkdir(exist_ok=True)
                _join(probe)
                moved.append(probe)
            return True
        except OSError:
            return False
        finally:
            try:
                for probe in moved:
                    _join(probe.parent.parent)
            except OSError:
                return False  # stuck: the helper thread exits with the probe, which then stays behind

    with ThreadPoolExecutor(1) as pool:
        ok = pool.submit(move).result()
    for probe in probes:
        _remove_quietly(probe)
    return ok


_helper: ThreadPoolExecutor | None = None


def _on_helper_thread(call: Callable[[], T]) -> T:
    """``call()`` run on a helper thread (created once), its result or exception passed back. An interrupt
    while waiting still waits for the call: the child it starts must not be lost (the caller cleans up)."""
    global _helper
    with _lock:
        if _helper is None:
            _helper = ThreadPoolExecutor(1, thread_name_prefix="lopd-cgroup-start")
    future = _helper.submit(call)
    try:
        return future.result()
    except BaseException:
        if not future.done():
            future.exception()  # wait; the caller's cleanup (kill the cgroup) must come after the start
        raise


def _after_fork_in_child() -> None:
    """A forked child has none of the parent's threads: it makes its own helper (a lock another thread
    held at the fork would stay held forever, so it is replaced too)."""
    global _helper, _lock
    _helper, _lock = None, threading.Lock()
    _made.clear()  # the parent's folders stay the parent's; the child makes (and removes) its own
    layout.cache_clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _write(path: Path, value: str, optional: bool = False) -> None:
    try:
        path.write_text(value)
    except OSError:
        if not optional:
            raise


def create(memory: int, processes: int) -> Cgroup | None:
    """A fresh cgroup for one run, or ``None`` where the host does not allow it."""
    where = layout()
    if where is None:
        return None
    try:
        return Cgroup(where, memory, processes)
    except FileNotFoundError:  # our folder was removed under us (a sweep from another namespace): make it again
        layout.cache_clear()
        where = layout()
        try:
            return Cgroup(where, memory, processes) if where is not None else None
        except OSError:
            return None
    except OSError:
        return None
