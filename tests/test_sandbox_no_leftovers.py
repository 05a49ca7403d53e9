"""The sandbox leaves no folders behind (issue 55, class 11).

A process that exited with warm spares left its ``lopd-sandbox-<pid>`` cgroup folders (its exit hook ran
before the spares were discarded, and only ``rmdir``-ed the top folder), and ``close()`` could return while
a spare's start or a stale spare's discard was still running on the background thread, whose work a
process exit then cut short (an empty ``/dev/shm/lopd-sbx-*`` stayed). Now exit (normal, or after
``close()``) removes every cgroup and run folder the process made, and a later start removes those whose
owner is dead."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import pytest

from lopd_envs.sandbox import BubblewrapSandbox, cgroup, cgroup_teardown, folders
from lopd_envs.sandbox.spares import SpareStock

BACKENDS = ["process"] + (["bubblewrap"] if BubblewrapSandbox.probe() is None else [])


class FakeSpare:
    """Stands in for a launched spare: its discard takes ``delay`` seconds (a kill, a reap, an rmtree)."""

    def __init__(self, delay: float = 0.3, fresh: bool = True):
        self.delay, self.is_fresh, self.discarded = delay, fresh, False

    def fresh(self, max_age: float) -> bool:
        return self.is_fresh

    def discard(self) -> None:
        time.sleep(self.delay)
        self.discarded = True


def test_close_waits_for_a_start_that_ends_after_it_began():
    stock, gate, spare = SpareStock(fixed=1), threading.Event(), FakeSpare()
    stock.refill("k", lambda: (gate.wait(10), spare)[1])
    closing = threading.Thread(target=stock.close)
    closing.start()
    time.sleep(0.1)  # close() is waiting for the start
    gate.set()
    closing.join(10)
    assert spare.discarded, "close() returned while the spare it refused was still being discarded"


def test_close_waits_for_the_discard_of_a_stale_spare():
    stock, stale = SpareStock(fixed=1), FakeSpare(fresh=False)
    stock._ready["k"] = __import__("collections").deque([stale])
    assert stock.take("k") is None
    stock.close()
    assert stale.discarded, "close() returned while a stale spare's discard was queued"


_CHILD = textwrap.dedent("""
    import json, os, sys
    from lopd_envs.sandbox import BubblewrapSandbox, ProcessSandbox, cgroup, spares
    kind, how = sys.argv[1], sys.argv[2]
    sandbox = (ProcessSandbox if kind == "process" else BubblewrapSandbox)(spares=2)
    assert sandbox.run("print(6 * 7)", timeout=20).stdout.strip() == "42"
    if how == "racing-close":  # the refill's starts are in flight when close() is called
        sandbox.close()
    else:
        spares.drain()
        sandbox.spares.settle()
    where = cgroup.layout()
    made = [] if where is None else [str(p) for p in {where.memory, where.pids} if p is not None]
    waiting = [str(s.folder) for ready in sandbox.spares._ready.values() for s in ready]
    print(json.dumps({"cgroups": made, "spares": waiting, "pid": os.getpid()}))
    if how == "close":
        sandbox.close()
""")


def _child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOPD_SANDBOX")}
    env["OMP_NUM_THREADS"] = "1"
    return env


def _run_child(kind: str, how: str) -> dict:
    out = subprocess.run([sys.executable, "-c", _CHILD, kind, how], capture_output=True, text=True, timeout=120,
                         env=_child_env())
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _own_run_folders(pid: int) -> list[str]:
    homes = {folders.workdir_root() or tempfile.gettempdir(), tempfile.gettempdir()}
    return [path for home in homes for owner, path in folders._owned_folders(home) if owner == pid]


@pytest.mark.parametrize("how", ["exit", "close", "racing-close"])
@pytest.mark.parametrize("kind", BACKENDS)
def test_exit_removes_every_cgroup_and_run_folder_it_made(kind, how):
    seen = _run_child(kind, how)
    if how != "racing-close":
        assert seen["spares"], "the child had no warm spare: the test would prove nothing"
    left = [p for p in seen["cgroups"] + seen["spares"] if os.path.exists(p)]
    assert left == [] and _own_run_folders(seen["pid"]) == []


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_a_later_start_removes_stale_folders_of_dead_owners():
    dead = _dead_pid()
    home = folders.workdir_root() or tempfile.gettempdir()
    stale = Path(home) / f"{folders.FOLDER_PREFIX}{dead}-stale"
    live = Path(home) / f"{folders.FOLDER_PREFIX}{os.getpid()}-live"  # ours: alive, never swept by another
    for folder in (stale, live):
        folder.mkdir()
        (folder / "main.py").write_text("pass")
    where = cgroup.layout()  # our own lopd-sandbox-<pid> folders: a live owner's, which no sweep may remove
    live_groups = [] if where is None else [p for p in {where.memory, where.pids} if p is not None]
    stale_groups = [folder.parent / f"{cgroup_teardown.PREFIX}{dead}" for folder in live_groups]
    for group in stale_groups:
        (group / "run-0").mkdir(parents=True)
    try:
        _run_child("process", "close")
        assert not stale.exists() and live.exists()
        assert not any(g.exists() for g in stale_groups) and all(g.exists() for g in live_groups)
    finally:
        shutil.rmtree(live, ignore_errors=True)
        shutil.rmtree(stale, ignore_errors=True)
        for group in stale_groups:
            for folder in (group / "run-0", group):
                try:
                    folder.rmdir()
                except OSError:
                    pass
