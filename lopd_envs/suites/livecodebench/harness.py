"""Runs inside the sandbox (appended to ``valuecodec.py``): LiveCodeBench's in-process test runner.

Reproduces how LiveCodeBench's ``testing_util`` runs a program so that verdicts match it: the same import
preamble, its reliability guard, a per-test ``signal.alarm``; functional problems call
``Solution().<fn_name>(*json_lines)``; stdin problems are wrapped into one function that is called once per
test with ``sys.stdin`` replaced by a ``StringIO`` of the input, ``open`` mocked to read the input and
``sys.stdout`` captured (so ``sys.stdin.buffer`` does not exist there, as in the official runner).
It reports return values / captured output, one JSON line per test; the scorer compares.
"""

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
            code = _ast.unparse(tree.body[:-1]) + "\n" + _ast.unparse(last.body)
    except Exception:
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
        return PREAMBLE + "\n" + _ast.unparse(imports) + "\n" + _ast.unparse(fn)
    except Exception:
        return code


def _guard():
    """LiveCodeBench's reliability guard (no memory cap of its own; ``exit`` and ``open`` stay available)."""
    _disable_host_functions()


def _compile(source, timeout):
    _signal.alarm(timeout)
    try:
        module = _types.ModuleType("tmp_sol", "")
        exec(source, module.__dict__)
        return module.Solution() if "class Solution" in source else module
    finally:
        _signal.alarm(0)


def _main():
    from unittest.mock import mock_open, patch

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
    if request.get("guard", True):
        _guard()
    timeout, code, inputs = int(request["timeout"]), request["code"], request["inputs"]
    functional = request["kind"] == "functional"
    try:
        if functional:
            target = _compile(PREAMBLE + "\n\n" + code, timeout)
            method = getattr(target, request["fn_name"])
            args = [[_json.loads(line) for line in inp.split("\n")] for inp in inputs]
        else:
            target = _compile(_as_function(_drop_main_guard(code)), timeout)
            method = getattr(target, "wrapped_function")
    except BaseException as exc:  # noqa: BLE001
        emit({"compile_error": f"{type(exc).__name__}: {exc}"[:500]})
        emit({"end": 1})
        return
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
                with patch("builtins.open", mock_open(read_data=inp)), patch("sys.stdin", _io.StringIO(inp)):
                    try:
                        method()
                    except SystemExit:
                        pass
            finally:
                _sys.stdout = saved
            _signal.alarm(0)
            emit({"i": i, "out": captured.getvalue()})
        except BaseException as exc:  # noqa: BLE001
            _signal.alarm(0)
            emit({"i": i, "err": f"{type(exc).__name__}: {exc}"[:300], "tle": isinstance(exc, TimeoutException)})
            break
    emit({"end": 1})


if __name__ == "__main__":
    _main()
