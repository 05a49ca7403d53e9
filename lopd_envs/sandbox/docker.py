"""Docker backend (the ``docker`` SDK), for machines where an engine is reachable but bubblewrap is not
(macOS, Windows, locked-down clusters).

Starting a container costs 0.5-1 s and every engine call (``docker exec``) ~100 ms, so containers are started
ahead and kept warm, and a run makes no engine call at all. Why the in-container server is kept, measured
(``python benchmarks/sandbox_throughput.py --overhead-only --rounds 30``, the 2-core dev VM at load 5.5,
medians of interleaved rounds running ``pass``): one ``docker exec`` per run of the same
``RUNNER`` in the same warm container (the design without the server, the benchmark's
``DockerExecPerRun``) 138.8 ms a run; through the server 54.9 ms with no spare, 20.5 ms with the spare
started ahead (a bare ``python -I -S -c pass`` on the host: 30.2 ms; bubblewrap 16.1 ms). The server makes
a run 6.8x cheaper (2.5x without spares); without it Docker would cost 8.6x bubblewrap a run, not 1.3x.
The design: each container gets one long-lived exec when it
starts, the run server (:mod:`lopd_envs.sandbox.docker_server`), which for each run forks a fresh interpreter
as the sandbox uid running :data:`RUNNER` (the run's supervisor, which forks the program: one interpreter
start per run) and relays its stdin, stdout, stderr and exit status as frames on the exec's socket (so
``interact``, its per-test ``deadline()`` and a scorer that raises work as with the other backends). The
server starts each run's supervisor as soon as the previous run is over (a spare that waits for its arguments
and serves that one run), so a run does not wait for an interpreter's start-up either (``spares=0`` /
``LOPD_SANDBOX_SPARES=0``: started when asked for). A container is locked down once, when it starts: no
network, read-only root file system, size- and inode-capped ``/tmp`` and ``/dev/shm``, all capabilities
dropped but CAP_SETUID and CAP_SETGID (held by the root processes only, the init and the run server; runs are
uid 65534 with none), ``no-new-privileges``, a memory cgroup (swap included, ``/dev/shm`` and memfd pages
count in it), a pids cgroup, and no SysV IPC or POSIX message queues (their namespaced limits set to zero).
Each run's rlimits are set by the same bootstrap as the other backends, except RLIMIT_NPROC: uid 65534 is the
same host uid in every container, so the pids cgroup counts processes instead.

No state passes from one run to the next. A run is started by :data:`RUNNER`, which makes itself
non-dumpable (the program cannot ptrace it or open its descriptors), kills every other process of the
sandbox uid in the container (``kill(-1)``), empties ``/tmp`` and ``/dev/shm``, then starts the program;
when the program exits it kills everything again, so children left behind neither hold the output open
nor outlive the run. The run server is out of the program's reach: it is uid 0 and the program uid 65534
without capabilities, so the program can neither signal, trace nor open it, and what the program prints
reaches the host only inside the server's frames (see that module for the one way left, the memory
cgroup's OOM killer, and why it is safe). The host enforces the wall-clock limit and the output budget
itself and, on a timeout, an overflow, an abnormal exit or a scorer error, asks the server to kill and clean
(``RUNNER clean`` as the sandbox uid) before the container is used again; a container that does not come
back clean, or whose server stopped answering, is removed and replaced. No seccomp filter is installed (the
engine's default profile applies where the engine has one): memfd and ``/dev/shm`` are bounded by the
memory cgroup instead, and the kernel keyrings of uid 65534, which containers share, stay reachable.

The program folder is bind-mounted read-only from a per-container host folder, so the engine must share
this host's file system (a local engine). The image is any Python image the user names (``image=``,
or ``LOPD_SANDBOX_IMAGE``) whose ``python`` is on ``PATH`` and which lets ``docker exec`` run as root;
``lopd sandbox build-image`` builds one offline from this host's interpreter.

What a run means (deadlines, output budget, scorer, verdict) is not here: :mod:`.supervise`, shared with the
local backends.
"""

