"""Warm spares: sandboxes started ahead of need, each used for exactly one run.

Most of what a short run waits for is start-up: bubblewrap's namespaces and mounts, the interpreter, the
per-run cgroup (~40 ms of a 56 ms ``pass`` on the dev VM, see the table in :mod:`.bubblewrap`). A *spare* is a sandbox started exactly as a run
would be (same command line, uid slot, cgroup, seccomp filter) whose bootstrap
(:data:`~lopd_envs.sandbox.base.SPARE_BOOTSTRAP`) stops before the program and waits for its arguments on
stdin. A run takes a spare whose fixed part matches (the *key*: what is baked into the command line, such as
the size of ``/tmp`` and the extra binds), writes its files into the spare's folder (empty until then,
mounted read-only in the sandbox), sets the cgroup's limits, then sends the rlimits and program path ahead
of its stdin; from there it is a cold run (:func:`.runner.finish`). Once the run is over a replacement is
started on one background thread (not during the run: on a loaded machine the start-up would make the
run's own per-test deadlines late), so the caller no longer waits for the start-up.

Isolation is unchanged: a spare has run nothing but the interpreter's start-up and our bootstrap, it serves
one run and is then killed and reaped like any run; it is never reused. Spares die with their host
(bubblewrap's ``--die-with-parent``; for every backend the bootstrap exits when its stdin reaches EOF, which
the host's death or :func:`close_all` causes), :func:`close_all` runs at exit, and a spare older than
``max_age`` or whose process died is thrown away instead of used.

What it costs, honestly: the CPU per run does not shrink (the start-up moves, it does not go away), one
waiting sandbox per concurrent caller and key (~10 MB: bwrap, dash, an idle interpreter), and a spare never
used is start-up spent for nothing (at :meth:`SpareStock.close`, or when the key changes). The background
thread lives as long as the process on purpose: ``--die-with-parent`` is ``PR_SET_PDEATHSIG``, which fires
when the *thread* that started the sandbox ends.

How many: per key, as many as runs were seen in flight at once (at least 2, at most :data:`MAX_SPARES`), so
a pool of N workers finds N spares; ``LOPD_SANDBOX_SPARES`` (or ``spares=``) fixes the number instead (``0``:
every run starts cold, by the same code path).
"""

from __future__ import annotations

import atexit
import os
import queue
import shutil
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from lopd_envs.sandbox import runner
from lopd_envs.sandbox.base import UIDS, Interact, Limits, RunResult, Sandbox, as_root, spare_arguments
from lopd_envs.sandbox.folders import SMALL_WORKDIR, fill_folder, new_folder, program_size

ENV_SPARES = "LOPD_SANDBOX_SPARES"
#: The adaptive stock per key: at least this many, at most :data:`MAX_SPARES` (by the peak of runs in flight).
MIN_SPARES, MAX_SPARES = 2, 16
#: Seconds a spare may wait before it is thrown away rather than used: long enough to outlast an RL loop's
#: generation phase between two batches of runs, short enough that an idle host does not keep them forever.
MAX_AGE = 300.0

#: uids of spares being started or waiting for a run (tests tell them from a run's leftovers by it).
WAITING_UIDS: set[int] = set()


@dataclass(frozen=True)
class Command:
    """How a backend starts one sandbox around a run folder (see :func:`.runner.launch`)."""

    argv: list[str]
    env: Mapping[str, str] | None = None
    cwd: str | None = None
    monitor: bool = False
    pass_fds: Sequence[int] = ()


