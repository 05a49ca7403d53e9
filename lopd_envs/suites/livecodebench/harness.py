"""Runs inside the sandbox (appended to ``valuecodec.py``): LiveCodeBench's in-process test runner.

Reproduces how LiveCodeBench's ``lcb_runner/evaluation/testing_util.py`` (LiveCodeBench/LiveCodeBench at
commit 28fef95ea8c9f7a547c8329f2cd3d32b92c1fa24, unchanged there since 16de2a1) runs a program, so that
verdicts match it: the same import preamble, its reliability guard (``quit`` is ``None``, ``exit`` works
as under ``site``), a per-test ``signal.alarm``; functional problems call
``Solution().<fn_name>(*json_lines)``; stdin problems are wrapped into one function called once per test
with ``open`` mocked to read the input, ``sys.stdout`` captured and ``sys.stdin`` replaced by
:class:`_MockStdin` (its ``MockStdinWithBuffer``), while ``readline``/``readlines``/``read`` of the
process's *original* stdin object (``/dev/null`` there, a ``multiprocessing`` child; here fd 0 after the
request is read) are patched too, so a hoisted ``from sys import stdin`` and the preamble's
``from sys import *`` read the test input. A ``SystemExit`` outside an stdin program's own run, or any
``BaseException`` that is not an ``Exception``, kills the official worker process (every test ``-1``):
here the harness then stops without its end record, which the scorer reads the same way.
Request extras: ``sys_path`` (folders holding numpy, as the official environment has it; numpy is imported
before the guard, as there, when the program's text names it) and ``strict`` (``quit()`` works too). It reports return values / captured output, one JSON line per test; the scorer
compares.
"""

# pyright: reportUndefinedVariable=false
# (this file runs joined after valuecodec.py and harness_io.py (functest.harness_source), whose names it
# uses: checked alone, those names are undefined)

import ast as _ast
import io as _io
import json as _json
import os as _os
import signal as _signal
import sys as _sys
import types as _types

PREAMBLE = "\n".join(
    [f"from {m} import *" for m in ("string", "re", "datetime", "collections", "heapq", "bisect", "copy", "math",
                                    "random", "statistics", "itertools", "functools", "operator", "io", "sys",
                                    "json", "builtins", "typing")]
    + [f"import {m}" for m in ("string", "re", "datetime", "collections", "heapq", "bisect", "copy", "math",
                               "random", "statistics", "itertools", "functools", "operator", "io", "sys", "json")]
    + ["sys.setrecursionlimit(50000)", ""])


def _drop_main_guard(code):
    """A trailing ``if __name__ == '__main__':`` block is replaced by its body (LCB: ``clean_if_name``)."""
    try:
        tree = _ast.parse(code)
        last = tree.body[-1]
        if isinstance(last, _ast.If) and _ast.unparse(last.test).strip() == "__name__ == '__main__'":
            # ast.unparse takes a list of statements too (undocumented; LCB calls it so)
            code = _ast.unparse(tree.body[:-1]) + "\n" + _ast.unparse(last.body)  # pyright: ignore[reportArgumentType]
    except Exception:  # noqa: BLE001 - LCB's own fallback: the code unchanged when it does not parse
        pass
    return code


def _as_function(code):
    """Imports stay at module level, every other statement moves into ``wrapped_function()``
    (LCB: ``make_function``); unparsable code is returned unchanged (and then fails to compile)."""
    try:
        tree = _ast.parse(code)
        imports = [s for s in tree.body if isinstance(s, (_ast.Import, _ast.ImportFrom))]
        rest = [s for s in tree.body if not isinstance(s, (_ast.Import, _ast.ImportFrom))]
        fn = _ast.FunctionDef(name="wrapped_function",
                              args=_ast.arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[], defaults=[]),
                              body=rest, decorator_list=[], lineno=-1)
        return PREAMBLE + "\n" + _ast.unparse(imports) + "\n" + _ast.unparse(fn)  # pyright: ignore[reportArgumentType]
    except Exception:  # noqa: BLE001 - LCB's own fallback: the code unchanged when it cannot be wrapped
        return code


class _Quitter:
    """``exit``/``quit`` as ``site`` defines them (the sandbox interpreter runs with ``-S``, without them)."""

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return f"Use {self.name}() or Ctrl-D (i.e. EOF) to exit"

    def __call__(self, code=None):
        raise SystemExit(code)


def _guard(strict):
    """LiveCodeBench's reliability guard (no memory cap of its own; ``exit`` and ``open`` stay available,
    ``quit`` is ``None`` there; strict mode gives both, as real judges do)."""
    import builtins

    builtins.exit = _Quitter("exit")
    _disable_host_functions()
    if strict:
        builtins.quit = _Quitter("quit")


class _MockBuffer:
    """``sys.stdin.buffer`` of LiveCodeBench's mock: ``read()`` is the whole input as bytes (every call),
    ``readline()`` is always the first line."""

    def __init__(self, text):
        self.data = text.encode("utf-8", "surrogatepass")

    def read(self, *args):
        return self.data

    def readline(self, *args):
        return self.data.split(b"\n")[0] + b"\n"


