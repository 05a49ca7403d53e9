"""A long-lived sandboxed program with a request/reply channel: the persistent sibling of ``Sandbox.run``.

``Sandbox.run`` starts a fresh interpreter per program and collects its output once. Stateful suites
(EnvScaler: one environment instance per episode, built from untrusted source) need the opposite: one
sandboxed interpreter that lives for a whole episode and answers many small requests. A
:class:`SandboxSession` starts ``program`` (a Python source, run as ``main.py`` under the backend's
usual bootstrap and rlimits) and speaks length-prefixed frames on its stdin/stdout:

    frame = 4-byte big-endian length + that many bytes (a JSON object)

Everything that protects the host is enforced *here*, in the host process, never by the sandboxed side:

* every request has a wall-clock deadline that bounds each write of the request and each read of the
  reply (a worker that stops reading cannot block the host on a full pipe); when it passes, the worker
  is killed and reaped (a program that ignores signals, switches off its timers or spins in C cannot
  outlive it), and nothing after the deadline costs more than linear time in the reply's size;
* a reply's length header is checked against ``max_reply`` before a byte of the body is read, and the
  body's nesting depth is counted, in linear time, before it is parsed (:func:`nesting_depth`);
* the worker is started as a one-shot run is (:func:`.runner.launch`): inside its own cgroup where the
  host allows it, so ``limits.memory`` caps the whole sandbox (every process it forks, tmpfs pages and
  all), not each process; it is stopped as one is (:func:`.runner.stop`), inside first, so no
  ``bwrap`` is left a zombie, even for a host that is a child subreaper;
* under bubblewrap the program is its PID namespace's init (``program_is_init``): what it starts
  (EnvScaler's check functions) can neither kill nor stop it;
* each request carries a fresh random id that the reply must echo, so frames written ahead of time by
  code inside the sandbox cannot pass for the answer to a later request;
* the program's stderr is drained continuously and only its tail is kept (it cannot block or flood us);
* the worker dies with the session: :meth:`close`, garbage collection, interpreter exit, and (under
  bubblewrap) ``--die-with-parent`` when the host process itself dies.

The session reuses the backends' own command lines (``BubblewrapSandbox.argv``, ``ProcessSandbox.argv``)
and their unprivileged-uid slots, so its isolation is exactly theirs. The plain-process backend does
not isolate; a session refuses it unless the caller opts in with ``allow_unisolated=True``. Docker runs
stream (see :mod:`.docker`), but each is one program that ends, served by its container's run server; a
session's long-lived worker has no such host there yet, so Docker is refused for sessions with a clear error.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import secrets
import selectors
import struct
import subprocess
import threading
import time
import weakref
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Self

from lopd_envs.sandbox import runner, seccomp
from lopd_envs.sandbox.base import SESSION_UIDS, Limits, MiB, Sandbox, SandboxUnavailable, as_root, scrubbed_env
from lopd_envs.sandbox.folders import workdir

HEADER = struct.Struct(">I")
MAX_REPLY = 4 * MiB
MAX_DEPTH = 64
STDERR_TAIL = 16 * 1024


class SessionError(RuntimeError):
    """The worker did not answer a request properly; the session is closed when this is raised."""

    kind = "error"


class SessionTimeout(SessionError):
    kind = "timeout"


class SessionCrashed(SessionError):
    kind = "crashed"


class ReplyRejected(SessionError):
    """The reply broke the size or depth budget, or was not valid JSON."""

    kind = "bad_reply"


#: Prepend to a session program: ``read_frame() -> bytes | None`` and ``write_frame(bytes)`` on private
#: copies of fds 0/1. The real fds 0 and 1 are then pointed at /dev/null and stderr, so a stray
#: ``print`` (or ``input``) in code the program runs cannot corrupt or read the channel by accident.
CHANNEL = r"""
import os as _os, struct as _struct
_RIN = _os.fdopen(_os.dup(0), "rb", buffering=0)
_ROUT = _os.fdopen(_os.dup(1), "wb", buffering=0)
_null = _os.open(_os.devnull, _os.O_RDONLY)
_os.dup2(_null, 0)
_os.dup2(2, 1)
_os.close(_null)

def _read_exact(n):
    chunks, got = [], 0
    while got < n:
        data = _RIN.read(n - got)
        if not data:
            return None
        chunks.append(data)
        got += len(data)
    return b"".join(chunks)

def read_frame():
    head = _read_exact(4)
    if head is None:
        return None
    body = _read_exact(_struct.unpack(">I", head)[0])
    return body

def write_frame(payload):
    _ROUT.write(_struct.pack(">I", len(payload)) + payload)
    _ROUT.flush()

def channel_fds():
    return (_RIN.fileno(), _ROUT.fileno())