from __future__ import annotations

import atexit
import functools
import os
import secrets
import select
import shutil
import socket
import struct
import tempfile
import threading
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from lopd_envs.sandbox import docker_server as wire
from lopd_envs.sandbox.base import (
    BOOTSTRAP,
    Interact,
    Limits,
    MiB,
    OutputBudget,
    RunResult,
    Sandbox,
    SandboxUnavailable,
)
from lopd_envs.sandbox.docker_image import PATH, default_tag
from lopd_envs.sandbox.interpreter import Interpreter
from lopd_envs.sandbox.spares import ENV_SPARES
from lopd_envs.sandbox.supervise import Supervision

ENV_IMAGE = "LOPD_SANDBOX_IMAGE"
LABEL = "lopd.sandbox.owner"
SANDBOX_UID = 65534
UID = f"{SANDBOX_UID}:{SANDBOX_UID}"  # the runs' user, as ``docker exec`` takes it
#: The container's processes start as root: only the run server (an exec as root) keeps CAP_SETUID and
#: CAP_SETGID, to drop each run to ``SANDBOX_UID``; the init holds them too but runs nothing else.
ROOT = "0:0"
CAPS = ["SETUID", "SETGID"]
#: At most this much stdin is in flight to a run server (it keeps its own buffers small and always reads).
WINDOW = 1 << 20
#: How long the host waits for the server's answer to a kill-and-clean request before giving up on it (and
#: replacing the container): the cleaner itself gives up after 2 s of processes that will not go.
CLEAN_TIMEOUT = 5.0
#: The container's first process: it only reaps the orphans that runs leave (a pid slot each otherwise).
INIT = r"""
import os, signal
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
while True:
    try:
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
    except ChildProcessError:
        pass
    signal.sigtimedwait({signal.SIGCHLD}, 5)
"""
#: ``python -I -S -c RUNNER spare|clean BOOTSTRAP``, started by the run server as the sandbox uid. ``spare``:
#: clean, fork; the child waits for the bootstrap's arguments (limits, program path) as the first bytes of
#: stdin (a 4-byte big-endian length, then the arguments joined by NUL; exact reads, so the program's stdin is
#: left whole) and runs the bootstrap (an interpreter already started: one start-up per run, not two); the
#: parent cleans again when the child ends and exits with its status (128 + signal when killed). The server
#: starts the next run's spare as soon as a run is over, so all of that is done before the run is asked for;
#: a spare has run nothing but this prelude and serves one run. EOF before the arguments: exit at once.
#: ``clean``: clean, then print ``clean`` when no other process of the uid is left and both folders are
#: empty. Exit 125: could not clean.
RUNNER = r"""
import os, sys, _signal as signal  # not signal: its enum import alone costs about a third of a start-up
if os.stat("/proc/self/fd").st_uid != 0:  # still dumpable (lopd's image makes it so from an execute-only binary)
    import ctypes
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: no ptrace, no /proc/<pid>/fd from the program
    if os.stat("/proc/self/fd").st_uid != 0:
        os.write(2, b"lopd sandbox: cannot make the runner non-dumpable\n")
        os._exit(125)
_SIGS = [s for s in range(1, signal.NSIG) if s not in (signal.SIGKILL, signal.SIGSTOP, signal.SIGCHLD)]
for _s in _SIGS:
    try:
        signal.signal(_s, signal.SIG_IGN)
    except (OSError, ValueError):
        pass

def _kill_all():
    try:
        os.kill(-1, signal.SIGKILL)  # every process we may signal, except ourselves and the init
    except ProcessLookupError:
        pass

def _wipe(top):
    for root, dirs, files in os.walk(top, topdown=False):
        for name in files + dirs:
            path = os.path.join(root, name)
            try:
                os.chmod(root, 0o700)
                if os.path.isdir(path) and not os.path.islink(path):
                    os.rmdir(path)
                else:
                    os.unlink(path)
            except OSError:
                pass
    return not os.listdir(top)

def _others():  # live processes of our uid (the init and the run server are root's: not ours to clean)
    me, uid, left = os.getpid(), "Uid:\t%d\t" % os.getuid(), []
    for pid in os.listdir("/proc"):
        if pid.isdigit() and int(pid) not in (1, me):
            try:
                with open(f"/proc/{pid}/status") as f:
                    status = f.read(1024)
            except OSError:
                continue
            if uid in status and "State:\tZ" not in status:
                left.append(pid)
    return left

def _clean():
    _kill_all()
    return all([_wipe(d) for d in ("/tmp", "/dev/shm") if os.path.isdir(d)])

if sys.argv[1] == "clean":
    import time
    ok = _clean()
    for _ in range(200):  # SIGKILL is delivered asynchronously: wait (up to 2 s) until they are gone
        if not _others():
            break
        time.sleep(0.01)
        _kill_all()
    print("clean" if ok and not _others() else "dirty", flush=True)
    os._exit(0)

# a spare: nothing of the uid runs between the end of the last run (its supervisor killed all and is reaped)
# and this start, so the container is cleaned now and the program's process forked now, ahead of the run
if not _clean():
    os.write(2, b"lopd sandbox: the container could not be cleaned\n")
    os._exit(125)
_pid = os.fork()
if _pid:
    while True:
        try:
            _, status = os.waitpid(_pid, 0)
            break
        except InterruptedError:
            continue
    _clean()
    code = os.waitstatus_to_exitcode(status)
    os._exit(128 - code if code < 0 else code)
for _s in _SIGS:  # the child: a fresh interpreter already started, so no second start-up
    try:
        signal.signal(_s, signal.SIG_DFL)
    except (OSError, ValueError):
        pass
signal.signal(signal.SIGINT, signal.default_int_handler)

def _get(n):
    got = b""
    while len(got) < n:
        data = os.read(0, n - len(got))
        if not data:  # the spare was discarded, or the server is gone
            os._exit(0)
        got += data
    return got

sys.argv[3:] = _get(int.from_bytes(_get(4), "big")).decode("utf-8", "surrogateescape").split("\0")
del _get
_boot, sys.argv = sys.argv[2], ["-c", *sys.argv[3:]]
exec(compile(_boot, "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
"""

