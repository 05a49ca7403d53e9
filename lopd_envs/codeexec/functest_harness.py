"""Runs inside the sandbox (appended to ``valuecodec.py``): call a function on test inputs, report outputs.

It reads one JSON request from stdin, writes one JSON line per input to a private copy of the original
stdout, and sends the program's own stdout/stderr nowhere. It never decides pass or fail: comparisons
happen in the scorer's process (see ``functest.py``), so code that tampers with this harness can at most
change what it reports as its own return values. It stops a group at the first exception or time-out,
as evalplus does, so hopeless candidates cost little.

Request: ``code``, ``entry_point``, ``groups`` (``name``, ``inputs`` (encoded), ``time_limits``, ``budget``,
``digests``: the inputs whose expected output the scorer knows by its digest), and flags: ``guard``
(evalplus's reliability guard), ``reference`` (trusted run: deep-copy inputs, time each call, no limits),
``output_not_none``, ``set_eq``, ``memory``.
Records: ``{"g", "ready": 1}`` (code loaded), ``{"g", "i", "v"[, "s"], "t"}``, ``{"g", "i", "err"}``,
``{"g", "exec_error"}``, ``{"g", "budget": 1}`` (group stopped for time), ``{"g", "end": 1}``, and
``{"g", "i", "h", "t"}``: a big output of a ``digests`` input as its digest (``valuecodec.digest``), after
which the harness waits for the scorer's ``ok`` (it was the expected output's) or ``send`` (the value
follows as a ``v`` record). The per-input timer here is only a convenience: the host times each input from
the arrival of the record before it (``channel.py``), so a candidate that cancels the timer still fails a
slow input.

Per input the loop does what evalplus's ``unsafe_execute`` does around the call (a fresh swallowed stdio,
the SIGALRM handler and an interval timer), inline rather than through context managers, and looks at the
control channel at most once a millisecond: the harness's own cost per input is ~7 us on the dev VM
(124,253 HumanEval+ inputs: ~0.4 s of CPU a pass). The candidate's code is compiled once per run and
executed afresh for each group.
"""

# pyright: reportUndefinedVariable=false
# (this file runs joined after valuecodec.py and harness_io.py (functest.harness_source), whose names it
# uses: checked alone, those names are undefined)

import _signal  # pyright: ignore[reportMissingImports]  # the C module under signal; typeshed has no stub
import io as _io
import sys as _sys
import time as _time


class _WriteOnly(_io.StringIO):
    """Swallows the program's prints; reading raises (so ``input()`` fails as it does in evalplus)."""

    def read(self, *a, **k):
        raise OSError

    def readline(self, *a, **k):
        raise OSError

    def readlines(self, *a, **k):
        raise OSError

    def readable(self, *a, **k):
        return False


class _swallow_io:
    """The program's stdio swallowed for the duration (a class, not ``contextlib``: see harness_io)."""

    def __enter__(self):
        self.old = _sys.stdout, _sys.stderr, _sys.stdin
        _sys.stdout = _sys.stderr = _sys.stdin = _WriteOnly()

    def __exit__(self, *exc):
        _sys.stdout, _sys.stderr, _sys.stdin = self.old


def _guard(memory):
    """evalplus's ``reliability_guard``, reproduced for verdict parity: the same functions disabled and the
    same data/stack limits, applied before the candidate's code runs."""
    import builtins
    import resource

    if memory:
        for lim in (resource.RLIMIT_DATA, resource.RLIMIT_STACK):
            try:
                resource.setrlimit(lim, (memory, memory))
            except (ValueError, OSError):
                pass
    _disable_host_functions()
    builtins.exit = None
    builtins.open = None


class _Control:
    """The scorer's messages on fd 0 after the request, one per line: ``skip:<group>`` (stop a group once a
    wrong output was seen: evalplus's fast check, a speed-up only) and ``ok:<group>:<i>`` /
    ``send:<group>:<i>``, the answer to a result sent as a digest (see :func:`digest` in the codec)."""

    def __init__(self, fd, select):
        self.fd, self.select, self.open, self.seen, self.partial = fd, select, True, set(), b""

    def _take(self, data):
        if not data:
            self.open = False
            return
        lines = (self.partial + data).split(b"\n")
        self.partial = lines.pop()
        self.seen.update(line.decode("ascii", "replace").strip() for line in lines)

    def poll(self):
        while self.open and self.select([self.fd], [], [], 0)[0]:
            self._take(_posix.read(self.fd, 4096))

    def skipped(self, group):
        return ("skip:" + group) in self.seen

    def matched(self, group, i):
        """Wait for the scorer's answer to input ``i``'s digest: True when it equals the expected output's."""
        ok, send = f"ok:{group}:{i}", f"send:{group}:{i}"
        while ok not in self.seen and send not in self.seen and self.open:
            self._take(_posix.read(self.fd, 4096))
        return ok in self.seen


