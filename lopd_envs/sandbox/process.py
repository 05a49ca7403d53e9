"""Plain-process backend: a fresh interpreter with rlimits, its own session and a scrubbed environment.

This is **not isolation**: the program shares the host's network and file system (results say
``isolating=False``). It exists for machines without bubblewrap or docker. When the caller is root the
program still runs under a throw-away unprivileged uid, so RLIMIT_NPROC holds (it is ignored for root),
root-only files such as ``/root`` stay unreadable, and other users' processes cannot be signalled.
"""

from __future__ import annotations

from pathlib import Path

from lopd_envs.sandbox import interpreter
from lopd_envs.sandbox.base import BOOTSTRAP, SPARE_BOOTSTRAP, Limits, as_root, scrubbed_env
from lopd_envs.sandbox.spares import MAX_AGE, Command, SpareSandbox


class ProcessSandbox(SpareSandbox):
    name = "process"
    isolating = False

    def __init__(self, limits: Limits | None = None, python: interpreter.Interpreter | None = None,
                 spares: int | None = None, max_age: float = MAX_AGE):
        super().__init__(limits, spares, max_age)
        self.python = python or interpreter.resolve(as_root())

    def argv(self, wd: Path, limits: Limits, uid: int | None = None) -> list[str]:
        """The command line for one run of ``wd/main.py`` (used by persistent sessions)."""
        return [self.python.executable, "-I", "-S", "-c", BOOTSTRAP, *self._rlimits(limits, uid is None),
                str(wd / "main.py")]

    @staticmethod
    def _rlimits(limits: Limits, own_uid: bool) -> list[str]:
        args = limits.rlimit_args()
        if own_uid:  # not root: RLIMIT_NPROC counts all of the caller's processes, so allow what already runs
            args[3] = str(limits.processes + own_process_count())
        return args

    def spare_command(self, folder: Path, limits: Limits) -> Command:
        return Command([self.python.executable, "-I", "-S", "-c", SPARE_BOOTSTRAP], env=scrubbed_env(str(folder)),
                       cwd=str(folder))

    def spare_key(self, limits: Limits) -> tuple:
        return (self.python,)

    def bootstrap_args(self, folder: Path, limits: Limits) -> list[str]:
        return [*self._rlimits(limits, not as_root()), str(folder / "main.py")]

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
