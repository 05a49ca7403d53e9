"""Which Python runs sandboxed programs, and which host paths it needs.

Resolved once per process: a pyenv ``python3`` shim costs ~200 ms per start and a venv interpreter under
``/root`` is unreadable for the unprivileged sandbox uid, so we look for a real interpreter binary that
the sandbox uid can execute, preferring the caller's own minor version (same semantics as the scorer's
reference run), and list exactly the folders it loads from: its binary, its standard library and the
shared libraries they link. Nothing else of the host is mounted.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ENV_PYTHON = "LOPD_SANDBOX_PYTHON"

_PROBE = ("import sys, json, sysconfig; print(json.dumps({'version': list(sys.version_info[:3]), "
          "'stdlib': sysconfig.get_paths()['stdlib'], 'platstdlib': sysconfig.get_paths()['platstdlib'], "
          "'path': sys.path}))")


@dataclass(frozen=True)
class Interpreter:
    executable: str  # the real binary (no shim, no venv wrapper)
    version: tuple[int, int, int]
    paths: tuple[str, ...]  # host folders/files it needs, to bind read-only at the same place
    symlinks: tuple[tuple[str, str], ...]  # top-level links such as /lib64 -> usr/lib64


def candidates() -> list[str]:
    """Interpreter binaries to try, best first."""
    minor = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    names = [os.environ.get(ENV_PYTHON, ""), getattr(sys, "_base_executable", ""), sys.executable,
             f"/usr/bin/{minor}", f"/usr/local/bin/{minor}", "/usr/bin/python3", "/usr/local/bin/python3",
             shutil.which(minor) or "", shutil.which("python3") or ""]
    seen: list[str] = []
    for name in names:
        if not name or not os.path.exists(name):
            continue
        real = os.path.realpath(name)
        if real not in seen and os.access(real, os.X_OK) and "shims" not in real.split(os.sep):
            seen.append(real)
    return seen


def world_usable(path: str) -> bool:
    """Readable and executable by an unprivileged uid (every parent folder traversable by others)."""
    p = Path(path)
    try:
        if not p.stat().st_mode & 0o005:
            return False
        return all(parent.stat().st_mode & 0o001 for parent in p.parents)
    except OSError:
        return False


def shared_libraries(binaries: list[str]) -> set[str]:
    """Host paths of the shared libraries the binaries link (``ldd``), both as linked and resolved."""
    libs: set[str] = set()
    if not shutil.which("ldd"):
        return libs
    for chunk in range(0, len(binaries), 64):
        out = subprocess.run(["ldd", *binaries[chunk:chunk + 64]], capture_output=True, text=True).stdout
        for path in re.findall(r"(/[^\s()]+\.so[^\s()]*)", out):
            libs.add(path)
            libs.add(os.path.realpath(path))
    return libs


def describe(executable: str) -> Interpreter:
    """Ask ``executable`` where its library lives and collect what it needs on the host."""
    out = subprocess.run([executable, "-I", "-S", "-c", _PROBE], capture_output=True, text=True, timeout=30,
                         env={"PATH": "/usr/bin:/bin"})
    if out.returncode != 0:
        raise RuntimeError(f"{executable} failed to start: {out.stderr.strip()[-300:]}")
    info = json.loads(out.stdout)
    stdlib = {os.path.realpath(info["stdlib"]), os.path.realpath(info["platstdlib"])}
    dynload = [p for p in info["path"] if p.endswith("lib-dynload") and os.path.isdir(p)]
    modules = [str(f) for d in dynload for f in Path(d).glob("*.so")]
    libs = shared_libraries([executable, *modules])
    folders = {os.path.dirname(lib) for lib in libs} | stdlib | set(map(os.path.realpath, dynload))
    # zipped stdlib, if any (python311.zip) and the binary itself
    paths = sorted(_minimal(folders)) + [executable]
    links = []
    for top in ("/lib", "/lib64", "/lib32", "/libx32", "/bin"):
        if os.path.islink(top):
            links.append((os.readlink(top), top))
    return Interpreter(executable, tuple(info["version"]), tuple(paths), tuple(links))


def _minimal(folders: set[str]) -> set[str]:
    """Drop folders already covered by a parent in the set, and paths hidden behind top-level links."""
    keep = set()
    for f in folders:
        real = f
        for top in ("/lib", "/lib64", "/lib32", "/libx32", "/bin"):
            if os.path.islink(top) and (f == top or f.startswith(top + "/")):
                real = os.path.realpath(top) + f[len(top):]
        keep.add(real)
    return {f for f in keep if not any(f != o and f.startswith(o + "/") for o in keep)}


@functools.lru_cache(maxsize=None)
def resolve(require_world_usable: bool) -> Interpreter:
    """The first candidate that starts in isolated mode (and, when the sandbox drops to another uid, that
    the uid can use). Cached: later runs pay nothing."""
    errors = []
    for exe in candidates():
        if require_world_usable and not world_usable(exe):
            errors.append(f"{exe}: not usable by an unprivileged uid")
            continue
        try:
            return describe(exe)
        except Exception as exc:  # noqa: BLE001 - try the next one
            errors.append(f"{exe}: {exc}")
    raise RuntimeError("no usable Python interpreter for the sandbox: " + "; ".join(errors))
