"""Which Python runs sandboxed programs, and which host paths it needs.

Resolved once per process: a pyenv ``python3`` shim costs ~200 ms per start and a venv interpreter under
``/root`` is unreadable for the unprivileged sandbox uid, so we look for a real interpreter binary that
the sandbox uid can execute, preferring the caller's own minor version (same semantics as the scorer's
reference run), and list exactly what it loads: its binary, its standard library's folders and the shared
libraries they link, file by file (OpenSSL's excepted, see :data:`UNMOUNTED_MODULES`). Nothing else of the
host is mounted.
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
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
    paths: tuple[str, ...]  # host folders/files it needs, at the same place in the sandbox
    symlinks: tuple[tuple[str, str], ...]  # top-level links such as /lib64 -> usr/lib64
    libraries: tuple[str, ...] = ()  # the shared library files among ``paths`` (see :func:`library_binds`)


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


def shared_libraries(binaries: list[str], resolved: bool = True) -> set[str]:
    """Host paths of the shared libraries the binaries link (``ldd``), as linked and (``resolved``) also
    with every link resolved."""
    libs: set[str] = set()
    if not shutil.which("ldd"):
        return libs
    for chunk in range(0, len(binaries), 64):
        out = subprocess.run(["ldd", *binaries[chunk:chunk + 64]], capture_output=True, text=True).stdout
        for path in re.findall(r"(/[^\s()]+\.so[^\s()]*)", out):
            libs.add(path)
            if resolved:
                libs.add(os.path.realpath(path))
    return libs


#: Standard-library extension modules whose libraries are not mounted: OpenSSL's. The sandbox has no network
#: (``ssl`` is of no use there), and ``hashlib`` falls back to its built-in md5, sha1, sha2, sha3 and blake2
#: when ``_hashlib`` cannot load; the host's libssl and libcrypto stay out of the sandbox.
UNMOUNTED_MODULES = ("_ssl.", "_hashlib.")


def describe(executable: str) -> Interpreter:
    """Ask ``executable`` where its library lives and collect what it needs on the host: its standard
    library's folders, and the shared libraries it and its extension modules link, file by file (not their
    folders: ``/usr/lib/x86_64-linux-gnu`` holds every library of the host)."""
    out = subprocess.run([executable, "-I", "-S", "-c", _PROBE], capture_output=True, text=True, timeout=30,
                         env={"PATH": "/usr/bin:/bin"})
    if out.returncode != 0:
        raise RuntimeError(f"{executable} failed to start: {out.stderr.strip()[-300:]}")
    info = json.loads(out.stdout)
    stdlib = {os.path.realpath(info["stdlib"]), os.path.realpath(info["platstdlib"])}
    dynload = [p for p in info["path"] if p.endswith("lib-dynload") and os.path.isdir(p)]
    modules = [str(f) for d in dynload for f in Path(d).glob("*.so") if not f.name.startswith(UNMOUNTED_MODULES)]
    folders = _minimal(stdlib | set(map(os.path.realpath, dynload)))
    libs = {lib for lib in _minimal(shared_libraries([executable, *modules], resolved=False), keep_nested=True)
            if not any(lib.startswith(folder + "/") for folder in folders)}  # a bind of a link binds its target
    # zipped stdlib, if any (python311.zip) and the binary itself
    paths = sorted(folders) + sorted(libs) + [executable]
    links = []
    for top in ("/lib", "/lib64", "/lib32", "/libx32", "/bin"):
        if os.path.islink(top):
            links.append((os.readlink(top), top))
    return Interpreter(executable, tuple(info["version"]), tuple(paths), tuple(links), tuple(sorted(libs)))


def _minimal(folders: set[str], keep_nested: bool = False) -> set[str]:
    """Paths hidden behind top-level links (``/lib`` -> ``usr/lib``) as their real folder's, and (unless
    ``keep_nested``) without those already covered by a parent folder in the set."""
    keep = set()
    for f in folders:
        real = f
        for top in ("/lib", "/lib64", "/lib32", "/libx32", "/bin"):
            if os.path.islink(top) and (f == top or f.startswith(top + "/")):
                real = os.path.realpath(top) + f[len(top):]
        keep.add(real)
    return keep if keep_nested else {f for f in keep if not any(f != o and f.startswith(o + "/") for o in keep)}


def unmounted_libraries(binaries: Sequence[str], mounted: Sequence[str]) -> tuple[str, ...]:
    """The libraries ``binaries`` link (as linked, top-level links resolved) that ``mounted`` does not
    provide: neither one of its files nor under one of its folders."""
    found = _minimal(shared_libraries(list(binaries), resolved=False), keep_nested=True) if binaries else set()
    folders = [m.rstrip("/") for m in mounted if os.path.isdir(m)]
    return tuple(sorted(lib for lib in found
                        if lib not in mounted and not any(lib.startswith(folder + "/") for folder in folders)))


def libraries_under(folders: Sequence[str], mounted: Sequence[str]) -> tuple[str, ...]:
    """What the extension modules under ``folders`` (extra read-only binds, such as numpy) link from the host
    beyond ``mounted`` and themselves: a package's compiled parts keep working when only the interpreter's
    own libraries are mounted, file by file."""
    modules = [str(f) for folder in folders for f in Path(folder).rglob("*.so*") if f.is_file()]
    return unmounted_libraries(modules, (*mounted, *folders))


_binds_lock = threading.Lock()
_binds: dict[tuple[str, ...], tuple[tuple[str, str], ...]] = {}


def library_binds(libraries: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """``(host folder, sandbox folder)`` read-only binds that show exactly ``libraries`` at their paths,
    one bind per library folder. Binding each file on its own costs a mount and a remount per file in every
    sandbox start (24 files: +39 ms a cold start on the 2-core VM); instead each folder's libraries are
    gathered once per process in a private folder of hard links (copies where the host's libraries are on
    another file system), which is then bound over the library folder: the host's other libraries stay out
    at the cost of one bind per folder, as when the whole folder was bound."""
    key = tuple(sorted(set(libraries)))
    with _binds_lock:
        if key not in _binds:
            by_folder: dict[str, list[str]] = {}
            for lib in key:
                by_folder.setdefault(os.path.dirname(lib), []).append(lib)
            _binds[key] = tuple((_gathered(files), folder) for folder, files in sorted(by_folder.items()))
        return _binds[key]


def _gathered(files: list[str]) -> str:
    """A new world-readable folder holding ``files`` under their own names, removed at this process's exit."""
    real = [os.path.realpath(f) for f in files]
    device = os.stat(real[0]).st_dev
    homes = [d for d in ("/var/tmp", tempfile.gettempdir(), "/dev/shm") if os.path.isdir(d) and world_usable(d)]
    same = [d for d in homes if os.stat(d).st_dev == device]
    home = (same or homes or [tempfile.gettempdir()])[0]
    _remove_orphans(home)
    folder = tempfile.mkdtemp(prefix=f"{_PREFIX}{os.getpid()}-", dir=home)
    atexit.register(_remove_folder, folder, os.getpid())
    os.chmod(folder, 0o755)
    for name, source in zip(files, real):
        target = os.path.join(folder, os.path.basename(name))
        try:
            os.link(source, target)  # free: the same file, read-only for the sandbox anyway
        except OSError:
            shutil.copy2(source, target)
            os.chmod(target, 0o644)
    return folder


_PREFIX = "lopd-sandbox-libs-"


def _remove_orphans(home: str) -> None:
    """Remove the gathered folders that processes of ours left when they ended without their exit hooks
    (killed, or ended with ``os._exit`` as pytest-xdist's workers do): named by a pid that is gone."""
    try:
        names = [n for n in os.listdir(home) if n.startswith(_PREFIX)]
    except OSError:
        return
    for name in names:
        pid, path = name[len(_PREFIX):].split("-", 1)[0], os.path.join(home, name)
        try:
            if not pid.isdigit() or os.stat(path).st_uid != os.geteuid():
                continue
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
        except OSError:
            continue


def _remove_folder(folder: str, owner: int) -> None:
    if os.getpid() == owner:  # a forked child inherits the exit hook, not the folder
        shutil.rmtree(folder, ignore_errors=True)


@functools.cache
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
