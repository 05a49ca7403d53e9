"""Killing what a cgroup (or a uid) still holds and removing cgroup folders, a dead owner's included: the
teardown :mod:`.cgroup` relies on, apart from making and limiting them."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

PREFIX = "lopd-sandbox-"


def _owner_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # alive, another user's
        return False
    return False


def remove_stale(base: Path) -> list[Path]:
    """Remove every ``lopd-sandbox-<pid>`` under ``base`` whose process is gone, with what is in it; the
    folders removed. A live pid (ours, or a reused one) is left alone: never a live owner's folder."""
    removed = []
    try:
        names = [n for n in os.listdir(base) if n.startswith(PREFIX)]
    except OSError:
        return removed
    for name in names:
        pid = name[len(PREFIX):]
        if pid.isdigit() and int(pid) != os.getpid() and _owner_gone(int(pid)) and remove_tree(base / name):
            removed.append(base / name)
    return removed


def remove_tree(folder: Path, patience: float = 2.0) -> bool:
    """Remove a cgroup folder and every cgroup below it, deepest first, killing what still runs in each
    (a process whose host is gone, or a spare the exit got to first); True once it is gone."""
    try:
        children = [folder / n for n in os.listdir(folder) if (folder / n).is_dir()]
    except FileNotFoundError:
        return True
    except OSError:
        return False
    for child in children:
        remove_tree(child, patience)
    kill_until_gone(lambda: _procs(folder), patience=patience)
    for _ in range(200):
        try:
            folder.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError:  # still busy for a moment after its last process died
            time.sleep(0.001)
    return False


def _procs(folder: Path) -> list[int]:
    try:
        return [int(p) for p in (folder / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def kill_until_gone(pids: Callable[[], list[int]], spare: int | None = None, patience: float = 2.0,
                    seen: set[int] | None = None) -> bool:
    """SIGKILL what ``pids()`` lists (but ``spare``, and never this process) until it lists nothing else;
    False after ``patience`` seconds (a fork racing the kill is caught by the next pass). Every pid killed
    is added to ``seen`` when given (the caller may have to reap some of them, see :func:`.runner.stop`)."""
    stop = time.monotonic() + patience
    own = os.getpid()
    while True:
        left = [p for p in pids() if p != spare and p != own]
        if not left:
            return True
        if seen is not None:
            seen.update(left)
        if time.monotonic() > stop:
            return False
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.0005)
