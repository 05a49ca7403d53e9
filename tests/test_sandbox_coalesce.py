"""The local runner's read coalescing (issue 53 item 5): a scorer that sets ``coalesce`` sees a program's trickle
of short records a batch at a time, not one wake-up each, and every deadline still stops the run on time."""

from __future__ import annotations

import time

TRICKLE = "import sys\nfor i in range(3000):\n    sys.stdout.write('%d\\n' % i)\n    sys.stdout.flush()\n"


class Reader:
    coalesce = 0.0005

    def __init__(self) -> None:
        self.calls = self.lines = 0

    def __call__(self, chunk: bytes) -> bytes | None:
        self.calls += 1
        self.lines += chunk.count(b"\n")
        return None


def test_a_trickle_of_records_is_read_in_batches(bubblewrap):
    reader = Reader()
    result = bubblewrap.run(TRICKLE, interact=reader, timeout=60)
    assert result.ok and reader.lines == 3000
    assert reader.calls < 300, reader.calls  # (an idle host woke the reader every ~2.4 lines without it)


def test_a_deadline_still_stops_a_coalescing_run_on_time(bubblewrap):
    class Deadline(Reader):
        def started(self) -> None:
            self.start = time.monotonic()

        def deadline(self) -> float:
            return self.start + 0.5

    reader = Deadline()
    start = time.monotonic()
    result = bubblewrap.run("import time\nprint('x', flush=True)\ntime.sleep(60)\n", interact=reader, timeout=60)
    assert result.stopped and not result.timed_out and time.monotonic() - start < 10
