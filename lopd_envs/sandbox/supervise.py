"""The host's supervision of one run, the same for every backend.

Whoever carries the bytes (a local process's pipes in :mod:`.runner`, the frames of a container's run
server in :mod:`.docker`), the host alone decides when a run is over and what it did: the wall-clock limit
and a scorer's per-test deadline, the output budget shared by stdout and stderr, the scorer that reads
stdout live (its answers go back to the program's stdin; a scorer that raises ends the run), and the
verdict built from all of that. The backends only move bytes and kill; this class holds every rule, so the
two cannot drift apart (a timeout, an overflow or a scorer error means the same on each).
"""

from __future__ import annotations

import time

from lopd_envs.sandbox.base import Interact, Limits, OutputBudget, RunResult, looks_out_of_memory

#: With a streaming ``interact`` the scorer reads the records; only this much stdout is also kept.
STREAMED_STDOUT_KEPT = 1 << 20


class Supervision:
    """One run's clock, output and scorer. Create it once the program exists (a scorer's ``started()`` is
    called here: waiting for a sandbox is not the program's time); ``start`` is when the limit's clock
    started (default: now)."""

    def __init__(self, limits: Limits, interact: Interact | None = None, start: float | None = None):
        self.start = time.monotonic() if start is None else start
        self.deadline = self.start + limits.timeout
        self.interact = interact
        self.test_deadline = getattr(interact, "deadline", None)
        started = getattr(interact, "started", None)
        if callable(started):
            started()
        self.output = OutputBudget(limits.output, None if interact is None else STREAMED_STDOUT_KEPT)
        self.timed_out = self.stopped = False
        self.error: str | None = None

    def remaining(self) -> float | None:
        """Seconds until the next deadline (the run's limit or the scorer's current test), or ``None`` once
        one has passed (``timed_out`` or ``stopped`` is then set)."""
        now = time.monotonic()
        test = self.test_deadline() if self.test_deadline is not None else None
        if test is not None and test <= now:
            self.stopped = True
            return None
        if now >= self.deadline:
            self.timed_out = True
            return None
        return min(self.deadline, test if test is not None else self.deadline) - now

    def take(self, stream: int, data: bytes) -> bytes | None:
        """Count ``data`` of ``stream`` (:attr:`OutputBudget.STDOUT` or ``STDERR``) against the budget and
        show stdout to the scorer; returns the scorer's answer for the program's stdin, if any. Check
        :attr:`over` after each call."""
        self.output.add(stream, data)
        if self.interact is None or stream != OutputBudget.STDOUT:
            return None
        try:
            return self.interact(data)
        except Exception as exc:  # noqa: BLE001 - candidate output made the scorer fail: the run ends
            self.fail(f"the scorer failed on the program's output: {type(exc).__name__}: {exc}")
            return None

    def fail(self, error: str) -> None:
        """End the run with a sandbox-side error (never the program's verdict)."""
        self.error = error[:500]

    @property
    def over(self) -> bool:
        """The run must end now: its output passed the budget, or the host side failed."""
        return self.output.truncated or self.error is not None

    def result(self, exit_code: int | None, backend: str, isolating: bool, oom_killed: bool = False,
               wall: float | None = None) -> RunResult:
        """The verdict. ``exit_code`` is ``None`` when the program was not seen to exit; ``oom_killed`` is
        the backend's own evidence (a cgroup's OOM count); a MemoryError or a SIGKILL counts only for a run
        that ended by itself."""
        stdout, stderr = self.output.text(OutputBudget.STDOUT), self.output.text(OutputBudget.STDERR)
        ended_by_host = self.timed_out or self.output.truncated or self.stopped
        oom = oom_killed or (not ended_by_host and looks_out_of_memory(exit_code, stderr))
        wall = time.monotonic() - self.start if wall is None else wall
        return RunResult(stdout, stderr, exit_code, self.timed_out, oom, wall, backend, isolating,
                         truncated=self.output.truncated, error=self.error, stopped=self.stopped)
