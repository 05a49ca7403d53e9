"""The Docker backend's run server: one per container, started once when the container is warmed, so that a
run costs no round trip through the engine (a ``docker exec`` costs ~100 ms; a frame on an open exec ~1 ms).

It runs inside the container (``python -I -S -c <this file> UID SPARES RUNNER BOOTSTRAP``, standard library
only) as root with only CAP_SETUID and CAP_SETGID. For each run it forks, drops to the sandbox uid and
executes a fresh interpreter running the docker backend's ``RUNNER`` (the run's supervisor, which cleans the
container, forks the program and cleans again), exactly as a ``docker exec`` of it did, and hands it the
run's arguments as the first bytes of its stdin. With ``SPARES`` 1 that interpreter is started as soon as
the previous run is over (a *spare*: it has run nothing but its start-up and waits for its arguments), so a
run no longer waits for an interpreter to start; a spare serves exactly one run, and one that died while
waiting is never used. It relays bytes and exit statuses and decides nothing: the host keeps the
wall-clock limit, the output budget and every verdict.

Why root, and why the program cannot reach it: kill, ptrace and ``/proc/<pid>/fd`` all require the caller to
share the target's uid or to hold a capability; the program runs as uid 65534 with no capabilities (they are
cleared by the uid change, and ``no-new-privileges`` keeps them from coming back), so it can neither signal,
trace nor open the server's pipes. No file or socket connects the two: the program's stdio are pipes the
server holds the other ends of. What the program writes reaches the host only inside this server's frames,
so it cannot forge a frame. The one way it could still end the server is the memory cgroup's OOM killer
(memory outside any process's RSS, e.g. a memfd filled with ``write``): each run starts with
``oom_score_adj`` 1000 so that its processes are picked first, and if the server dies anyway the host sees
its stream end, fails the run and replaces the container.

Wire format, both ways: one kind byte, a 4-byte big-endian length, the payload.
Host to server: ``H`` hello (answered ``S`` + the server's pid), ``R`` start a run (payload: the bootstrap's
limit arguments and the program path, NUL-separated), ``I`` bytes for the run's stdin, ``E`` close its
stdin, ``K`` kill whatever runs and clean (answered ``C`` + ``clean`` or ``dirty``).
Server to host: ``1``/``2`` the run's stdout/stderr, ``W`` + decimal count: that many ``I`` bytes were
taken (delivered or, once the program stopped reading, dropped), so the host keeps at most a window of
stdin in flight and the server's buffers stay bounded; ``X`` + decimal exit status (128 + signal when
killed) once the supervisor has exited and both its streams are closed.

It runs alone inside the container (standard library only, read as one file by :mod:`.docker`), so it
cannot use the host's helpers: its poll loop, flow control and spare handling are all written here.
"""

from __future__ import annotations

import os
import selectors
import signal
import struct
import sys
import time

HEADER = struct.Struct(">cI")
HELLO, READY, RUN, STDIN, EOF, KILL, CLEAN = b"H", b"S", b"R", b"I", b"E", b"K", b"C"
STDOUT, STDERR, TAKEN, EXIT = b"1", b"2", b"W", b"X"
#: The server stops reading a run's output while this much is still waiting to go to the host.
OUT_HIGH = 256 * 1024
CHUNK = 1 << 16
#: A failed fork (the pids cgroup full for a moment) is retried this often, 10 ms apart.
FORK_TRIES = 100


def frame(kind: bytes, payload: bytes = b"") -> bytes:
    return HEADER.pack(kind, len(payload)) + payload


def split_frames(buffer: bytearray) -> list[tuple[bytes, bytes]]:
    """Take every complete frame off the front of ``buffer``."""
    out = []
    while len(buffer) >= HEADER.size:
        kind, size = HEADER.unpack_from(buffer)
        if len(buffer) < HEADER.size + size:
            break
        out.append((kind, bytes(buffer[HEADER.size:HEADER.size + size])))
        del buffer[:HEADER.size + size]
    return out