#: ``python -I -S -c SERVER 65534 RUNNER BOOTSTRAP``: the run server, one long-lived exec per container.
SERVER = Path(wire.__file__).read_text(encoding="utf-8")


@dataclass(frozen=True)
class _Shape:
    """What is fixed when a container starts: runs are only sent to containers of their own shape."""

    memory: int
    processes: int
    file_size: int

    @classmethod
    def of(cls, limits: Limits) -> _Shape:
        return cls(int(limits.memory), int(limits.processes), max(int(limits.file_size), MiB))


class _Warm:
    """One started container, the host folder mounted (read-only) as its ``/sandbox``, and the open
    channel to its run server."""

    def __init__(self, container, folder: Path):
        self.container, self.folder, self.runs = container, folder, 0
        self.channel: _Channel | None = None

    def stage(self, wd: Path) -> None:
        """Replace the folder's contents with the run's files (hard links when possible: no copy)."""
        for child in self.folder.iterdir():
            shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
        for src in wd.rglob("*"):
            dest = self.folder / src.relative_to(wd)
            if src.is_dir():
                dest.mkdir(mode=0o755, exist_ok=True)
                os.chmod(dest, 0o755)
            else:
                try:
                    os.link(src, dest)
                except OSError:
                    shutil.copy2(src, dest)