@dataclass
class Spare:
    """A launched sandbox waiting in its bootstrap, the host folder mounted as its working directory."""

    run: runner.Started
    folder: Path
    key: Hashable
    born: float = field(default_factory=time.monotonic)
    released: bool = False

    def fresh(self, max_age: float) -> bool:
        return time.monotonic() - self.born <= max_age and self.run.proc.poll() is None

    def discard(self) -> None:
        """Kill and reap it, then give back its uid and folder."""
        try:
            runner.discard(self.run)
        finally:
            self.release()

    def release(self) -> None:
        """After its run (every process already reaped): the uid slot and the folder go back, once."""
        if self.released:
            return
        self.released = True
        if self.run.uid is not None:
            WAITING_UIDS.discard(self.run.uid)
            UIDS.release(self.run.uid)
        shutil.rmtree(self.folder, ignore_errors=True)


def start_spare(command: Callable[[Path], Command], limits: Limits, key: Hashable, size: int = 0,
                waiting: bool = False) -> Spare:
    """Launch a sandbox around a new empty folder (on disk when the program is large). ``waiting``: it is
    stocked, not used at once (its uid is listed in :data:`WAITING_UIDS` until it is taken)."""
    uid = None
    if as_root():  # a stocked spare never blocks for a slot: the background thread also runs the discards
        uid = UIDS.try_acquire() if waiting else UIDS.acquire()
        if uid is None:
            raise RuntimeError("every sandbox uid slot is in use: no spare started")
    folder = None
    try:
        if uid is not None and waiting:
            WAITING_UIDS.add(uid)
        folder = new_folder(size)
        how = command(folder)
        run = runner.launch(how.argv, limits, env=how.env, cwd=how.cwd, uid=uid, monitor=how.monitor,
                            pass_fds=how.pass_fds)
    except BaseException:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
        if uid is not None:
            WAITING_UIDS.discard(uid)
            UIDS.release(uid)
        raise
    return Spare(run, folder, key)


