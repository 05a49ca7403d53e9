"""Reaping a stopped run's orphans on a host that receives them (PID 1 or a child subreaper).

Found by ``test_no_zombies_under_a_subreaper_host`` failing about 1 run in 10 on a loaded machine: bubblewrap's
PID-namespace init (``dash``) was left a zombie of the host. A killed process is not a zombie at once (the
kernel takes a while to tear it down, and a namespace's init first waits for its namespace to die), and one
that is exiting has already left its cgroup's process list; :func:`runner.reap_orphans` read such a process as
"alive, not ours" and dropped it, and a moment later it was handed to the host as a zombie nobody reaped. Now a
process on its way out counts as dying (:func:`runner.dying`), and every child of the host owned by the run's
private uid, in any state, is waited for."""

from __future__ import annotations

import os
import signal
import time

import pytest

from lopd_envs.sandbox import runner


def _stat(state: bytes, flags: int) -> bytes:
    # pid (comm) state ppid pgrp session tty_nr tpgid flags ...
    return b"123 (py (x)) " + state + b" 1 123 123 0 -1 " + str(flags).encode() + b" 0 0 0 0"


def _status(sigpnd: int = 0, shdpnd: int = 0) -> bytes:
    return (b"Name:\tpy\nState:\tS (sleeping)\nSigPnd:\t%016x\nShdPnd:\t%016x\nSigBlk:\t0000000000000000\n"
            % (sigpnd, shdpnd))


def test_dying_is_a_zombie_an_exiting_task_or_a_pending_sigkill():
    assert runner.dying(_stat(b"Z", 0), _status())
    assert runner.dying(_stat(b"D", 0x4 | 0x400000), _status())  # PF_EXITING among other flags
    assert runner.dying(_stat(b"S", 0x400000), _status(sigpnd=1 << 8))  # SIGKILL pending on the thread
    assert runner.dying(_stat(b"R", 0), _status(shdpnd=1 << 8))  # ... or on the process
    assert not runner.dying(_stat(b"S", 0x400000), _status(sigpnd=1 << 14))  # SIGTERM pending: may be handled
    assert not runner.dying(_stat(b"R", 0), _status())
    assert not runner.dying(b"garbage", b"")


def test_dying_reads_a_real_process():
    """The parsing against the kernel's own files: a sleeping child is not dying; killed, it is (a zombie)."""
    pid = os.fork()
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    try:
        assert not runner._exiting_elsewhere(pid)  # alive, and its parent (this process) is not "elsewhere"
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while not runner._exiting_elsewhere(pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert runner._exiting_elsewhere(pid)
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a child another uid")
def test_a_dying_orphan_of_the_runs_uid_is_reaped_not_left_a_zombie():
    """A child of the host with the run's uid that is still alive when the reaping starts (as bubblewrap's
    init is while its namespace dies) is waited for and reaped; before, only children that were zombies
    already were, and this one was left a zombie. A child of another uid is not touched."""
    uid, other = 3_999_001, 3_999_002

    def child(as_uid: int, lives: float) -> int:
        pid = os.fork()
        if pid == 0:
            os.setresgid(as_uid, as_uid, as_uid)
            os.setresuid(as_uid, as_uid, as_uid)
            time.sleep(lives)
            os._exit(0)
        return pid

    run, bystander = child(uid, 0.3), child(other, 30)
    try:
        time.sleep(0.05)
        assert run in runner._orphans(uid) and bystander not in runner._orphans(uid)
        runner.reap_orphans(set(), uid, patience=5.0)
        with pytest.raises(ChildProcessError):  # reaped: no zombie left behind
            os.waitpid(run, os.WNOHANG)
        assert os.waitpid(bystander, os.WNOHANG) == (0, 0)  # still alive, still ours to wait for
    finally:
        os.kill(bystander, signal.SIGKILL)
        os.waitpid(bystander, 0)