class _Child:
    """A process the server started as the sandbox uid, and the server's ends of its pipes."""

    def __init__(self, pid: int, stdin: int | None, outputs: dict[int, bytes]):
        self.pid, self.stdin, self.outputs = pid, stdin, outputs  # outputs: fd -> the frame kind it feeds
        self.status: int | None = None
        self.pending = bytearray()  # stdin not yet written
        self.prefix = 0  # how much of ``pending``'s front is the run's arguments (not the host's stdin)
        self.close_stdin = False
        self.killed = False  # after K: output is dropped, not relayed
        self.text = bytearray()  # the cleaner's stdout


class Server:
    def __init__(self, uid: int, spares: bool, runner: str, bootstrap: str):
        self.uid, self.runner, self.bootstrap = uid, runner, bootstrap
        self.sel = selectors.DefaultSelector()
        self.inbox, self.outbox = bytearray(), bytearray()
        self.run: _Child | None = None
        self.cleaner: _Child | None = None
        self.spare: _Child | None = None
        self.spares = spares
        self.spare_deaths = 0  # spares that died while waiting: after three, every run starts cold
        self.dropped: list[_Child] = []  # discarded spares not reaped yet
        self.clean_tries = 0
        self.verdict: bytes | None = None  # the cleaner's, sent once the killed run is over too
        self.interest: dict[int, int] = {}
        for fd in (0, 1):
            os.set_blocking(fd, False)
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_r, False)
        os.set_blocking(wake_w, False)
        self.wake = wake_r
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        self._want(0, selectors.EVENT_READ)
        self._want(wake_r, selectors.EVENT_READ)

    # -- the selector ----------------------------------------------------------------------------
    def _want(self, fd: int, events: int) -> None:
        old = self.interest.get(fd, 0)
        if events == old:
            return
        if not events:
            self.sel.unregister(fd)
            del self.interest[fd]
        elif old:
            self.sel.modify(fd, events)
            self.interest[fd] = events
        else:
            self.sel.register(fd, events)
            self.interest[fd] = events

    def _close(self, fd: int) -> None:
        self._want(fd, 0)
        os.close(fd)

    def serve(self) -> None:
        while True:
            self._want(1, selectors.EVENT_WRITE if self.outbox else 0)
            for child in (self.run, self.cleaner):
                if child is None:
                    continue
                for fd in child.outputs:
                    self._want(fd, selectors.EVENT_READ if len(self.outbox) < OUT_HIGH or child.killed else 0)
                if child.stdin is not None:
                    self._want(child.stdin, selectors.EVENT_WRITE if child.pending else 0)
            for key, _ in self.sel.select():
                fd = key.fd
                if fd not in self.interest:  # closed by a handler earlier in this batch
                    continue
                if fd == 0:
                    self._from_host()
                elif fd == 1:
                    self._to_host()
                elif fd == self.wake:
                    self._reap()
                else:
                    self._pipe(fd)

    # -- the host's side -------------------------------------------------------------------------
    def _from_host(self) -> None:
        try:
            data = os.read(0, CHUNK)
        except BlockingIOError:
            return
        if not data:  # the host hung up: the container is being removed
            os._exit(0)
        self.inbox += data
        for kind, payload in split_frames(self.inbox):
            if kind == HELLO:
                self._send(READY, str(os.getpid()).encode())
                self._make_spare()
            elif kind == RUN and self.run is None and self.cleaner is None:
                self._start_run(payload.split(b"\0"))
            elif kind == STDIN:
                self._stdin(payload)
            elif kind == EOF and self.run is not None:
                self.run.close_stdin = True
                self._feed(self.run)
            elif kind == KILL:
                self._kill()

    def _send(self, kind: bytes, payload: bytes = b"") -> None:
        self.outbox += frame(kind, payload)
        self._to_host()

    def _to_host(self) -> None:
        try:
            sent = os.write(1, self.outbox)
        except BlockingIOError:
            return
        del self.outbox[:sent]

    # -- runs --------------------------------------------------------------------------------------
    def _spawn(self, argv: list[str], stdin: bool, tries: int = FORK_TRIES) -> _Child | str:
        """Fork, drop to the sandbox uid and exec ``argv`` (a fresh interpreter); the error text if it
        cannot fork."""
        child_in, server_in = os.pipe() if stdin else (os.open(os.devnull, os.O_RDONLY), None)
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        pid, problem = 0, ""
        for _ in range(tries):
            try:
                pid = os.fork()
                break
            except OSError as exc:
                problem = f"{type(exc).__name__}: {exc}"
                time.sleep(0.01)
        else:
            for fd in (child_in, server_in, out_r, out_w, err_r, err_w):
                if fd is not None:
                    os.close(fd)
            return problem
        if pid == 0:  # the child: nothing here returns
            try:
                os.dup2(child_in, 0)
                os.dup2(out_w, 1)
                os.dup2(err_w, 2)
                os.setsid()
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                try:  # raising oom_score_adj needs no privilege; the run's processes go first
                    with open("/proc/self/oom_score_adj", "w") as f:
                        f.write("1000")
                except OSError:
                    pass
                os.setgroups([])
                os.setresgid(self.uid, self.uid, self.uid)
                os.setresuid(self.uid, self.uid, self.uid)
                os.chdir("/sandbox")
                os.execv(sys.executable, argv)
            except BaseException as exc:  # noqa: BLE001 - report, and never run the server's code on
                os.write(2, f"lopd sandbox: the run server could not start the run: {exc}\n".encode())
            os._exit(125)
        for fd in (child_in, out_w, err_w):
            os.close(fd)
        for fd in (out_r, err_r) + ((server_in,) if server_in is not None else ()):
            os.set_blocking(fd, False)
        return _Child(pid, server_in, {out_r: STDOUT, err_r: STDERR})

    def _supervisor(self, tries: int = FORK_TRIES) -> _Child | str:
        return self._spawn([sys.executable, "-I", "-S", "-c", self.runner, "spare", self.bootstrap], stdin=True,
                           tries=tries)

    def _make_spare(self) -> None:
        """Start the next run's supervisor now, while nothing runs (it waits for its arguments)."""
        if self.spares and self.spare_deaths < 3 and self.spare is None and self.run is None \
                and self.cleaner is None:
            child = self._supervisor(tries=1)
            self.spare = child if isinstance(child, _Child) else None

    def _take_spare(self) -> _Child | None:
        """The waiting spare, unless it died (a dead one must not answer for a run it never saw)."""
        spare, self.spare = self.spare, None
        if spare is not None and spare.status is None:
            try:
                alive = os.waitpid(spare.pid, os.WNOHANG)[0] == 0
            except ChildProcessError:
                alive = False
            if alive:
                return spare
        if spare is not None:
            self._drop(spare, reaped=True)
        return None

    def _drop(self, child: _Child, reaped: bool = False) -> None:
        for fd in [*child.outputs, *([child.stdin] if child.stdin is not None else [])]:
            self._close(fd)
        child.outputs, child.stdin = {}, None
        if not reaped and child.status is None:
            self.dropped.append(child)  # EOF on its stdin ends it; reaped with the others

    def _start_run(self, args: list[bytes]) -> None:
        child = self._take_spare() or self._supervisor()
        if isinstance(child, str):
            self._send(STDERR, f"lopd sandbox: the run server could not fork: {child}\n".encode())
            self._send(EXIT, b"125")
            return
        body = b"\0".join(args)
        child.pending[:0] = len(body).to_bytes(4, "big") + body
        child.prefix = 4 + len(body)
        self.run = child
        self._feed(child)

    def _stdin(self, data: bytes) -> None:
        run = self.run
        if run is None or run.stdin is None or run.killed:
            self._send(TAKEN, str(len(data)).encode())  # nobody reads it: taken, so the host's window moves on
            return
        run.pending += data
        self._feed(run)

    def _feed(self, run: _Child) -> None:
        if run.stdin is None:
            return
        taken = 0
        try:
            while run.pending:
                n = os.write(run.stdin, run.pending[:CHUNK])
                del run.pending[:n]
                taken += n
        except BlockingIOError:
            pass
        except OSError:  # the program closed its stdin or is gone: what is left is dropped
            taken += len(run.pending)
            run.pending.clear()
            run.close_stdin = True
        arguments = min(run.prefix, taken)  # the run's arguments were ours, not the host's stdin
        run.prefix -= arguments
        taken -= arguments
        if taken:
            self._send(TAKEN, str(taken).encode())
        if run.close_stdin and not run.pending:
            self._close(run.stdin)
            run.stdin = None

    def _pipe(self, fd: int) -> None:
        child = self.run if self.run is not None and (fd in self.run.outputs or fd == self.run.stdin) \
            else self.cleaner
        if child is None:
            return
        if fd == child.stdin:
            self._feed(child)
            return
        try:
            data = os.read(fd, CHUNK)
        except BlockingIOError:
            return
        if data:
            if child is self.cleaner:
                if child.outputs[fd] == STDOUT:
                    child.text += data[:64]
            elif not child.killed:
                self._send(child.outputs[fd], data)
            return
        del child.outputs[fd]
        self._close(fd)
        self._settle()

    def _reap(self) -> None:
        try:
            while os.read(self.wake, 512):
                pass
        except BlockingIOError:
            pass
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if not pid:
                break
            code = os.waitstatus_to_exitcode(status)
            for child in (self.run, self.cleaner, self.spare):
                if child is not None and child.pid == pid:
                    child.status = 128 - code if code < 0 else code
            self.dropped = [child for child in self.dropped if child.pid != pid]
            if self.spare is not None and self.spare.status is not None:  # it died waiting: never used
                self.spare_deaths += 1
                spare, self.spare = self.spare, None
                self._drop(spare, reaped=True)
                self._make_spare()
        self._settle()

    def _settle(self) -> None:
        """Report a run that is over (exited, both streams closed), or the cleaner's verdict."""
        run = self.run
        if run is not None and run.status is not None and not run.outputs and not run.killed:
            if run.stdin is not None:
                self._close(run.stdin)
            self.run = None
            self._send(EXIT, str(run.status).encode())
            self._make_spare()
        cleaner = self.cleaner
        if cleaner is not None and cleaner.status is not None and not cleaner.outputs:
            self.cleaner = None
            if cleaner.status == 137 and self.clean_tries < 3:  # a supervisor ending at that moment killed it
                self._start_cleaner()
                return
            self.verdict = b"clean" if cleaner.status == 0 and cleaner.text.strip() == b"clean" else b"dirty"
        if self.verdict is None:
            return
        # the cleaner saw no process of the sandbox uid left, so the killed run's streams close and its
        # supervisor is reaped (SIGCHLD) soon: answer once that happened, or at once when it is dirty
        if run is not None and run.killed and self.verdict == b"clean" and (run.status is None or run.outputs):
            return
        self.run, verdict, self.verdict = None, self.verdict, None
        self._send(CLEAN, verdict)
        self._make_spare()

    # -- cleaning ------------------------------------------------------------------------------------
    def _kill(self) -> None:
        """Drop the run's pending stdin and output, and start the cleaner (RUNNER clean: it kills every
        process of the sandbox uid, the run's supervisor included, and empties /tmp and /dev/shm)."""
        if self.spare is not None:  # the cleaner kills it anyway; the next one starts once all is clean
            spare, self.spare = self.spare, None
            self._drop(spare)
        run = self.run
        if run is not None:
            run.killed = True
            if run.pending:
                self._send(TAKEN, str(len(run.pending)).encode())
                run.pending.clear()
            if run.stdin is not None:
                self._close(run.stdin)
                run.stdin = None
        self.clean_tries = 0
        if self.cleaner is None:
            self._start_cleaner()

    def _start_cleaner(self) -> None:
        self.clean_tries += 1
        child = self._spawn([sys.executable, "-I", "-S", "-c", self.runner, "clean"], stdin=False)
        if isinstance(child, str):
            self._send(CLEAN, b"dirty")
            return
        self.cleaner = child
        self._settle()


def main() -> None:
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    Server(int(sys.argv[1]), sys.argv[2] == "1", sys.argv[3], sys.argv[4]).serve()


if __name__ == "__main__":
    main()
