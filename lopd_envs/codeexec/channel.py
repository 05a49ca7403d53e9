"""The host side of a harness's result channel: records read within a budget, timed by the host's clock.

Everything on the channel comes from a process that also runs the candidate's code, so nothing in it is
trusted: the candidate can write records itself, cancel the harness's timers, replace
``signal.setitimer``/``alarm``, or flood the channel. Hence:

* **Time is the host's.** A :class:`Schedule` (one per harness protocol) says which record comes next
  and how long it may take. The window of a test opens when the previous record of the sequence
  *arrived* here and closes when this one arrives; a record later than its limit is marked ``late`` (a
  timeout, whatever it says), and once a test's deadline passes with no record, :meth:`deadline` tells
  the sandbox runner to kill the run. Only records that advance the sequence count, so a candidate
  cannot keep a window open with a stream of forged keep-alives. (A candidate that computes a later
  test during an earlier window only moves time between its own tests; each window still holds.)
  The in-sandbox timers stay as a convenience (they give the same verdict sooner and cheaper).
* **Records are budgeted before they are parsed.** A line longer than ``max_bytes`` is dropped while it
  streams (never joined), and a line whose estimated decoded size (containers and elements counted with
  ``bytes.count``) is over ``max_memory`` is never handed to the JSON parser; nesting deeper than the
  parser's recursion limit fails fast inside it. A rejected record is a ``violation``: the run is
  stopped and the verdict is a failure.
* **Answers are bounded by the schedule, not by the program.** What goes back on stdin (a request to stop
  a group, the answer to a result sent as a digest) is at most a few per test, and only for the tests the
  schedule names, whatever the program writes: a program that never reads them cannot fill the pipe and
  block the host's write.
* **Lines are cut in C.** A chunk is split at its newlines at once; cutting the rest of the chunk off at
  each line copied it once per record (a 64 KB chunk holds ~1,000 records: most of the host's time per
  record, ~8.5 -> ~5.3 us with the schedule's own shortcuts).
* **The scorer's own errors are the candidate's failure.** If the schedule's watcher raises on a record
  (a comparison that raises on a crafted value), that is a violation too, never an exception out of the
  episode.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Protocol

from lopd_envs.codeexec import valuecodec

#: Per record: raw bytes held while a line streams, and the estimated memory of its decoded value.
MAX_RECORD_BYTES = 64 << 20
MAX_RECORD_MEMORY = 256 << 20
#: Host clock tolerance over a test's limit: transport and scheduling, not computation.
SLACK_SECONDS = 0.1
SLACK_FRACTION = 0.1


def allowance(limit: float) -> float:
    """How long the host waits for a test whose limit is ``limit`` seconds."""
    return limit * (1 + SLACK_FRACTION) + SLACK_SECONDS


def estimated_memory(line: bytes) -> int:
    """An upper-bound-ish estimate of what decoding ``line`` costs, computed without parsing it: each
    container ~72 bytes, each element ~40 (pointer + small object), plus the text itself."""
    containers = line.count(b"[") + line.count(b"{")
    return 72 * containers + 40 * (line.count(b",") + line.count(b":")) + 2 * len(line)


class Schedule(Protocol):
    """A harness protocol as the host sees it: which record is next and how long it may take."""

    def limit(self) -> float | None:
        """Seconds the next record of the sequence may take (None: only the run's overall timeout)."""

    def accept(self, record: dict, /) -> bool:
        """Whether ``record`` is the next one of the sequence (then the schedule advances)."""
        ...

    def watch(self, record: dict, /) -> bytes | None:
        """A control message for the harness after an accepted record (e.g. stop early), or None."""

    # Optional: ``recognise(line: bytes) -> dict | None``, the record ``line`` is, known from its bytes
    # without parsing it (e.g. a result byte-identical to the expected one), or None to parse it as usual;
    # ``refused(record: dict) -> bytes | None``, a control message for a record that was not accepted.


@dataclass(slots=True)
class Arrival:
    record: dict
    elapsed: float  # host seconds from the previous record of the sequence to this one
    late: bool  # elapsed beyond the allowance of the limit that applied


class ResultChannel:
    """An ``interact`` callback for :meth:`Sandbox.run` (with the ``deadline`` the runner polls)."""

    #: Seconds the local runners let a trickle of records gather before reading again (see
    #: ``sandbox.runner.COALESCE_BELOW``): well under :data:`SLACK_SECONDS`, so no window moves by much.
    coalesce = 0.0005

    def __init__(self, schedule: Schedule, max_bytes: int = MAX_RECORD_BYTES,
                 max_memory: int = MAX_RECORD_MEMORY):
        self.schedule, self.max_bytes, self.max_memory = schedule, max_bytes, max_memory
        self.arrivals: list[Arrival] = []
        self.violation: str | None = None
        self.parts: list[bytes] = []
        self.held = 0
        self.window_start = time.monotonic()
        self.streamed = False
        self._recognise = getattr(schedule, "recognise", None)
        self._refused = getattr(schedule, "refused", None)

    @property
    def records(self) -> list[dict]:
        return [a.record for a in self.arrivals]

    def started(self) -> None:
        """Called by the sandbox when the program is handed to a live sandbox: the first window opens
        here, so time spent waiting for a sandbox (a Docker container starting under load) is not counted
        against the harness's first record."""
        if not self.arrivals:
            self.window_start = time.monotonic()

    def deadline(self) -> float | None:
        """Monotonic time by which the next record must arrive (now, after a violation or a late one)."""
        if self.violation is not None or (self.arrivals and self.arrivals[-1].late):
            return 0.0
        limit = self.schedule.limit()
        return None if limit is None else self.window_start + allowance(limit)

    def __call__(self, chunk: bytes) -> bytes | None:
        self.streamed = True
        if self.violation is not None:
            return None
        now = time.monotonic()
        answer = b""
        lines = chunk.split(b"\n")  # (in C: a loop cutting the rest of the chunk off each line was quadratic)
        rest = lines.pop()  # after the last newline: the start of a line still to come
        for line in lines:
            if self.parts:  # a line begun in an earlier chunk
                self.parts.append(line)
                size = self.held + len(line)
                line = b"".join(self.parts) if size <= self.max_bytes else None
                self.parts, self.held = [], 0
            elif len(line) > self.max_bytes:
                line = None
            if line is None:
                self._violate(f"an output record is over {self.max_bytes >> 20} MiB")
                return answer or None
            answer += self._line(line, now) or b""
            if self.violation is not None:
                return answer or None
        if rest:
            self.parts.append(rest)
            self.held += len(rest)
            if self.held > self.max_bytes:  # dropped while it streams, never joined
                self._violate(f"an output record is over {self.max_bytes >> 20} MiB")
                self.parts, self.held = [], 0
        return answer or None

    def finish(self) -> None:
        """The last line, if the program ended without a newline."""
        if self.parts and self.violation is None:
            self._line(b"".join(self.parts), time.monotonic())
        self.parts, self.held = [], 0

    def _violate(self, why: str) -> None:
        if self.violation is None:
            self.violation = why

    def _line(self, line: bytes, now: float) -> bytes | None:
        if not line or line.isspace():  # (not ``strip()``: that copies a 100 MB line)
            return None
        record = self._recognised(line)
        if record is None:
            record = self._parse(line)
        if record is None:
            return None
        schedule = self.schedule
        try:
            limit = schedule.limit()
            if not schedule.accept(record):
                return self._refused(record) if self._refused is not None else None
            elapsed = now - self.window_start
            self.window_start = now
            self.arrivals.append(Arrival(record, elapsed, limit is not None and elapsed > allowance(limit)))
            return schedule.watch(record)
        except Exception as exc:  # noqa: BLE001 - a crafted value made the scorer fail: the candidate fails
            self._violate(f"the scorer failed on an output record: {type(exc).__name__}: {exc}"[:300])
            return None

    def _recognised(self, line: bytes) -> dict | None:
        """The schedule's own reading of ``line`` from its bytes, if it has one (see :class:`Schedule`)."""
        if self._recognise is None:
            return None
        try:
            return self._recognise(line)
        except Exception:  # noqa: BLE001 - only a shortcut: the line is parsed as any other
            return None

    def _parse(self, line: bytes) -> dict | None:
        """The record on ``line``, parsed within the memory budget; None for anything that is not one."""
        if estimated_memory(line) > self.max_memory:
            self._violate(f"an output record would decode to over {self.max_memory >> 20} MiB")
            return None
        try:
            record = valuecodec.loads(line)
        except (ValueError, RecursionError, TypeError, MemoryError):
            return None  # not a record: ignored (only the harness's real records count)
        return record if isinstance(record, dict) else None


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
