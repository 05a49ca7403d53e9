"""One process per run (or evaluation) folder: an exclusive ``fcntl`` lock on ``<folder>/.lock``.

Why: two ``lopd-train`` (or ``lopd-eval``) on one folder both ran, logging steps twice, duplicating records and
racing on temporary files. A POSIX record lock (``lockf``) is released by the kernel when its holder exits,
however it exits, so a crashed or killed process never leaves the folder stuck, and unlike ``flock`` it is not
inherited by forked children (sandbox workers), which may outlive it. The file names the holder's pid for the
error. A second lock on the same folder inside one process is refused too (POSIX locks do not see it).
"""

from __future__ import annotations

import errno
import fcntl
import os
import threading
from pathlib import Path
from typing import Self

from lopd_train.errors import RunLockedError

LOCK_FILE = ".lock"
_held: set[str] = set()  # folders this process holds
_guard = threading.Lock()


class FolderLock:
    """Held from :meth:`acquire` to :meth:`release` (or until the process ends)."""

    def __init__(self, folder: str | Path, what: str = "lopd-train"):
        self.path = Path(folder) / LOCK_FILE
        self.what = what
        self._fd: int | None = None

    def acquire(self) -> Self:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        key = str(self.path.resolve())
        with _guard:
            if key in _held:
                raise RunLockedError(f"{self.path.parent} is in use by this process (pid {os.getpid()}): one "
                                     "run per folder; close the other one first or choose another output folder")
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno not in (errno.EACCES, errno.EAGAIN):
                    os.close(fd)
                    raise
                holder = os.read(fd, 200).decode(errors="replace").strip() or "another process"
                os.close(fd)
                raise RunLockedError(f"{self.path.parent} is in use by {holder}; wait for it to finish, stop it, "
                                     "or choose another output folder") from None
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{self.what} (pid {os.getpid()})\n".encode(), 0)
            self._fd = fd
            _held.add(key)
        return self

    def release(self) -> None:
        with _guard:
            if self._fd is not None:
                fd, self._fd = self._fd, None
                _held.discard(str(self.path.resolve()))
                os.close(fd)  # closing the descriptor drops the lock

    def __del__(self) -> None:  # a holder dropped without release (a Trainer never closed) frees the folder
        try:
            self.release()
        except Exception:  # noqa: BLE001 - at interpreter exit anything may be gone; the kernel frees the lock
            pass

    @property
    def held(self) -> bool:
        return self._fd is not None

    def __enter__(self) -> Self:
        return self.acquire() if not self.held else self

    def __exit__(self, *exc) -> None:
        self.release()
