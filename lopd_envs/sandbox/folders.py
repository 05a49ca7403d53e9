"""The host folder each run reads its program from: on tmpfs when small (cheap to remove), never left behind."""

from __future__ import annotations

import atexit
import functools
import os
import re
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

_SAFE_REL = re.compile(r"^[A-Za-z0-9_.\-/]+$")


#: Workdirs whose files total at most this go to a memory filesystem (see :func:`workdir_root`).
SMALL_WORKDIR = 1 << 20


@functools.cache
def workdir_root() -> str | None:
    """``/dev/shm`` when it is a writable tmpfs, else ``None`` (the system temp folder). On a disk
    filesystem, deleting a run's folder costs a journal commit: 3.5 ms a run on this machine's ext4 /tmp,
    against 0.02 ms on tmpfs. Only small workdirs go there (a container's /dev/shm is often 64 MB)."""
    try:
        with open("/proc/self/mounts") as f:
            mounts = {fields[1]: fields[2] for fields in (line.split() for line in f) if len(fields) > 2}
    except OSError:
        return None
    root = "/dev/shm"
    return root if mounts.get(root) == "tmpfs" and os.access(root, os.W_OK | os.X_OK) else None


class workdir:
    """A host folder holding ``main.py`` and the given files, readable (not writable) by the sandbox uid,
    removed afterwards. Mounted read-only as the program's working directory."""

    def __init__(self, code: str, files: Mapping[str, str | bytes]):
        self.code, self.files = code, files

    def __enter__(self) -> Path:
        self.path = new_folder(program_size(self.code, self.files))
        try:
            fill_folder(self.path, self.code, self.files)
        except BaseException:
            shutil.rmtree(self.path, ignore_errors=True)
            raise
        return self.path

    def __exit__(self, *exc: object) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def program_size(code: str, files: Mapping[str, str | bytes]) -> int:
    return len(code) + sum(len(content) for content in files.values())


#: Run folders are ``lopd-sbx-<pid>-<random>``: the owner's pid tells a later process which ones are stale.
FOLDER_PREFIX = "lopd-sbx-"
_swept: set[tuple[int, str]] = set()


def new_folder(size: int = 0) -> Path:
    """An empty run folder (mode 755) for a program of ``size`` bytes: on tmpfs when it is small. The first
    folder a process makes in a place removes the run folders there whose owner is gone."""
    root = workdir_root() if size <= SMALL_WORKDIR else None
    home = root or tempfile.gettempdir()
    if (os.getpid(), home) not in _swept:
        _swept.add((os.getpid(), home))
        remove_stale_folders(home)
    path = Path(tempfile.mkdtemp(prefix=f"{FOLDER_PREFIX}{os.getpid()}-", dir=root))
    os.chmod(path, 0o755)
    return path


def _owned_folders(home: str) -> list[tuple[int, str]]:
    """``(owner pid, path)`` of the run folders in ``home`` (owned by our uid, named with a pid)."""
    out = []
    try:
        names = [n for n in os.listdir(home) if n.startswith(FOLDER_PREFIX)]
    except OSError:
        return out
    for name in names:
        pid, path = name[len(FOLDER_PREFIX):].split("-", 1)[0], os.path.join(home, name)
        try:
            if pid.isdigit() and os.stat(path).st_uid == os.geteuid():
                out.append((int(pid), path))
        except OSError:
            continue
    return out


def remove_stale_folders(home: str) -> list[str]:
    """Remove the run folders in ``home`` whose owner process is gone (killed, or ended by ``os._exit`` as
    forked workers do, so its exit hook never ran); the paths removed. A live pid's are left alone."""
    removed = []
    for pid, path in _owned_folders(home):
        if pid == os.getpid():
            continue
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
        except OSError:
            continue
    return removed


def _remove_own_folders() -> None:
    """At exit, after the spares' and sessions' hooks (registered later, so run earlier) have discarded
    their sandboxes: any run folder of this process still there (a spare whose discard never ran)."""
    for home in {workdir_root() or tempfile.gettempdir(), tempfile.gettempdir()}:
        for pid, path in _owned_folders(home):
            if pid == os.getpid():
                shutil.rmtree(path, ignore_errors=True)


atexit.register(_remove_own_folders)


def fill_folder(path: Path, code: str, files: Mapping[str, str | bytes]) -> None:
    """Write ``main.py`` and ``files`` into ``path``, readable (not writable) by the sandbox uid."""
    for rel, content in {**files, "main.py": code}.items():
        if not _SAFE_REL.match(rel) or rel.startswith("/") or ".." in rel.split("/"):
            raise ValueError(f"unsafe file name for the sandbox: {rel!r}")
        target = path / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(target.parent, 0o755)
        target.write_bytes(content.encode() if isinstance(content, str) else bytes(content))
        os.chmod(target, 0o644)
