"""Runs inside the sandbox, between ``valuecodec.py`` and a harness: what both harnesses share.

Fd 0 carries ``<length>\\n<request>`` and then control messages, so it is read unbuffered and by length;
a buffered reader would swallow the control messages that follow.
"""

import os as _os
import sys as _sys


class TimeoutException(Exception):
    """A test ran past its time limit (the name both official harnesses use, so records read the same)."""


def _on_alarm(signum, frame):
    raise TimeoutException


def _read_request():
    """``<length>\\n<request>`` from fd 0, read unbuffered: the rest of stdin carries control messages."""
    data = b""
    while not data.endswith(b"\n"):
        chunk = _os.read(0, 1)
        if not chunk:
            return data
        data += chunk
    size, parts = int(data), []
    while size > 0:
        chunk = _os.read(0, min(size, 1 << 20))
        if not chunk:
            break
        parts.append(chunk)
        size -= len(chunk)
    return b"".join(parts)


def _disable_host_functions():
    """The core of the reliability guard that evalplus and LiveCodeBench both inherit from human-eval:
    destructive ``os``/``shutil``/``subprocess`` functions become ``None``, so a candidate that calls them
    fails exactly as it does under the official harnesses (the sandbox is the real isolation)."""
    import builtins
    import faulthandler
    import shutil
    import subprocess

    faulthandler.disable()
    builtins.quit = None
    _os.environ["OMP_NUM_THREADS"] = "1"
    for name in ("kill", "system", "putenv", "remove", "removedirs", "rmdir", "fchdir", "setuid", "fork",
                 "forkpty", "killpg", "rename", "renames", "truncate", "replace", "unlink", "fchmod", "fchown",
                 "chmod", "chown", "chroot", "lchflags", "lchmod", "lchown", "getcwd", "chdir"):
        setattr(_os, name, None)
    shutil.rmtree = None
    shutil.move = None
    shutil.chown = None
    subprocess.Popen = None
    builtins.help = None
    for mod in ("ipdb", "joblib", "resource", "psutil", "tkinter"):
        _sys.modules[mod] = None