class SpareStock:
    """Ready spares per key, refilled on the background thread up to :attr:`size` per key (ready + starting):
    ``fixed`` when given, else the peak of runs in flight (see :meth:`busy`) within MIN_SPARES..MAX_SPARES.
    Nothing is started before the first run of a key."""

    def __init__(self, fixed: int | None = None, max_age: float = MAX_AGE):
        self.fixed, self.max_age = fixed, max_age
        self.in_flight = self.peak = 0
        self._paused = False
        self._ready: dict[Hashable, deque[Spare]] = {}
        self._starting: dict[Hashable, int] = {}
        self._discarding = 0  # stale spares queued for discard on the background thread
        self._cond = threading.Condition()
        self.failures = 0  # consecutive failed starts: refilling pauses after a few (cold runs report why)
        _STOCKS.add(self)
        # a sandbox dropped without close(): its spares must not keep their uid slots and cgroups
        weakref.finalize(self, _discard_later, self._ready).atexit = False

    @property
    def size(self) -> int:
        if self._paused:
            return 0
        return self.fixed if self.fixed is not None else min(max(MIN_SPARES, self.peak), MAX_SPARES)

    def busy(self, change: int) -> None:
        """A run starts (+1) or ends (-1): the peak in flight sizes the adaptive stock."""
        with self._cond:
            self.in_flight += change
            self.peak = max(self.peak, self.in_flight)

    def take(self, key: Hashable) -> Spare | None:
        """A fresh spare for ``key``, or ``None`` (stale ones are discarded on the way)."""
        if self.size <= 0:
            return None
        stale, found = [], None
        with self._cond:
            ready = self._ready.setdefault(key, deque())
            while ready and found is None:
                spare = ready.popleft()
                if spare.fresh(self.max_age):
                    found = spare
                else:
                    stale.append(spare)
            if found is not None and found.run.uid is not None:
                WAITING_UIDS.discard(found.run.uid)
            self._discarding += len(stale)
        for spare in stale:
            _BACKGROUND.submit(lambda spare=spare: self._discard(spare))
        return found

    def _discard(self, spare: Spare) -> None:
        """A stale spare's discard, counted until it is over (:meth:`close` waits for it)."""
        try:
            spare.discard()
        finally:
            with self._cond:
                self._discarding -= 1
                self._cond.notify_all()

    def refill(self, key: Hashable, start: Callable[[], Spare]) -> None:
        """Queue starts (with ``start``) until ``key`` has :attr:`size` spares ready or starting. Called once
        a run is over, so a start-up never competes for the CPU with the run whose spare it replaces
        (on a loaded machine that made per-test deadlines of the run itself late)."""
        with self._cond:
            self._ready.setdefault(key, deque())
            self._refill(key, start)

    def _refill(self, key: Hashable, start: Callable[[], Spare]) -> None:
        while len(self._ready[key]) + self._starting.get(key, 0) < self.size and self.failures < 3:
            self._starting[key] = self._starting.get(key, 0) + 1
            _BACKGROUND.submit(lambda: self._add(key, start))

    def _add(self, key: Hashable, start: Callable[[], Spare]) -> None:
        spare = None
        try:
            spare = start()
        except Exception:  # noqa: BLE001 - the next cold run meets (and reports) the same failure
            pass
        with self._cond:
            keep = spare is not None and self.size > 0
            if spare is not None and keep:
                self._ready.setdefault(key, deque()).append(spare)
        try:
            if spare is not None and not keep:  # before the count drops: close() returns only once it is gone
                spare.discard()
        finally:
            with self._cond:
                self._starting[key] -= 1
                self.failures = 0 if spare is not None else self.failures + 1
                self._cond.notify_all()

    def settle(self, timeout: float = 30.0) -> bool:
        """Wait until no spare is being started (benchmarks time runs apart from the refills)."""
        with self._cond:
            return self._cond.wait_for(lambda: not any(self._starting.values()), timeout)

    def waiting(self) -> int:
        with self._cond:
            return sum(len(ready) for ready in self._ready.values())

    def close(self) -> None:
        """Kill and reap every spare, waiting for those being started or discarded on the background thread
        (a start that ends after close() returned left its folder and cgroup behind when the process exited
        next); the stock refills on the next run."""
        with self._cond:
            self._paused = True
            self._cond.wait_for(lambda: not any(self._starting.values()) and not self._discarding, 30.0)
            spares = [spare for ready in self._ready.values() for spare in ready]
            self._ready.clear()
            self._paused = False
        for spare in spares:
            spare.discard()

    def forget(self) -> None:
        """In a forked child: drop the parent's spares without touching them (they are not our children).
        The lock is replaced, not taken: another thread of the parent may have held it at the fork."""
        self._cond = threading.Condition()
        for ready in self._ready.values():
            for spare in ready:
                for stream in runner.pipes(spare.run.proc):
                    try:
                        stream.close()
                    except OSError:
                        pass
        self._ready.clear()  # in place: the finalizer holds this dict
        self._starting = {}
        self._discarding = 0
        WAITING_UIDS.clear()


def _discard_later(ready: dict[Hashable, deque[Spare]]) -> None:
    """The finalizer of a collected stock: its spares are discarded on the background thread."""
    spares = [spare for queue_ in ready.values() for spare in queue_]
    ready.clear()
    for spare in spares:
        _BACKGROUND.submit(spare.discard)


