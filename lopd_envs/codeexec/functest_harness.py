"""Runs inside the sandbox (appended to ``valuecodec.py``): call a function on test inputs, report outputs.

It reads one JSON request from stdin, writes one JSON line per input to a private copy of the original
stdout, and sends the program's own stdout/stderr nowhere. It never decides pass or fail: comparisons
happen in the scorer's process (see ``functest.py``), so code that tampers with this harness can at most
change what it reports as its own return values. It stops a group at the first exception or time-out,
as evalplus does, so hopeless candidates cost little.

Request: ``code``, ``entry_point``, ``groups`` (``name``, ``inputs`` (encoded), ``time_limits``, ``budget``),
and flags: ``guard`` (evalplus's reliability guard), ``reference`` (trusted run: deep-copy inputs, time
each call, no limits), ``output_not_none``, ``set_eq``, ``memory``.
Records: ``{"g", "ready": 1}`` (code loaded), ``{"g", "i", "v"[, "s"], "t"}``, ``{"g", "i", "err"}``,
``{"g", "exec_error"}``, ``{"g", "budget": 1}`` (group stopped for time), ``{"g", "end": 1}``. The per-input
timer here is only a convenience: the host times each input from the arrival of the record before it
(``channel.py``), so a candidate that cancels the timer still fails a slow input.
"""

import _signal
import io as _io
import sys as _sys
import time as _time


class _WriteOnly(_io.StringIO):
    """Swallows the program's prints; reading raises (so ``input()`` fails as it does in evalplus)."""

    def read(self, *a, **k):
        raise IOError

    def readline(self, *a, **k):
        raise IOError

    def readlines(self, *a, **k):
        raise IOError

    def readable(self, *a, **k):
        return False


class _swallow_io:
    """The program's stdio swallowed for the duration (a class, not ``contextlib``: see harness_io)."""

    def __enter__(self):
        self.old = _sys.stdout, _sys.stderr, _sys.stdin
        _sys.stdout = _sys.stderr = _sys.stdin = _WriteOnly()

    def __exit__(self, *exc):
        _sys.stdout, _sys.stderr, _sys.stdin = self.old


class _time_limit:
    def __init__(self, seconds):
        self.seconds = seconds

    def __enter__(self):
        _signal.setitimer(_signal.ITIMER_REAL, self.seconds)
        _signal.signal(_signal.SIGALRM, _on_alarm)

    def __exit__(self, *exc):
        _signal.setitimer(_signal.ITIMER_REAL, 0)


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


def _main():
    import select

    loads, dumps = _json_codec(_hook)
    request = loads(_read_request().decode("utf-8", "surrogatepass"))  # inputs arrive as values
    out_fd, ctl_fd = _posix.dup(1), _posix.dup(0)
    devnull = _posix.open("/dev/null", _posix.O_RDWR)
    _posix.dup2(devnull, 0)
    _posix.dup2(devnull, 1)
    write, read, poll, now = _posix.write, _posix.read, select.select, _time.time
    control = {"open": True, "skip": set()}

    def emit(record):
        write(out_fd, (dumps(record) + "\n").encode("utf-8", "surrogatepass"))

    def skipped(group):
        """The scorer asks to stop a group once it has seen a failing output (evalplus's fast check)."""
        while control["open"] and poll([ctl_fd], [], [], 0)[0]:
            data = read(ctl_fd, 4096)
            if not data:
                control["open"] = False
            control["skip"].update(data.decode("ascii", "replace").split())
        return ("skip:" + group) in control["skip"]

    reference = bool(request.get("reference"))
    if request.get("guard"):
        _guard(request.get("memory"))
    code, entry_point = request["code"], request["entry_point"]
    for group in request["groups"]:
        name = group["name"]
        inputs = group["inputs"]
        limits = group.get("time_limits") or [None] * len(inputs)
        budget = group.get("budget")
        namespace = {}
        try:
            with _swallow_io():
                exec(code, namespace)
                fn = namespace[entry_point]
        except BaseException as exc:  # noqa: BLE001 - the verdict is "fail", whatever it was
            emit({"g": name, "exec_error": f"{type(exc).__name__}: {exc}"[:500]})
            continue
        emit({"g": name, "ready": 1})  # the host starts input 0's clock on this record's arrival
        started = now()
        for i, inp in enumerate(inputs):
            if not reference and skipped(name):
                break
            if budget is not None and now() - started > budget:
                emit({"g": name, "budget": 1})
                break
            try:
                if reference:
                    import copy

                    inp = copy.deepcopy(inp)
                    t0 = now()
                    out = fn(*inp)
                    elapsed = now() - t0
                    if request.get("output_not_none"):
                        out = out is not None
                else:
                    t0 = now()
                    with _time_limit(limits[i]):
                        with _swallow_io():
                            out = fn(*inp)
                    elapsed = now() - t0
            except BaseException as exc:  # noqa: BLE001
                emit({"g": name, "i": i, "err": f"{type(exc).__name__}: {exc}"[:300]})
                if not reference:
                    break
                continue
            record = {"g": name, "i": i, "v": encode(out), "t": elapsed}
            if request.get("set_eq") and isinstance(record["v"], dict) and record["v"].get("$") == "opaque":
                try:
                    record["s"] = encode(set(out))
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
