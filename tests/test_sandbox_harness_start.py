"""The sandbox harnesses' cheap start: the json codec built on ``_json`` alone must equal the json package,
the reliability guard must poison ``os``/``shutil``/``subprocess`` whether they are imported before or after
it, and the harness must not import the heavy modules itself (what the cheap start is for)."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from lopd_envs.codeexec import valuecodec
from lopd_envs.codeexec.functest import harness_source

VALUES = [{"a": [1, 2.5, "é\ud800", None, True, -0.0, 1e300, -(1 << 62) + 1]}, 'q"\\\n\t\x00', [[[]]], {},
          {"$": "tuple", "v": [1, {"$": "int", "v": "0x" + "f" * 40}]}, float("inf"), "", [float("-inf")]]


def _namespace() -> dict:
    ns: dict = {"__name__": "not_main"}
    exec(compile(harness_source(), "harness", "exec"), ns)
    return ns


def test_c_json_codec_equals_the_json_package():
    ns = _namespace()
    loads, dumps = ns["_json_codec"](valuecodec._hook)
    assert loads.__qualname__.startswith("_json_codec"), "the _json accelerator was not used on this Python"
    for value in VALUES:
        text = dumps(value)
        assert text == json.dumps(value, separators=(",", ":"))
        assert repr(loads(text)) == repr(json.loads(text, object_hook=valuecodec._hook))
    assert math.isnan(loads("NaN")) and loads(" [1] \n") == [1]
    for bad in ["", "[1,", '{"a":1} x', "nul", "[1]]"]:
        with pytest.raises(ValueError):
            loads(bad)
    with pytest.raises(TypeError):
        dumps({"k": object()})
    with pytest.raises(ValueError):  # circular: detected, and the next call is not confused by it
        cyclic: list = []
        cyclic.append(cyclic)
        dumps(cyclic)
    assert dumps([1, [2]]) == "[1,[2]]"


GUARD_PROBE = r"""
import sys
{before}
_disable_host_functions()
import os, shutil, subprocess
print(os.remove is None, os.getcwd is None, shutil.rmtree is None, subprocess.Popen is None,
      os.environ["OMP_NUM_THREADS"], callable(os.path.join), exit is None, quit is None)
import inspect, tempfile  # stdlib modules importing the guarded ones still load
"""


@pytest.mark.parametrize("before", ["", "import os, shutil, subprocess"])
def test_guard_poisons_modules_imported_before_or_after_it(before):
    source = harness_source().replace('if __name__ == "__main__":', "if False:")
    program = source + GUARD_PROBE.format(before=before).replace("exit is None", "True")
    out = subprocess.run([sys.executable, "-I", "-S", "-c", program], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "True", "True", "True", "1", "True", "True", "True"]


def test_harness_start_imports_no_heavy_module():
    source = harness_source().replace('if __name__ == "__main__":', "if False:")
    program = source + "\nimport sys\n_json_codec(_hook)\n_disable_host_functions()\nprint(' '.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-I", "-S", "-c", program], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    loaded = set(out.stdout.split())
    assert not loaded & {"json", "re", "os", "subprocess", "shutil", "collections", "contextlib", "enum", "signal"}


# ------------------------------------------------------------------ the harness sent compiled (issue 53 item 5)

def _groups():
    from lopd_envs.codeexec.functest import Group

    return [Group("base", [[1], [2]], [5.0, 5.0], 20.0)]


def test_the_harness_goes_compiled_for_the_sandboxs_interpreter(bubblewrap):
    from lopd_envs.codeexec import precompiled
    from lopd_envs.codeexec.functest import run_function_tests

    program, head = precompiled.program(bubblewrap, harness_source())
    assert program == precompiled.LOADER and head[20:24] == precompiled.compiled(
        bubblewrap.python.executable, harness_source())[:4]
    run = run_function_tests(bubblewrap, "def f(x):\n    return x * 2\n", "f", _groups(), timeout=60)
    assert run.groups["base"].outputs == {0: 2, 1: 4} and run.groups["base"].ended


def test_a_code_object_from_another_interpreter_falls_back_to_the_source(bubblewrap, monkeypatch):
    """Another magic number (a Docker image whose Python is not the host's): the loader compiles the
    source it was sent beside the code object, which it never unmarshals."""
    from lopd_envs.codeexec import precompiled
    from lopd_envs.codeexec.functest import run_function_tests

    monkeypatch.setattr(precompiled, "compiled", lambda executable, source: b"\x00\x00\r\nnot a code object")
    assert precompiled.program(bubblewrap, harness_source())[0] == precompiled.LOADER
    run = run_function_tests(bubblewrap, "def f(x):\n    return x * 2\n", "f", _groups(), timeout=60)
    assert run.groups["base"].outputs == {0: 2, 1: 4} and run.result.error is None, run.result.stderr


def test_the_source_goes_as_it_is_when_told_or_without_a_local_interpreter(monkeypatch):
    from lopd_envs.codeexec import precompiled

    class Docker:
        python = type("I", (), {"executable": "/nowhere/python3"})()

    assert precompiled.program(Docker(), harness_source()) == (harness_source(), b"")
    assert precompiled.program(object(), harness_source()) == (harness_source(), b"")
    monkeypatch.setenv(precompiled.ENV_PRECOMPILED, "0")
    from lopd_envs.sandbox import interpreter
    from lopd_envs.sandbox.base import as_root

    local = type("S", (), {"python": interpreter.resolve(as_root())})()
    assert precompiled.program(local, harness_source()) == (harness_source(), b"")