class _Background:
    """One long-lived daemon thread for spare starts and discards (see the module docstring: a sandbox
    started by a thread that ends would be killed by ``--die-with-parent``)."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def submit(self, job: Callable[[], None]) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="lopd-sandbox-spares", daemon=True)
                self._thread.start()
        self._queue.put(job)

    def _loop(self) -> None:
        while True:
            job = self._queue.get()
            try:
                job()
            except Exception:  # noqa: BLE001 - a failed discard must not stop later starts
                pass
            del job  # it holds its stock: a dropped sandbox must be collectable (see SpareStock)

    def drain(self, timeout: float = 30.0) -> bool:
        """Wait until every job submitted so far has run (tests count processes and slots after it)."""
        done = threading.Event()
        self.submit(done.set)
        return done.wait(timeout)

    def after_fork(self) -> None:
        self.__init__()


_BACKGROUND = _Background()
_STOCKS: weakref.WeakSet[SpareStock] = weakref.WeakSet()


def drain(timeout: float = 30.0) -> bool:
    """Wait for the background starts and discards submitted so far."""
    return _BACKGROUND.drain(timeout)


def close_all() -> None:
    """Kill and reap every spare of this process (at exit; tests that count processes call it too), then
    wait for the discards already queued (a collected stock's): the background thread is a daemon, so at
    exit whatever it has not done yet is never done."""
    for stock in list(_STOCKS):
        stock.close()
    _BACKGROUND.drain(10.0)


def _after_fork_in_child() -> None:
    _BACKGROUND.after_fork()
    for stock in list(_STOCKS):
        stock.forget()


atexit.register(close_all)
os.register_at_fork(after_in_child=_after_fork_in_child)


def default_size() -> int | None:
    """``LOPD_SANDBOX_SPARES`` as a fixed count, or ``None`` (adaptive) when it is unset or not a number."""
    try:
        return max(0, int(os.environ[ENV_SPARES]))
    except (KeyError, ValueError):
        return None


class SpareSandbox(Sandbox):
    """A backend whose every run starts on a spare: taken from the stock when one matches, else started
    on the spot by the same code. Subclasses say how to start one (:meth:`spare_command`), what is fixed
    at start (:meth:`spare_key`) and what the bootstrap gets at run time (:meth:`bootstrap_args`)."""

    def __init__(self, limits: Limits | None = None, spares: int | None = None, max_age: float = MAX_AGE):
        super().__init__(limits)
        self.spares = SpareStock(default_size() if spares is None else spares, max_age)

    def spare_command(self, folder: Path, limits: Limits) -> Command:
        raise NotImplementedError

    def spare_key(self, limits: Limits) -> Hashable:
        """What :meth:`spare_command` bakes in from ``limits`` and the backend's options."""
        raise NotImplementedError

    def bootstrap_args(self, folder: Path, limits: Limits) -> list[str]:
        raise NotImplementedError

    def checked(self, result: RunResult) -> RunResult:
        """Backend-specific reading of a finished run (bubblewrap: its own start-up errors)."""
        return result

    def _start(self, limits: Limits, size: int = 0, waiting: bool = False) -> Spare:
        return start_spare(lambda folder: self.spare_command(folder, limits), limits, self.spare_key(limits), size,
                           waiting)

    def _execute(self, code: str, files: Mapping[str, str | bytes], stdin: bytes, limits: Limits,
                 interact: Interact | None) -> RunResult:
        self.spares.busy(+1)
        try:
            return self._execute_counted(code, files, stdin, limits, interact)
        finally:
            self.spares.busy(-1)

    def _execute_counted(self, code: str, files: Mapping[str, str | bytes], stdin: bytes, limits: Limits,
                         interact: Interact | None) -> RunResult:
        small = program_size(code, files) <= SMALL_WORKDIR  # spares' folders are on tmpfs: large ones start cold
        key = self.spare_key(limits)
        try:
            spare = self.spares.take(key) if small else None
            if spare is None:
                spare = self._start(limits, program_size(code, files))
                self.spares.failures = 0  # starts work again: let the stock retry
            start = time.monotonic()
            try:
                fill_folder(spare.folder, code, files)
                if spare.run.group is not None:
                    spare.run.group.limit(limits.memory, limits.processes)
                head = spare_arguments(self.bootstrap_args(spare.folder, limits))
            except BaseException:
                spare.discard()
                raise
            try:
                result = runner.finish(spare.run, head + stdin, limits, self.name, self.isolating,
                                       interact=interact, start=start)
            finally:
                spare.release()  # finish returns only once every process of the run is gone
            return self.checked(result)
        finally:
            if small:
                self.spares.refill(key, lambda: self._start(limits, waiting=True))

    def close(self) -> None:
        self.spares.close()