class DockerSandbox(Sandbox):
    name = "docker"
    isolating = True

    def __init__(self, limits: Limits | None = None, image: str | None = None, max_containers: int | None = None,
                 warm: int | None = None, spares: int | None = None):
        super().__init__(limits)
        #: each run server keeps the next run's supervisor started ahead (``spares=0`` or
        #: ``LOPD_SANDBOX_SPARES=0``: every run starts its interpreter when it is asked for)
        self.spare_ahead = (spares if spares is not None else int(os.environ.get(ENV_SPARES, "1") or 1)) > 0
        self.image = image or default_image()
        problem = self.probe(self.image)
        if problem:
            raise SandboxUnavailable(problem)
        import docker

        from lopd_envs.sandbox.base import default_workers

        self.max_containers = max_containers or max(2, 2 * default_workers())
        self.client = docker.from_env(timeout=60, max_pool_size=self.max_containers + 4)
        labels = self.client.images.get(self.image).labels or {}
        self.python = image_interpreter(labels)
        #: folders ``lopd sandbox build-image --extra`` put in the image (e.g. numpy for LiveCodeBench)
        self.image_extras = tuple(p for p in labels.get("lopd.extra", "").split(",") if p.startswith("/"))
        self._cond = threading.Condition()
        self._idle: dict[_Shape, list[_Warm]] = {}
        self._count: dict[_Shape, int] = {}
        #: background starts in flight per shape, and the runs waiting for one of them (a run waits for one
        #: already under way rather than starting yet another container)
        self._starting: dict[_Shape, int] = {}
        self._awaiting: dict[_Shape, int] = {}
        self._all: set[_Warm] = set()
        self._closed = False
        self._owner = f"{socket.gethostname()}:{_process_id(os.getpid())}:{secrets.token_hex(4)}"
        _remove_orphans(self.client)
        atexit.register(_close, weakref.ref(self))
        # the first container is ready before this returns: a first run would otherwise pay its start (~1 s)
        # inside its own clock, where a scorer's per-test deadline (measured from before the run) counts it
        for i in range(warm if warm is not None else min(2, self.max_containers)):
            self._prestart(_Shape.of(self.limits), wait=i == 0)

    # ------------------------------------------------------------------------------ the container pool

    def _start(self, shape: _Shape) -> _Warm:
        folder = Path(tempfile.mkdtemp(prefix="lopd-docker-"))
        os.chmod(folder, 0o755)
        tmpfs = f"size={shape.file_size},nr_inodes=4096,mode=1777"
        try:
            container = self.client.containers.run(
                self.image, ["python", "-I", "-S", "-c", INIT], detach=True, user=ROOT, working_dir="/sandbox",
                network_disabled=True, network_mode="none", read_only=True, ipc_mode="private",
                tmpfs={"/tmp": tmpfs, "/dev/shm": tmpfs}, volumes={str(folder): {"bind": "/sandbox", "mode": "ro"}},
                mem_limit=shape.memory, memswap_limit=shape.memory, pids_limit=shape.processes + 3,
                cap_drop=["ALL"], cap_add=CAPS, security_opt=["no-new-privileges"],
                environment={"HOME": "/tmp", "PATH": PATH},
                sysctls={"kernel.shmmax": "0", "kernel.shmall": "0", "kernel.msgmni": "0",
                         "kernel.sem": "0 0 0 0", "fs.mqueue.queues_max": "0"},
                log_config=cast(Any, {"type": "none"}),  # the SDK makes its LogConfig of a dict
                labels={LABEL: self._owner})
        except Exception:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        warm = _Warm(container, folder)
        try:
            warm.channel = _Channel(self.client.api, cast(str, container.id), self.spare_ahead)  # started: it has an id
        except BaseException:
            _remove(warm)
            raise
        with self._cond:
            closed = self._closed
            if not closed:
                self._all.add(warm)
        if closed:  # closed while this one was starting
            _remove(warm)
            raise SandboxUnavailable("the docker sandbox was closed")
        return warm

    def _prestart(self, shape: _Shape, wait: bool = False) -> None:
        """Start one more container of ``shape`` in the background, or before returning with ``wait``
        (when under the cap)."""
        with self._cond:
            if sum(self._count.values()) >= self.max_containers:
                return
            self._count[shape] = self._count.get(shape, 0) + 1
            if not wait:
                self._starting[shape] = self._starting.get(shape, 0) + 1

        def work():
            try:
                warm = self._start(shape)
            except Exception:  # noqa: BLE001 - the next acquire starts one itself and reports the error
                with self._cond:
                    self._count[shape] = self._count.get(shape, 1) - 1
                    warm = None
            if warm is not None:
                self._release(shape, warm)
            if not wait:
                with self._cond:
                    self._starting[shape] -= 1
                    self._cond.notify_all()

        if wait:
            work()
        else:
            threading.Thread(target=work, daemon=True, name="lopd-docker-start").start()

    def _acquire(self, shape: _Shape) -> _Warm:
        with self._cond:
            while True:
                if self._idle.get(shape):
                    return self._idle[shape].pop()
                if self._starting.get(shape, 0) > self._awaiting.get(shape, 0):
                    self._awaiting[shape] = self._awaiting.get(shape, 0) + 1
                    try:
                        self._cond.wait(timeout=1.0)
                    finally:
                        self._awaiting[shape] -= 1
                    continue
                if sum(self._count.values()) < self.max_containers:
                    self._count[shape] = self._count.get(shape, 0) + 1
                    break
                spare = next((s for s, idle in self._idle.items() if idle and s != shape), None)
                if spare is not None:  # make room: retire an idle container of another shape
                    self._discard(spare, self._idle[spare].pop())
                    continue
                self._cond.wait(timeout=1.0)
        try:
            return self._start(shape)
        except Exception:
            with self._cond:
                self._count[shape] = self._count.get(shape, 1) - 1
                self._cond.notify_all()
            raise

    def _release(self, shape: _Shape, warm: _Warm) -> None:
        with self._cond:
            if not self._closed:
                self._idle.setdefault(shape, []).append(warm)
                self._cond.notify_all()
                return
        _remove(warm)

    def _discard(self, shape: _Shape, warm: _Warm) -> None:
        """Forget ``warm`` and remove its container in the background (killing whatever runs in it)."""
        with self._cond:
            self._count[shape] = self._count.get(shape, 1) - 1
            self._all.discard(warm)
            self._cond.notify_all()
        threading.Thread(target=_remove, args=(warm,), daemon=True, name="lopd-docker-remove").start()

    def close(self) -> None:
        """Remove the idle containers (waiting up to 30 s for those being started). The sandbox stays
        usable, as the other backends' do after closing their spares: it is shared by every env of the
        process (:func:`lopd_envs.sandbox.get_sandbox`), so one env's ``close`` must not break another's
        next run; that run starts a new container. Containers busy with a run go back to the idle set."""
        with self._cond:
            self._cond.wait_for(lambda: not any(self._starting.values()), 30.0)
            idle = [(shape, warm) for shape, warms in self._idle.items() for warm in warms]
            self._idle = {}
            for shape, warm in idle:
                self._count[shape] = self._count.get(shape, 1) - 1
                self._all.discard(warm)
            self._cond.notify_all()
        _remove_all([warm for _, warm in idle])

    def shutdown(self) -> None:
        """Remove every container this sandbox started and refuse new ones (run at interpreter exit)."""
        with self._cond:
            self._closed = True
            everything, self._all = list(self._all), set()
            self._idle, self._count = {}, {}
            self._cond.notify_all()
        _remove_all(everything)

    # ----------------------------------------------------------------------------------------- one run

    def _run(self, wd: Path, stdin: bytes, limits: Limits, interact: Interact | None = None) -> RunResult:
        shape = _Shape.of(limits)
        attempt = dead = 0
        while True:
            warm = self._acquire(shape)
            channel = cast(_Channel, warm.channel)  # a pooled container's channel is open (_start)
            if not channel.alive():  # the container or its server died while idle: a fresh one
                self._replace(shape, warm)
                dead += 1
                if dead > 2 * self.max_containers:
                    raise RuntimeError(f"the containers' run servers keep dying{channel.tail()}")
                continue
            clean = False
            try:
                warm.stage(wd)
                result, clean = self._exec(warm, stdin, limits, interact)
            finally:
                if clean:
                    self._release(shape, warm)
                else:
                    self._replace(shape, warm)
            if result.exit_code == 125 and result.stderr.startswith("lopd sandbox:"):
                if attempt == 0:
                    attempt += 1
                    continue  # the container could not be cleaned before the program ran: a fresh one
                raise RuntimeError(result.stderr.strip())  # the program never ran: a sandbox error
            return result

    def _replace(self, shape: _Shape, warm: _Warm) -> None:
        self._discard(shape, warm)
        self._prestart(shape)

    def _exec(self, warm: _Warm, stdin: bytes, limits: Limits, interact: Interact | None) -> tuple[RunResult, bool]:
        """One run on ``warm``'s server, streamed until it ends or a limit is hit; also whether the container
        may be reused. Every way out that leaves the program running (timeout, overflow, a scorer deadline,
        a scorer error) has the server kill and clean before this returns."""
        args = limits.rlimit_args()
        args[3] = "-1"  # RLIMIT_NPROC counts uid 65534 across every container: the pids cgroup limits it
        channel = cast(_Channel, warm.channel)  # a pooled container's channel is open (_start)
        feed = _Feed(stdin, close=interact is None)
        start = time.monotonic()
        channel.queue(wire.RUN, "\0".join([*args, "/sandbox/main.py"]).encode())
        feed.top_up(channel)
        watch = Supervision(limits, interact, start)  # waiting for a container is not the program's time
        finished = gone = False
        exit_code: int | None = None
        while not (finished or watch.over):
            wait = watch.remaining()
            if wait is None:
                break
            frames = channel.receive(min(wait, 1.0))
            if frames is None:
                gone = True
                break
            for kind, payload in frames:
                if kind in (wire.STDOUT, wire.STDERR):
                    answer = watch.take(OutputBudget.STDOUT if kind == wire.STDOUT else OutputBudget.STDERR, payload)
                    if answer:
                        feed.answer(channel, answer)
                elif kind == wire.TAKEN:
                    feed.taken(int(payload))
                elif kind == wire.EXIT:
                    exit_code, finished = int(payload), True
                if watch.over:
                    break
            feed.top_up(channel)
        wall = time.monotonic() - start
        if gone:
            watch.fail(f"the container's run server stopped during the run{channel.tail()}")
            clean = False
        elif finished and exit_code is not None and exit_code < 125:
            clean = True
        else:  # killed, stopped, or the runner could not clean: the server kills and cleans before reuse
            clean = channel.kill_and_clean()
        return watch.result(exit_code if finished else None, self.name, True, wall=wall), clean

    @classmethod
    def probe(cls, image: str | None = None) -> str | None:
        return _probe(image or default_image())


