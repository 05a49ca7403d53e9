"""Docker backend (the ``docker`` SDK), for machines where an engine is reachable but bubblewrap is not
(macOS, Windows, locked-down clusters).

Starting a container costs 0.5-1 s, so containers are started ahead and kept warm: each run is an
``exec`` of a fresh interpreter (the run's supervisor, which forks the program: one interpreter start per
run) inside an idle container, streamed over the exec's socket (so ``interact``, its per-test
``deadline()`` and a scorer that raises work as with the other backends). A container is locked down once, when it starts: no
network, read-only root file system, size- and inode-capped ``/tmp`` and ``/dev/shm``, uid 65534, all
capabilities dropped, ``no-new-privileges``, a memory cgroup (swap included, ``/dev/shm`` and memfd pages
count in it), a pids cgroup, and no SysV IPC or POSIX message queues (their namespaced limits set to
zero). Each run's rlimits are set by the same bootstrap as the other backends, except RLIMIT_NPROC: uid
65534 is the same host uid in every container, so the pids cgroup counts processes instead.

No state passes from one run to the next. A run is started by :data:`RUNNER`, which makes itself
non-dumpable (the program cannot ptrace it or open its descriptors), kills every other process of the
sandbox uid in the container (``kill(-1)``), empties ``/tmp`` and ``/dev/shm``, then starts the program;
when the program exits it kills everything again, so children left behind neither hold the output open
nor outlive the run. The host enforces the wall-clock limit itself and, on a timeout, an overflow, an
abnormal exit or a scorer error, runs a separate clean-up exec before the container is used again; a
container that does not come back clean is removed and replaced. No seccomp filter is installed (the
engine's default profile applies where the engine has one): memfd and ``/dev/shm`` are bounded by the
memory cgroup instead, and the kernel keyrings of uid 65534, which containers share, stay reachable.

The program folder is bind-mounted read-only from a per-container host folder, so the engine must share
this host's file system (a local engine). The image is any Python image the user names (``image=``,
or ``LOPD_SANDBOX_IMAGE``); ``lopd sandbox build-image`` builds one offline from this host's interpreter.
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

from lopd_envs.sandbox.base import (BOOTSTRAP, Interact, Limits, MiB, RunResult, Sandbox, SandboxUnavailable,
                                    looks_out_of_memory)
from lopd_envs.sandbox.docker_image import PATH, default_tag
from lopd_envs.sandbox.interpreter import Interpreter
from lopd_envs.sandbox.runner import STREAMED_STDOUT_KEPT

ENV_IMAGE = "LOPD_SANDBOX_IMAGE"
LABEL = "lopd.sandbox.owner"
UID = "65534:65534"
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
#: ``python -I -S -c RUNNER run|clean BOOTSTRAP <bootstrap args...>``. ``run``: clean, fork, run the
#: bootstrap in the child (an interpreter already started: one start-up per run, not two), clean again when
#: it ends, exit with its status (128 + signal when killed). ``clean``: clean, then print
#: ``clean`` when no other process is left and both folders are empty. Exit 125: could not clean.
RUNNER = r"""
import os, signal, sys
if os.stat("/proc/self/fd").st_uid != 0:  # still dumpable (lopd's image makes it so from an execute-only binary)
    import ctypes
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: no ptrace, no /proc/<pid>/fd from the program
    if os.stat("/proc/self/fd").st_uid != 0:
        os.write(2, b"lopd sandbox: cannot make the runner non-dumpable\n")
        os._exit(125)
_SIGS = [s for s in signal.Signals if s not in (signal.SIGKILL, signal.SIGSTOP, signal.SIGCHLD)]
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