class _MockStdin:
    """LiveCodeBench's ``MockStdinWithBuffer``: ``read()`` is the whole input (every call), ``readline()``
    reads a ``StringIO`` line by line, ``readlines()`` is ``input.split("\\n")`` (no line ends, a last empty
    item), anything else goes to the ``StringIO``; it defines no ``__iter__``, so ``for line in sys.stdin``
    raises ``TypeError``."""

    def __init__(self, text):
        self.text = text
        self._stringio = _io.StringIO(text)
        self.buffer = _MockBuffer(text)

    def read(self, *args):
        return self.text

    def readline(self, *args):
        return self._stringio.readline(*args)

    def readlines(self, *args):
        return self.text.split("\n")

    def __getattr__(self, name):
        return getattr(self._stringio, name)


def _run_stdin_test(method, text, original_stdin):
    """One stdin test as LiveCodeBench's ``call_method``: the original stdin object's ``readline`` yields
    the input's lines without line ends (``StopIteration`` after the last), ``readlines``/``read`` as the
    mock's; ``sys.stdin`` is the mock and ``open`` reads the input; the program's ``SystemExit`` ends it."""
    from unittest.mock import mock_open, patch

    lines = iter(text.split("\n"))
    with patch.object(original_stdin, "readline", lambda *args: next(lines), create=True), \
            patch.object(original_stdin, "readlines", lambda *args: text.split("\n"), create=True), \
            patch.object(original_stdin, "read", lambda *args: text, create=True), \
            patch("sys.stdin", _MockStdin(text)), patch("builtins.open", mock_open(read_data=text)):
        try:
            method()
        except SystemExit:
            pass


def _compile(source, timeout):
    _signal.alarm(timeout)
    try:
        module = _types.ModuleType("tmp_sol", "")
        exec(source, module.__dict__)
        return module.Solution() if "class Solution" in source else module
    finally:
        _signal.alarm(0)


def _main():
    import select

    request = _json.loads(_read_request())
    out_fd, ctl_fd = _os.dup(1), _os.dup(0)
    devnull = _os.open("/dev/null", _os.O_RDWR)
    _os.dup2(devnull, 0)
    _os.dup2(devnull, 1)
    write, read, poll, dumps = _os.write, _os.read, select.select, _json.dumps
    control = {"open": True, "stop": False}

    def stopped():
        """The scorer says stop once a test failed (LiveCodeBench returns at the first failure)."""
        while control["open"] and not control["stop"] and poll([ctl_fd], [], [], 0)[0]:
            data = read(ctl_fd, 4096)
            control["open"] = bool(data)
            control["stop"] = b"stop" in data
        return control["stop"]

    def emit(record):
        write(out_fd, (dumps(record, separators=(",", ":")) + "\n").encode("utf-8", "surrogatepass"))

    if hasattr(_sys, "set_int_max_str_digits"):
        _sys.set_int_max_str_digits(50000)
    _signal.signal(_signal.SIGALRM, _on_alarm)
    _sys.path.extend(str(p) for p in request.get("sys_path", ()))
    if request.get("sys_path") and "numpy" in request["code"]:
        try:  # lcb_runner has numpy imported before its guard runs (numpy's import needs what it disables)
            import numpy  # noqa: F401
        except Exception:  # noqa: BLE001 - then the program's own import fails as it would
            pass
    if request.get("guard", True):
        _guard(bool(request.get("strict")))
    timeout, code, inputs = int(request["timeout"]), request["code"], request["inputs"]
    functional = request["kind"] == "functional"
    original_stdin = _sys.stdin
    try:
        if functional:
            target = _compile(PREAMBLE + "\n\n" + code, timeout)
            method = getattr(target, request["fn_name"])
            args = [[_json.loads(line) for line in inp.split("\n")] for inp in inputs]
        else:
            target = _compile(_as_function(_drop_main_guard(code)), timeout)
            method = target.wrapped_function
    except Exception as exc:  # noqa: BLE001
        emit({"compile_error": f"{type(exc).__name__}: {exc}"[:500]})
        emit({"end": 1})
        return
    except BaseException:  # noqa: BLE001 - kills the official worker: no end record
        return
    emit({"ready": 1})  # the host starts test 0's clock on this record's arrival (its timers are the real ones)
    for i, inp in enumerate(inputs):
        if stopped():
            break
        captured = _io.StringIO()
        try:
            _signal.alarm(timeout)
            if functional:
                value = method(*args[i])
                _signal.alarm(0)
                emit({"i": i, "v": encode(list(value) if isinstance(value, tuple) else value)})
                continue
            saved = _sys.stdout
            _sys.stdout = captured
            try:
                _run_stdin_test(method, inp, original_stdin)
            finally:
                _sys.stdout = saved
            _signal.alarm(0)
            emit({"i": i, "out": captured.getvalue()})
        except Exception as exc:  # noqa: BLE001
            _signal.alarm(0)
            emit({"i": i, "err": f"{type(exc).__name__}: {exc}"[:300], "tle": isinstance(exc, TimeoutException)})
            break
        except BaseException:  # noqa: BLE001 - SystemExit from a function, KeyboardInterrupt...: a crash
            _signal.alarm(0)
            return
    emit({"end": 1})


if __name__ == "__main__":
    _main()