class _Feed:
    """The run's stdin, sent to the server at most :data:`WINDOW` bytes ahead of what it has taken, then
    (without a scorer talking to the program) the end of it."""

    def __init__(self, data: bytes, close: bool):
        self.data, self.offset, self.close = memoryview(data), 0, close
        self.sent = self.acked = 0

    def top_up(self, channel: _Channel) -> None:
        while self.offset < len(self.data) and self.sent - self.acked < WINDOW:
            size = min(wire.CHUNK, WINDOW - (self.sent - self.acked), len(self.data) - self.offset)
            channel.queue(wire.STDIN, bytes(self.data[self.offset:self.offset + size]))
            self.offset += size
            self.sent += size
        if self.close and self.offset >= len(self.data):
            channel.queue(wire.EOF)
            self.close = False
        channel.flush()

    def answer(self, channel: _Channel, data: bytes) -> None:
        channel.queue(wire.STDIN, data)
        self.sent += len(data)

    def taken(self, n: int) -> None:
        self.acked = min(self.sent, self.acked + n)


class _Channel:
    """The host's end of a container's run server (:mod:`~lopd_envs.sandbox.docker_server`): one exec,
    started with the container and kept open. The exec's socket carries Docker's multiplexed stream (8-byte
    headers: stream, 0, 0, 0, big-endian length); the server's stdout inside it carries our frames."""

    def __init__(self, api, container_id: str, spares: bool = True, timeout: float = 30.0):
        argv = ["python", "-I", "-S", "-c", SERVER, str(SANDBOX_UID), "1" if spares else "0", RUNNER, BOOTSTRAP]
        exec_id = api.exec_create(container_id, argv, stdin=True, user=ROOT, workdir="/", environment=_env())["Id"]
        self.sock = api.exec_start(exec_id, socket=True)
        self.raw: socket.socket = getattr(self.sock, "_sock", self.sock)
        self.raw.setblocking(False)
        self.poller = select.poll()  # poll, not select: a trainer's descriptors pass 1024
        self.mux, self.data, self.errors, self.out = bytearray(), bytearray(), bytearray(), bytearray()
        self.closed = False
        # the server says nothing before this hello, so no byte of its stream can have been read (and
        # buffered) by the SDK's HTTP response before the socket is ours
        self.queue(wire.HELLO)
        deadline = time.monotonic() + timeout
        self.pid = None
        while self.pid is None:
            frames = self.receive(deadline - time.monotonic())
            if frames is None or time.monotonic() >= deadline:
                self.close()
                raise SandboxUnavailable(f"the run server did not start in the container{self.tail()}")
            self.pid = next((int(p) for k, p in frames if k == wire.READY), None)

    def queue(self, kind: bytes, payload: bytes = b"") -> None:
        self.out += wire.frame(kind, payload)

    def flush(self) -> None:
        """Send what the socket takes now (the server always reads, so the rest goes on the next poll)."""
        while self.out and not self.closed:
            try:
                sent = self.raw.send(self.out)
            except BlockingIOError:
                return
            except OSError:
                self.closed = True
                return
            del self.out[:sent]

    def receive(self, wait: float) -> list[tuple[bytes, bytes]] | None:
        """The server's frames that arrive within ``wait`` seconds (maybe none); ``None`` once it is gone."""
        self.flush()
        if self.closed:
            return None
        self.poller.register(self.raw, select.POLLIN | (select.POLLOUT if self.out else 0))
        events = self.poller.poll(max(wait, 0.0) * 1000)
        if not events:
            return []
        if events[0][1] & select.POLLOUT:
            self.flush()
        if not events[0][1] & (select.POLLIN | select.POLLHUP | select.POLLERR):
            return []
        try:
            data = self.raw.recv(1 << 18)
        except BlockingIOError:
            return []
        except OSError:
            data = b""
        if not data:
            self.closed = True
            return None
        self.mux += data
        while len(self.mux) >= 8:
            stream, size = self.mux[0], struct.unpack_from(">I", self.mux, 4)[0]
            if len(self.mux) < 8 + size:
                break
            (self.data if stream == 1 else self.errors).extend(self.mux[8:8 + size])
            del self.mux[:8 + size]
        del self.errors[:-2000]
        return wire.split_frames(self.data)

    def alive(self) -> bool:
        """Whether the idle server is still there (anything but a late stdin receipt means it is not)."""
        frames = self.receive(0)
        return frames is not None and all(kind == wire.TAKEN for kind, _ in frames)

    def kill_and_clean(self) -> bool:
        """Have the server kill whatever runs and clean the container; ``True`` when it says it is clean.
        Frames of the run still in flight are dropped on the way."""
        self.queue(wire.KILL)
        deadline = time.monotonic() + CLEAN_TIMEOUT
        while time.monotonic() < deadline:
            frames = self.receive(deadline - time.monotonic())
            if frames is None:
                return False
            for kind, payload in frames:
                if kind == wire.CLEAN:
                    return payload == b"clean"
        return False

    def tail(self) -> str:
        text = self.errors.decode("utf-8", "replace").strip()[-500:]
        return f"; its stderr: {text}" if text else ""

    def close(self) -> None:
        """Really close the exec's connection: ``close`` alone waits for the SDK's file wrappers to go."""
        self.closed = True
        for step in (lambda: self.raw.shutdown(socket.SHUT_RDWR), self.raw.close, self.sock.close):
            try:
                step()
            except OSError:
                pass