def _others():
    me, left = os.getpid(), []
    for pid in os.listdir("/proc"):
        if pid.isdigit() and int(pid) not in (1, me):
            try:
                with open(f"/proc/{pid}/stat") as f:
                    if f.read().rsplit(")", 1)[1].split()[0] != "Z":
                        left.append(pid)
            except (OSError, IndexError):
                pass
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
_boot, sys.argv = sys.argv[2], ["-c", *sys.argv[3:]]
exec(compile(_boot, "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
"""


@dataclass(frozen=True)
class _Shape:
    """What is fixed when a container starts: runs are only sent to containers of their own shape."""

    memory: int
    processes: int
    file_size: int

    @classmethod
    def of(cls, limits: Limits) -> "_Shape":
        return cls(int(limits.memory), int(limits.processes), max(int(limits.file_size), MiB))


class _Warm:
    """One started container and the host folder mounted (read-only) as its ``/sandbox``."""

    def __init__(self, container, folder: Path):
        self.container, self.folder, self.runs = container, folder, 0

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
                 warm: int | None = None):
        super().__init__(limits)
        self.image = image or default_image()
        problem = self.probe(self.image)
        if problem:
            raise SandboxUnavailable(problem)
        import docker

        from lopd_envs.sandbox.pool import default_workers

        self.max_containers = max_containers or max(2, 2 * default_workers())
        self.client = docker.from_env(timeout=60, max_pool_size=self.max_containers + 4)
        labels = self.client.images.get(self.image).labels or {}
        self.python = image_interpreter(labels)
        #: folders ``lopd sandbox build-image --extra`` put in the image (e.g. numpy for LiveCodeBench)
        self.image_extras = tuple(p for p in labels.get("lopd.extra", "").split(",") if p.startswith("/"))
        self._cond = threading.Condition()
        self._idle: dict[_Shape, list[_Warm]] = {}
        self._count: dict[_Shape, int] = {}
        self._all: set[_Warm] = set()
        self._closed = False
        self._owner = f"{socket.gethostname()}:{_process_id(os.getpid())}:{secrets.token_hex(4)}"
        _remove_orphans(self.client)
        atexit.register(_close, weakref.ref(self))
        for _ in range(warm if warm is not None else min(2, self.max_containers)):
            self._prestart(_Shape.of(self.limits))

    # ------------------------------------------------------------------------------ the container pool

    def _start(self, shape: _Shape) -> _Warm:
        folder = Path(tempfile.mkdtemp(prefix="lopd-docker-"))
        os.chmod(folder, 0o755)
        tmpfs = f"size={shape.file_size},nr_inodes=4096,mode=1777"
        try:
            container = self.client.containers.run(
                self.image, ["python", "-I", "-S", "-c", INIT], detach=True, user=UID, working_dir="/sandbox",
                network_disabled=True, network_mode="none", read_only=True, ipc_mode="private",
                tmpfs={"/tmp": tmpfs, "/dev/shm": tmpfs}, volumes={str(folder): {"bind": "/sandbox", "mode": "ro"}},
                mem_limit=shape.memory, memswap_limit=shape.memory, pids_limit=shape.processes + 2,
                cap_drop=["ALL"], security_opt=["no-new-privileges"], environment={"HOME": "/tmp", "PATH": PATH},
                sysctls={"kernel.shmmax": "0", "kernel.shmall": "0", "kernel.msgmni": "0",
                         "kernel.sem": "0 0 0 0", "fs.mqueue.queues_max": "0"},
                log_config={"type": "none"}, labels={LABEL: self._owner})
        except Exception:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        warm = _Warm(container, folder)
        with self._cond:
            closed = self._closed
            if not closed:
                self._all.add(warm)
        if closed:  # closed while this one was starting
            _remove(warm)
            raise SandboxUnavailable("the docker sandbox was closed")
        return warm

    def _prestart(self, shape: _Shape) -> None:
        """Start one more container of ``shape`` in the background (when under the cap)."""
        with self._cond:
            if sum(self._count.values()) >= self.max_containers:
                return
            self._count[shape] = self._count.get(shape, 0) + 1

        def work():
            try:
                warm = self._start(shape)
            except Exception:  # noqa: BLE001 - the next acquire starts one itself and reports the error
                with self._cond:
                    self._count[shape] = self._count.get(shape, 1) - 1
                    self._cond.notify_all()
                return
            self._release(shape, warm)

        threading.Thread(target=work, daemon=True, name="lopd-docker-start").start()

    def _acquire(self, shape: _Shape) -> _Warm:
        with self._cond:
            while True:
                if self._idle.get(shape):
                    return self._idle[shape].pop()
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
        """Remove every container this sandbox started (also run at interpreter exit)."""
        with self._cond:
            self._closed = True
            everything, self._all = list(self._all), set()
            self._idle, self._count = {}, {}
        threads = [threading.Thread(target=_remove, args=(warm,)) for warm in everything]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)

    # ----------------------------------------------------------------------------------------- one run

    def _run(self, wd: Path, stdin: bytes, limits: Limits, interact: Interact | None = None) -> RunResult:
        shape = _Shape.of(limits)
        for attempt in (0, 1):
            warm = self._acquire(shape)
            clean = False
            try:
                warm.stage(wd)
                result, clean = self._exec(warm, stdin, limits, interact)
            except Exception as exc:
                stale = _is_gone(exc)
                clean = False
                if stale and attempt == 0:  # the container died while idle: retry once on a fresh one
                    continue
                raise
            finally:
                if clean:
                    self._release(shape, warm)
                else:
                    self._discard(shape, warm)
                    self._prestart(shape)
            if result.exit_code == 125 and result.stderr.startswith("lopd sandbox:"):
                if attempt == 0:
                    continue  # the container could not be cleaned before the program ran: a fresh one
                raise RuntimeError(result.stderr.strip())  # the program never ran: a sandbox error
            return result
        raise RuntimeError("no clean container")

    def _exec(self, warm: _Warm, stdin: bytes, limits: Limits, interact: Interact | None) -> tuple[RunResult, bool]:
        """One exec in ``warm``, streamed until it ends or a limit is hit; also whether the container may
        be reused. Every way out that leaves the program running (timeout, overflow, a scorer deadline, a
        scorer error) kills it with the clean-up exec before this returns."""
        args = limits.rlimit_args()
        args[3] = "-1"  # RLIMIT_NPROC counts uid 65534 across every container: the pids cgroup limits it
        api = self.client.api
        argv = ["python", "-I", "-S", "-c", RUNNER, "run", BOOTSTRAP, *args, "/sandbox/main.py"]
        exec_id = api.exec_create(warm.container.id, argv, stdin=True, user=UID, workdir="/sandbox",
                                  environment=_env())["Id"]
        start = time.monotonic()
        sock = api.exec_start(exec_id, socket=True)
        raw: socket.socket = getattr(sock, "_sock", sock)
        stream = _Stream(raw, limits.output, kept_stdout=limits.output if interact is None else
                         min(limits.output, STREAMED_STDOUT_KEPT))
        writer = threading.Thread(target=_feed, args=(raw, stdin, interact is None), daemon=True)
        writer.start()
        test_deadline = getattr(interact, "deadline", None)
        poller = select.poll()
        poller.register(raw, select.POLLIN)
        deadline = start + limits.timeout
        timed_out = stopped = finished = False
        error = None
        try:
            while not stream.truncated:
                now = time.monotonic()
                test = test_deadline() if test_deadline is not None else None
                if test is not None and test <= now:
                    stopped = True
                    break
                if now >= deadline:
                    timed_out = True
                    break
                wait = min(deadline, test if test is not None else deadline) - now
                if not poller.poll(min(wait, 1.0) * 1000):  # poll, not select: a trainer's fds pass 1024
                    continue
                chunks = stream.read()
                if chunks is None:
                    finished = True
                    break
                if interact is not None:
                    try:
                        answer = b"".join(filter(None, [interact(chunk) for chunk in chunks]))
                    except Exception as exc:  # noqa: BLE001 - candidate output made the scorer fail
                        error = f"the scorer failed on the program's output: {type(exc).__name__}: {exc}"[:500]
                        break
                    if answer:
                        raw.sendall(answer)
        finally:
            _hang_up(sock, raw)  # first: the engine's copy of the output must not block on us
            clean = finished or self._clean(warm)  # kill the program before anything else
            writer.join(timeout=1.0)
        wall = time.monotonic() - start
        exit_code = api.exec_inspect(exec_id).get("ExitCode") if finished else None
        if finished and not (exit_code is not None and exit_code < 125):
            clean = self._clean(warm)  # killed, or the runner could not clean: check before reuse
        err = stream.text(2)
        oom = finished and not stream.truncated and looks_out_of_memory(exit_code, err)
        return RunResult(stream.text(1), err, exit_code, timed_out, oom, wall, self.name, True,
                         truncated=stream.truncated, error=error, stopped=stopped), clean

    def _clean(self, warm: _Warm) -> bool:
        """Kill everything left in the container and empty its folders; ``True`` when it is clean again."""
        for _ in range(3):  # the run's own runner, ending at the same moment, may kill this one: retry
            try:
                out = warm.container.exec_run(["python", "-I", "-S", "-c", RUNNER, "clean"], user=UID,
                                              workdir="/", environment=_env())
            except Exception:  # noqa: BLE001 - unreachable or dead: the caller discards it
                return False
            if out.exit_code != 137:
                return out.exit_code == 0 and out.output.strip() == b"clean"
        return False

    @classmethod
    def probe(cls, image: str | None = None) -> str | None:
        return _probe(image or default_image())


class _Stream:
    """Docker's multiplexed exec stream (8-byte headers: stream, 0, 0, 0, big-endian length). ``cap``
    bounds all output (the run is killed past it); ``kept_stdout`` is how much stdout is also kept when a
    scorer reads it live."""

    def __init__(self, sock: socket.socket, cap: int, kept_stdout: int):
        self.sock, self.cap, self.buffer = sock, cap, b""
        self.parts: dict[int, list[bytes]] = {1: [], 2: []}
        self.room = {1: kept_stdout, 2: cap}
        self.total, self.truncated = 0, False

    def read(self) -> list[bytes] | None:
        """The stdout chunks completed by what the socket has now; ``None`` at the end of the stream."""
        data = self.sock.recv(1 << 16)
        if not data:
            return None
        self.buffer += data
        out = []
        while len(self.buffer) >= 8:
            kind, size = self.buffer[0], struct.unpack(">I", self.buffer[4:8])[0]
            if len(self.buffer) < 8 + size:
                break
            payload, self.buffer = self.buffer[8:8 + size], self.buffer[8 + size:]
            self.total += len(payload)
            if kind in self.parts:
                self.parts[kind].append(payload[:max(self.room[kind], 0)])
                self.room[kind] -= len(payload)
                if kind == 1:
                    out.append(payload)
            if self.total > self.cap:
                self.truncated = True
                break
        return out

    def text(self, kind: int) -> str:
        return b"".join(self.parts[kind]).decode("utf-8", "replace")


def _hang_up(sock, raw: socket.socket) -> None:
    """Really close the exec's connection: ``close`` alone waits for the SDK's file wrappers to go."""
    for step in (lambda: raw.shutdown(socket.SHUT_RDWR), raw.close, sock.close):
        try:
            step()
        except OSError:
            pass


def _feed(sock: socket.socket, data: bytes, close: bool) -> None:
    try:
        if data:
            sock.sendall(data)
        if close:
            sock.shutdown(socket.SHUT_WR)  # the program sees the end of its stdin
    except OSError:
        pass


def _env() -> dict[str, str]:
    from lopd_envs.sandbox.base import scrubbed_env

    return {**scrubbed_env("/tmp"), "PATH": PATH}


def _is_gone(exc: Exception) -> bool:
    """The container is not running any more (it was killed, or the engine restarted)."""
    text = str(exc)
    return "is not running" in text or "No such container" in text or "409" in text


def _remove(warm: _Warm) -> None:
    try:
        warm.container.remove(force=True)
    except Exception:  # noqa: BLE001 - already gone
        pass
    shutil.rmtree(warm.folder, ignore_errors=True)


def _remove_orphans(client) -> None:
    """Remove containers left by lopd processes of this host that no longer exist (killed with -9)."""
    host = socket.gethostname()
    try:
        for container in client.containers.list(all=True, filters={"label": LABEL}):
            name, pid, started, _ = (container.labels.get(LABEL, "").split(":") + ["", "", "", ""])[:4]
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


def _close(ref: "weakref.ref[DockerSandbox]") -> None:
    sandbox = ref()
    if sandbox is not None:
        sandbox.close()


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


@functools.lru_cache(maxsize=None)
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
