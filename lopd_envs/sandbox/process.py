"""Plain-process backend: a fresh interpreter with rlimits, its own session and a scrubbed environment.

This is **not isolation**: the program shares the host's network and file system (results say
``isolating=False``). It exists for machines without bubblewrap or docker. When the caller is root the
program still runs under a throw-away unprivileged uid, so RLIMIT_NPROC holds (it is ignored for root),
root-only files such as ``/root`` stay unreadable, and other users' processes cannot be signalled.
"""

from __future__ import annotations

from pathlib import Path

from lopd_envs.sandbox import interpreter
from lopd_envs.sandbox.base import BOOTSTRAP, UIDS, Interact, Limits, RunResult, Sandbox, as_root, scrubbed_env
from lopd_envs.sandbox.runner import execute


class ProcessSandbox(Sandbox):
    name = "process"
    isolating = False

    def __init__(self, limits: Limits | None = None, python: interpreter.Interpreter | None = None):
        super().__init__(limits)
        self.python = python or interpreter.resolve(as_root())

    def argv(self, wd: Path, limits: Limits, uid: int | None = None) -> list[str]:
        """The command line for one run of ``wd/main.py`` (also used by persistent sessions)."""
        argv = [self.python.executable, "-I", "-S", "-c", BOOTSTRAP, *limits.rlimit_args(), str(wd / "main.py")]
        if uid is None:
            # Not root: RLIMIT_NPROC counts all of the caller's processes, so allow what already runs.
            argv[argv.index(BOOTSTRAP) + 4] = str(limits.processes + own_process_count())
        return argv

    def _run(self, wd: Path, stdin: bytes, limits: Limits, interact: Interact | None = None) -> RunResult:
        uid = UIDS.acquire() if as_root() else None
        argv = self.argv(wd, limits, uid)
        try:
            return execute(argv, stdin, limits, self.name, self.isolating, env=scrubbed_env(str(wd)),
                           cwd=str(wd), uid=uid, interact=interact)
        finally:
            if uid is not None:
                UIDS.release(uid)

    @classmethod
    def probe(cls) -> str | None:
        try:
            interpreter.resolve(as_root())
        except RuntimeError as exc:
            return str(exc)
        return None


def own_process_count() -> int:
    """Processes (threads included, as RLIMIT_NPROC counts them) owned by our uid right now."""
    import os
    uid, count = os.getuid(), 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/status") as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
            if int(fields["Uid"].split()[0]) == uid:
                count += int(fields.get("Threads", "1"))
        except (OSError, KeyError, ValueError):
            continue
    return count