def _env() -> dict[str, str]:
    from lopd_envs.sandbox.base import scrubbed_env

    return {**scrubbed_env("/tmp"), "PATH": PATH}


def _remove(warm: _Warm) -> None:
    try:
        warm.container.remove(force=True)
    except Exception:  # noqa: BLE001 - already gone
        pass
    if warm.channel is not None:
        warm.channel.close()
    shutil.rmtree(warm.folder, ignore_errors=True)


def _remove_orphans(client) -> None:
    """Remove containers left by lopd processes of this host that no longer exist (killed with -9)."""
    host = socket.gethostname()
    try:
        for container in client.containers.list(all=True, filters={"label": LABEL}):
            name, pid, started, _ = [*container.labels.get(LABEL, "").split(":"), "", "", "", ""][:4]
            if name == host and pid.isdigit() and _process_id(int(pid)) != f"{pid}:{started}":
                container.remove(force=True)
    except Exception:  # noqa: BLE001 - best effort
        pass


def _process_id(pid: int) -> str:
    """``pid:start-time``: a pid alone may have been reused by the time it is checked."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f"{pid}:{f.read().rsplit(')', 1)[1].split()[19]}"
    except (OSError, IndexError):
        return f"{pid}:gone"


def _close(ref: weakref.ref[DockerSandbox]) -> None:
    sandbox = ref()
    if sandbox is not None:
        sandbox.shutdown()


def _remove_all(warms: list[_Warm]) -> None:
    threads = [threading.Thread(target=_remove, args=(warm,)) for warm in warms]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)


def image_interpreter(labels: dict) -> Interpreter | None:
    """The interpreter an image built by ``lopd sandbox build-image`` holds (from its labels), so that caches
    keyed by the sandbox's Python version (evalplus's expected outputs) tell images apart; ``None`` for
    other images."""
    try:
        version = tuple(int(x) for x in labels["lopd.python"].split("."))
        return Interpreter(labels["lopd.executable"], version, (), ())  # type: ignore[arg-type]
    except (KeyError, ValueError):
        return None


def default_image() -> str:
    """``LOPD_SANDBOX_IMAGE``, else the image ``lopd sandbox build-image`` builds here."""
    return os.environ.get(ENV_IMAGE) or default_tag()


BUILD_HINT = ("build it offline from this host's Python with `lopd sandbox build-image` (or name another "
              f"Python image with ${ENV_IMAGE} / image=)")


@functools.cache
def _probe(image: str) -> str | None:
    try:
        import docker
    except ImportError:
        return "the docker SDK is not installed (pip install 'lopd[docker]')"
    try:
        client = docker.from_env(timeout=5)
        client.ping()
    except Exception as exc:  # noqa: BLE001 - any failure means no engine
        return (f"no Docker engine reachable ({type(exc).__name__}); start one (Debian: apt-get install docker.io, "
                "then dockerd as root) or point DOCKER_HOST at it")
    try:
        client.images.get(image)
    except Exception:  # noqa: BLE001
        return f"docker image {image} is not present: {BUILD_HINT}"
    return None