"""


def encode_frame(payload: bytes) -> bytes:
    return HEADER.pack(len(payload)) + payload


#: A JSON string, from its opening quote to its closing one or, unterminated, to the end of the text. It
#: never fails once started (a failed match would be retried from every later quote: quadratic), and
#: possessive runs leave nothing to backtrack into, so removing every string costs one linear pass.
_JSON_STRING = re.compile(rb'"(?:[^"\\]++|\\.)*+"?', re.DOTALL)
_OPENERS, _CLOSERS = b"[{", b"]}"
_BRACKETS_ONLY = bytes.maketrans(b"{}", b"[]")
_NOT_BRACKETS = bytes(set(range(256)) - set(b"[]{}"))


def nesting_depth(body: bytes, limit: int | None = None) -> int:
    """The deepest ``[``/``{`` nesting of a JSON text, counted with string contents removed, so that a
    reply nested deeper than the budget is refused without ever reaching the recursive parser. Linear in
    ``len(body)`` whatever the text (a worker's reply is hostile input): strings go in one regex pass, the
    rest is reduced to its brackets, and innermost ``[]`` pairs are removed one level per pass (each
    ``bytes.replace``, at C speed). With ``limit``, it stops once the depth is known to be over it (and
    returns ``limit + 1``); a text whose brackets do not balance counts as over any limit."""
    skeleton = _JSON_STRING.sub(b"", body).translate(_BRACKETS_ONLY, _NOT_BRACKETS)
    depth = 0
    while skeleton:
        if limit is not None and depth >= limit:
            return limit + 1
        shorter = skeleton.replace(b"[]", b"")
        if len(shorter) == len(skeleton):  # unbalanced: no innermost pair left to remove
            return depth + 1 if limit is None else max(depth + 1, limit + 1)
        skeleton, depth = shorter, depth + 1
    return depth


def _launch(sandbox: Sandbox, wd: Path, limits: Limits,
            uid: int | None) -> tuple[list[str], dict | None, str | None, tuple[int, ...], bool]:
    """``(argv, env, cwd, pass_fds, monitor)`` for running ``wd/main.py`` under ``sandbox``, from the
    backend's own argv. Bubblewrap sessions get the same seccomp filter as one-shot runs (memfd, SysV IPC,
    sockets ...) and run the program as their PID namespace's init; :func:`.runner.launch` closes
    ``pass_fds`` once the program has started."""
    if sandbox.name == "bubblewrap":
        fd = seccomp.filter_fd()
        argv = sandbox.argv(wd, limits, fd, program_is_init=True)  # type: ignore[attr-defined]
        return argv, {}, None, () if fd is None else (fd,), True
    if sandbox.name == "process":
        return sandbox.argv(wd, limits, uid), scrubbed_env(str(wd)), str(wd), (), False  # type: ignore[attr-defined]
    raise SandboxUnavailable(f"the {sandbox.name} backend cannot host a persistent session "
                             "(use bubblewrap, or the process backend with allow_unisolated=True)")


def _shutdown(run: runner.Started, uid: int | None, folder: workdir) -> None:
    """Kill and reap everything the session started (inside first, see :func:`.runner.stop`), then give back
    its cgroup, uid and folder. The finalizer of a session: it must not hold the session itself. Without a
    cgroup or a private uid nothing inside can be killed first; bubblewrap's ``--die-with-parent`` then
    takes the inside down with its monitor, which is killed at once rather than waited for."""
    try:
        runner.stop(run.proc, run.group, run.uid, run.monitor and (run.group is not None or run.uid is not None))
    finally:
        if run.group is not None:
            run.group.remove()
        if uid is not None:
            SESSION_UIDS.release(uid)
        folder.__exit__(None, None, None)


_live: weakref.WeakSet[SandboxSession] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for session in list(_live):
        session.close()


class SandboxSession:
    """One sandboxed program answering framed requests until :meth:`close`. Not thread-safe: one
    caller at a time (an episode owns its session)."""

    def __init__(self, program: str, sandbox: Sandbox, limits: Limits | None = None,
                 files: Mapping[str, str | bytes] | None = None, max_reply: int = MAX_REPLY,
                 max_depth: int = MAX_DEPTH, allow_unisolated: bool = False):
        if not sandbox.isolating and not allow_unisolated:
            raise SandboxUnavailable(f"the {sandbox.name} backend does not isolate; pass allow_unisolated=True "
                                     "to run untrusted code in a plain process anyway")
        self.sandbox = sandbox
        self.limits = limits or sandbox.limits
        self.max_reply, self.max_depth = max_reply, max_depth
        self.backend, self.isolating = sandbox.name, sandbox.isolating
        self._stderr: deque[bytes] = deque()
        self._stderr_size = 0
        self._closed = False
        self._workdir = workdir(program, files or {})
        wd = self._workdir.__enter__()
        self._uid = SESSION_UIDS.acquire() if as_root() else None
        try:
            argv, env, cwd, fds, monitor = _launch(sandbox, wd, self.limits, self._uid)
            self._run = runner.launch(argv, self.limits, env=env, cwd=cwd, uid=self._uid, monitor=monitor,
                                      pass_fds=fds)
        except BaseException:
            if self._uid is not None:
                SESSION_UIDS.release(self._uid)
            self._workdir.__exit__(None, None, None)
            raise
        self.proc = self._run.proc
        self._finalizer = weakref.finalize(self, _shutdown, self._run, self._uid, self._workdir)
        self._in = runner.pipes(self.proc)[0].fileno()
        os.set_blocking(self._in, False)  # writes wait in the selector, up to the request's deadline
        self._buffer = bytearray()
        self._selector = selectors.DefaultSelector()
        self._selector.register(runner.pipes(self.proc)[1].fileno(), selectors.EVENT_READ)
        self._writable = selectors.DefaultSelector()
        self._writable.register(self._in, selectors.EVENT_WRITE)
        self._drain = threading.Thread(target=self._drain_stderr, daemon=True)
        self._drain.start()
        _live.add(self)

    # -- the channel ---------------------------------------------------------------------------------
    def request(self, message: dict[str, Any], timeout: float) -> Any:
        """Send ``message`` (a JSON object) and return the decoded reply. Each request carries a fresh random
        ``"_id"`` that the program must echo in its reply object: a frame written ahead of time (by code the
        program runs) cannot pass for the answer to a later request. Raises :class:`SessionError` (and
        closes the session) on deadline, crash, a reply outside the budget, or a wrong ``_id``."""
        if self._closed:
            raise SessionCrashed("the session is closed")
        deadline = time.monotonic() + timeout
        request_id = secrets.token_hex(16)
        payload = json.dumps({**message, "_id": request_id}, ensure_ascii=False).encode("utf-8")
        try:
            self._write_all(encode_frame(payload), deadline, timeout)
            (length,) = HEADER.unpack(self._read_exact(HEADER.size, deadline, timeout))
            if length > self.max_reply:
                raise ReplyRejected(f"reply of {length} bytes is over the {self.max_reply}-byte budget")
            body = self._read_exact(length, deadline, timeout)
            if nesting_depth(body, self.max_depth) > self.max_depth:
                raise ReplyRejected(f"reply nested deeper than {self.max_depth} levels")
            try:
                reply = json.loads(body)
            except (ValueError, RecursionError) as exc:
                raise ReplyRejected(f"reply is not valid JSON: {exc}") from None
            if not isinstance(reply, dict) or reply.pop("_id", None) != request_id:
                raise ReplyRejected("reply is not an object answering this request (wrong or missing _id)")
            return reply
        except SessionError:
            self.close()
            raise

    def _write_all(self, data: bytes, deadline: float, timeout: float) -> None:
        """Write ``data`` to the worker's stdin (non-blocking) as it makes room, until ``deadline``: a worker
        busy in its environment's code, or one that never reads again, cannot hold the host past it."""
        view, sent = memoryview(data), 0
        while sent < len(data):
            try:
                sent += os.write(self._in, view[sent:])
                continue
            except BlockingIOError:
                pass
            except (BrokenPipeError, OSError, ValueError) as exc:
                raise SessionCrashed(f"the worker is gone ({exc}){self._tail()}") from None
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise SessionTimeout(f"the worker did not take the request within {timeout:g} s; it was killed")
            self._writable.select(timeout=remaining)

    def _read_exact(self, n: int, deadline: float, timeout: float) -> bytes:
        """``n`` bytes of the reply, read in large chunks (a header and its body usually arrive together)."""
        fd = runner.pipes(self.proc)[1].fileno()
        while len(self._buffer) < n:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise SessionTimeout(f"no reply within {timeout:g} s; the worker was killed")
            if not self._selector.select(timeout=remaining):
                continue
            data = os.read(fd, max(n - len(self._buffer), 1 << 16))
            if not data:
                self._wait_briefly()
                raise SessionCrashed(f"the worker exited (status {self.proc.returncode}){self._tail()}")
            self._buffer += data
        out = bytes(self._buffer[:n])
        del self._buffer[:n]
        return out

    # -- lifetime ------------------------------------------------------------------------------------
    @property
    def alive(self) -> bool:
        return not self._closed and self.proc.poll() is None

    def stderr_tail(self) -> str:
        return b"".join(self._stderr).decode("utf-8", "replace")

    def close(self) -> None:
        """Kill the worker and everything it started, reap them, release its cgroup, uid and folder.
        Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._finalizer()
        self._selector.close()
        self._writable.close()
        self._drain.join(timeout=1.0)
        for stream in runner.pipes(self.proc):
            try:
                stream.close()
            except OSError:
                pass
        _live.discard(self)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _wait_briefly(self) -> None:
        try:
            self.proc.wait(timeout=0.5)
        except subprocess.TimeoutExpired:
            pass

    def _drain_stderr(self) -> None:
        fd = runner.pipes(self.proc)[2].fileno()
        while True:
            try:
                data = os.read(fd, 65536)
            except (OSError, ValueError):
                return
            if not data:
                return
            self._stderr.append(data)
            self._stderr_size += len(data)
            while self._stderr_size > STDERR_TAIL and len(self._stderr) > 1:
                self._stderr_size -= len(self._stderr.popleft())

    def _tail(self) -> str:
        tail = self.stderr_tail().strip()[-500:]
        return f"; stderr: {tail}" if tail else ""
