"""A harness sent into the sandbox already compiled.

Compiling the ~560 lines of the value codec, the request reader and the function-test harness was ~4 ms
of the ~25 ms of CPU a run costs in the sandbox (HumanEval+: 164 runs, ~0.7 s of CPU a pass over the
canonical solutions; measured as ``python -I -S`` of the source 13.2 ms against 9.1 ms for the same code
object unmarshalled, 6.9 ms for ``pass``). So the host compiles a harness once per interpreter, with that
same interpreter outside any sandbox (it is our own program, not a candidate's), and each run's program is
a small loader that reads the marshalled code object from the head of stdin, ahead of the request (files
in the run folder cost a write each per run: more than the loader saves on a loaded host).

Bytecode is only valid for the interpreter version that wrote it, and a marshalled code object from
another one can crash the interpreter that loads it. The loader therefore runs the code object only when
its magic number (written first by the compiling interpreter) is the running interpreter's own, which
changes with every bytecode change; otherwise it compiles the source that follows it on stdin (a Docker
image whose Python is not the host's, say). ``LOPD_HARNESS_PRECOMPILED=0`` sends the source as the program.
"""

from __future__ import annotations

import functools
import os
import subprocess
from typing import Any

ENV_PRECOMPILED = "LOPD_HARNESS_PRECOMPILED"

#: The program of a run: stdin starts with two 10-digit lengths, the magic number and code object, and the
#: source; the harness then reads its request from the rest of stdin, as it would without the loader.
LOADER = """
import marshal as _m, posix as _p, sys as _s
def _r(_n):
    _b = []
    while _n > 0:
        _d = _p.read(0, _n)
        if not _d:
            break
        _b.append(_d)
        _n -= len(_d)
    return b"".join(_b)
_h = _r(20)
_c, _t = _r(int(_h[:10])), _r(int(_h[10:]))
_c = _m.loads(_c[4:]) if _c[:4] == _s.modules["_frozen_importlib_external"].MAGIC_NUMBER else \\
    compile(_t, "harness", "exec")
del _m, _p, _s, _r, _h, _t
exec(_c, {"__name__": "__main__", "__builtins__": __builtins__})
"""

#: Run by the sandbox's interpreter on the host: the harness source on stdin, magic number + code object out.
COMPILER = """
import marshal, sys
code = compile(sys.stdin.buffer.read(), "harness", "exec")
sys.stdout.buffer.write(sys.modules["_frozen_importlib_external"].MAGIC_NUMBER + marshal.dumps(code))
"""


@functools.lru_cache(maxsize=16)
def compiled(executable: str, source: str) -> bytes | None:
    """The magic number and marshalled code object of ``source`` as ``executable`` compiles it, or None."""
    try:
        out = subprocess.run([executable, "-I", "-S", "-c", COMPILER], input=source.encode("utf-8"),
                             capture_output=True, timeout=60, env={})
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 and len(out.stdout) > 4 else None


@functools.lru_cache(maxsize=16)
def _head(code: bytes, source: str) -> bytes:
    text = source.encode("utf-8")
    return b"%010d%010d" % (len(code), len(text)) + code + text


def program(sandbox: Any, source: str) -> tuple[str, bytes]:
    """``(program, stdin head)`` that run ``source`` in ``sandbox``: the loader, and the code object compiled
    by the sandbox's interpreter (``sandbox.python.executable``, when the host has that file) with the source
    behind it; or ``source`` itself and nothing. The run's own stdin goes after the head."""
    executable = getattr(getattr(sandbox, "python", None), "executable", None)
    if os.environ.get(ENV_PRECOMPILED, "1") == "0" or not isinstance(executable, str) \
            or not os.path.isabs(executable) or not os.access(executable, os.X_OK):
        return source, b""
    code = compiled(executable, source)
    return (source, b"") if code is None else (LOADER, _head(code, source))
