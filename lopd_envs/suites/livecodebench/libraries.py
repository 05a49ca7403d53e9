"""numpy inside the sandbox, as LiveCodeBench's official environment has it (``lcb_runner`` imports numpy,
so an answer's ``import numpy`` works there, and a returned numpy value is compared with ``==``).

Only numpy's own package folder (and its bundled ``numpy.libs``) is made visible, read-only, at
:data:`MOUNT`, and added to the harness's ``sys.path``; the rest of the host's site-packages stays out.
bubblewrap: two extra read-only binds on a copy of the env's sandbox (the shared instance is untouched). process backend (no isolation, an
explicit opt-in): a private folder of links to the same two folders. Docker: whatever the image holds.
numpy is offered only when the sandbox's interpreter has the scorer's Python version (its compiled parts
are built for one ABI) and the sandbox user can read the folders.
"""

from __future__ import annotations

import copy
import functools
import importlib.util
import os
import sys
import tempfile
import threading
from pathlib import Path

from lopd_envs.sandbox import BubblewrapSandbox, ProcessSandbox, Sandbox
from lopd_envs.sandbox.interpreter import world_usable

MOUNT = "/opt/lopd-pylib"

_lock = threading.Lock()
_derived: dict[int, tuple[Sandbox, Sandbox, list[str]]] = {}


@functools.cache
def numpy_folders() -> tuple[str, ...]:
    """numpy's package folder and its ``numpy.libs`` sibling (when the wheel has one), or () without numpy."""
    spec = importlib.util.find_spec("numpy")
    if spec is None or not spec.submodule_search_locations:
        return ()
    package = Path(next(iter(spec.submodule_search_locations))).resolve()
    libs = package.with_name("numpy.libs")
    return tuple(str(p) for p in (package, libs) if p.is_dir())


def _same_python(sandbox: Sandbox) -> bool:
    python = getattr(sandbox, "python", None)
    return python is not None and tuple(python.version[:2]) == tuple(sys.version_info[:2])


def _links(folders: tuple[str, ...]) -> str:
    """A private folder holding links named like ``folders`` (the process backend's view of numpy)."""
    root = tempfile.mkdtemp(prefix="lopd-pylib-")
    os.chmod(root, 0o755)  # the process backend runs candidates under a throw-away uid when we are root
    for folder in folders:
        os.symlink(folder, os.path.join(root, os.path.basename(folder)))
    return root


def with_numpy(sandbox: Sandbox) -> tuple[Sandbox, list[str]]:
    """The sandbox to run LiveCodeBench's harness in and the folders to add to its ``sys.path``: numpy
    visible where the backend allows it (see the module docstring), else ``sandbox`` unchanged and []."""
    folders = numpy_folders()
    if not folders or not _same_python(sandbox) or not all(world_usable(f) for f in folders):
        return sandbox, []
    with _lock:
        cached = _derived.get(id(sandbox))
        if cached is not None and cached[0] is sandbox:
            return cached[1], cached[2]
        if type(sandbox) is BubblewrapSandbox:
            derived: Sandbox = copy.copy(sandbox)  # same limits, interpreter and options; two more binds
            derived.extra_ro_binds = {**sandbox.extra_ro_binds,
                                      **{f: f"{MOUNT}/{os.path.basename(f)}" for f in folders}}
            path = [MOUNT]
        elif type(sandbox) is ProcessSandbox:
            derived, path = sandbox, [_links(folders)]
        else:  # docker: the image's own copy, when `lopd sandbox build-image --extra FOLDER:DEST` put one at MOUNT
            derived, path = sandbox, [MOUNT] if MOUNT in map(os.path.dirname, getattr(sandbox, "image_extras", ())) else []
        _derived[id(sandbox)] = (sandbox, derived, path)
        return derived, path
