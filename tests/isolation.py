"""What the sandbox tests share: a loud skip (a failure under ``CI=true``) when no isolating backend
works, and a look at which sandbox processes are still alive."""

from __future__ import annotations

import os

import pytest

from lopd_envs.sandbox import available_backends
from lopd_envs.sandbox.base import UIDS
from lopd_envs.sandbox.spares import WAITING_UIDS

BWRAP_PROBLEM = available_backends()["bubblewrap"]


def require_bubblewrap() -> None:
    """Skip, saying why, when bubblewrap cannot run here; under ``CI=true`` that is a failure instead."""
    if BWRAP_PROBLEM is None:
        return
    message = f"SKIPPED: this test needs the bubblewrap sandbox, which does not work here: {BWRAP_PROBLEM}"
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(message + " (CI=true: a missing isolating backend is a failure)")
    print(message)
    pytest.skip(message)


def sandbox_processes() -> list[int]:
    """Host pids whose real uid is one of this process's sandbox slot uids (alive or zombie), except the
    warm spares that wait for a run (each on a uid of its own, see lopd_envs.sandbox.spares). A spare's uid
    is listed before its first process exists, so it is checked per process, not once before the scan."""
    uids, found = UIDS.uids, []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status") as f:
                for line in f:
                    if line.startswith("Uid:"):
                        uid = int(line.split()[1])
                        if uid in uids and uid not in WAITING_UIDS:
                            found.append(int(name))
                        break
        except OSError:
            continue
    return found