#: Seconds between two looks at the control channel while a group runs (each is a syscall; a skip read a
#: millisecond late costs at most that much of the candidate's time, never a verdict).
POLL_EVERY = 0.001


def _main():
    import select

    loads, dumps = _json_codec(_hook)
    request = loads(_read_request().decode("utf-8", "surrogatepass"))  # inputs arrive as values
    out_fd, ctl_fd = _posix.dup(1), _posix.dup(0)
    devnull = _posix.open("/dev/null", _posix.O_RDWR)
    _posix.dup2(devnull, 0)
    _posix.dup2(devnull, 1)
    write, now = _posix.write, _time.time
    setitimer, getsignal, ITIMER_REAL, SIGALRM = _signal.setitimer, _signal.getsignal, _signal.ITIMER_REAL, \
        _signal.SIGALRM
    control = _Control(ctl_fd, select.select)

    def emit(record):
        write(out_fd, (dumps(record) + "\n").encode("utf-8", "surrogatepass"))

    reference = bool(request.get("reference"))
    set_eq, not_none = request.get("set_eq"), request.get("output_not_none")
    if request.get("guard"):
        _guard(request.get("memory"))
    code, entry_point = request["code"], request["entry_point"]
    compiled = None
    sys = _sys
    for group in request["groups"]:
        name = group["name"]
        inputs = group["inputs"]
        limits = group.get("time_limits") or [None] * len(inputs)
        budget = group.get("budget")
        digests = frozenset(group.get("digests") or ())  # inputs whose expected output the scorer holds a digest of
        namespace = {}
        try:
            with _swallow_io():
                if compiled is None:  # compiled once, executed afresh for each group
                    compiled = compile(code, "<string>", "exec")
                exec(compiled, namespace)
                fn = namespace[entry_point]
        except BaseException as exc:  # noqa: BLE001 - the verdict is "fail", whatever it was
            emit({"g": name, "exec_error": f"{type(exc).__name__}: {exc}"[:500]})
            continue
        emit({"g": name, "ready": 1})  # the host starts input 0's clock on this record's arrival
        started = polled = now()
        stdio = sys.stdout, sys.stderr, sys.stdin
        for i, inp in enumerate(inputs):
            t0 = now()
            if not reference and t0 - polled >= POLL_EVERY:
                polled = t0
                control.poll()
                if control.skipped(name):
                    break
            if budget is not None and t0 - started > budget:
                emit({"g": name, "budget": 1})
                break
            try:
                if reference:
                    import copy

                    inp = copy.deepcopy(inp)
                    t0 = now()
                    out = fn(*inp)
                    elapsed = now() - t0
                    if not_none:
                        out = out is not None
                else:  # evalplus's time_limit and swallow_io around the call, inline (this runs per input)
                    sys.stdout = sys.stderr = sys.stdin = _WriteOnly()
                    if getsignal(SIGALRM) is not _on_alarm:
                        _signal.signal(SIGALRM, _on_alarm)
                    t0 = now()
                    setitimer(ITIMER_REAL, limits[i])
                    try:
                        out = fn(*inp)
                    finally:
                        setitimer(ITIMER_REAL, 0)
                        sys.stdout, sys.stderr, sys.stdin = stdio
                    elapsed = now() - t0
            except BaseException as exc:  # noqa: BLE001
                sys.stdout, sys.stderr, sys.stdin = stdio
                emit({"g": name, "i": i, "err": f"{type(exc).__name__}: {exc}"[:300]})
                if not reference:
                    break
                continue
            if i in digests:  # a big output: its digest first, the value only if the scorer asks for it
                sent = digest(out, DIGEST_MIN_BYTES)
                if sent is not None:
                    emit({"g": name, "i": i, "h": sent, "t": elapsed})
                    sent = None
                    if control.matched(name, i):
                        continue
            record = {"g": name, "i": i, "v": encode(out), "t": elapsed}
            if set_eq and isinstance(record["v"], dict) and record["v"].get("$") == "opaque":
                try:
                    # an opaque value, iterable or not (a set of what is not raises, caught here)
                    record["s"] = encode(set(out))  # pyright: ignore[reportArgumentType]
                except BaseException:  # noqa: BLE001
                    pass
            try:
                emit(record)
            except (TypeError, ValueError, RecursionError, MemoryError) as exc:
                record = None  # (free a huge encoding before reporting)
                emit({"g": name, "i": i, "err": f"output cannot be reported: {type(exc).__name__}"})
                if not reference:
                    break
        emit({"g": name, "end": 1})


if __name__ == "__main__":
    _main()
