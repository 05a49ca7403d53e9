"""benchmarks/env_throughput.py: the bare scorer and the env are timed interleaved slice by slice (ABBA...),
each ratio pairs the two sides of one repetition, and the summary is median and range with the load. The
clock is a stand-in here, so nothing is timed."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests.bench_loader import load_benchmark

bench = load_benchmark("env_throughput")


class FakeClock:
    """Wall and CPU clocks that only move when a stand-in pass says so."""

    def __init__(self):
        self.now = 0.0
        self.cpu = 0.0

    def perf_counter(self) -> float:
        return self.now

    def process_time(self) -> float:
        return self.cpu

    def spend(self, wall: float, cpu: float) -> None:
        self.now += wall
        self.cpu += cpu


@pytest.fixture
def clock(monkeypatch):
    c = FakeClock()
    monkeypatch.setattr(bench, "time", SimpleNamespace(perf_counter=c.perf_counter, process_time=c.process_time))
    return c


def test_slices_alternate_order_and_each_ratio_pairs_one_repetition(clock):
    calls = []

    def bare(i):
        calls.append(("bare", i))
        clock.spend(1.0, 1.0)

    def env(i):
        calls.append(("env", i))
        clock.spend(3.0, 2.0)

    out = bench.interleaved(2, 3, bare, env)
    warm = [("bare", 0), ("bare", 1), ("bare", 2), ("env", 0), ("env", 1), ("env", 2)]
    one = [("bare", 0), ("env", 0), ("env", 1), ("bare", 1), ("bare", 2), ("env", 2)]
    assert calls == warm + one + one
    assert out["ratios"] == [3.0, 3.0] and out["cpu_ratios"] == [2.0, 2.0]
    assert out["bare_s"] == [3.0, 3.0] and out["env_s"] == [9.0, 9.0] and out["chunks"] == 3


def test_a_load_change_between_slices_moves_both_sides_of_a_ratio(clock):
    """The machine gets 4x slower from the second slice on: both sides of the repetition pay it in wall time,
    the ratio stays the work's, and CPU time does not see it at all."""
    calls = [0]

    def factor() -> float:  # calls 1-4: the warm-up; 5-6: timed slice 0; from 7 on (slice 1) 4x slower
        calls[0] += 1
        return 4.0 if calls[0] >= 7 else 1.0

    def bare(i):
        clock.spend(1.0 * factor(), 1.0)

    def env(i):
        clock.spend(2.0 * factor(), 2.0)

    out = bench.interleaved(1, 2, bare, env)
    assert out["ratios"] == [2.0] and out["cpu_ratios"] == [2.0]
    summary = bench.summarise(out, 100, [1.0, 1.0, 1.0])
    assert summary["env_over_bare"] == {"median": 2.0, "min": 2.0, "max": 2.0}
    assert summary["bare_steps_per_s"]["median"] == 100 / 5.0
    assert summary["repetitions"] == 1 and summary["load_average"]["before"] == [1.0, 1.0, 1.0]


def test_slices_cover_every_index_once():
    parts = bench.slices(10, 3)
    assert [list(p) for p in parts] == [[0, 1, 2], [3, 4, 5], [6, 7, 8, 9]]
    assert sum(len(p) for p in bench.slices(7, 7)) == 7 and bench.slices(2, 3)[0] == range(0, 0)


def test_report_line_prints_median_range_and_load():
    r = {"env_steps_per_s": {"median": 10.0, "min": 9.0, "max": 11.0},
         "bare_steps_per_s": {"median": 20.0, "min": 18.0, "max": 22.0},
         "env_over_bare": {"median": 2.0, "min": 1.9, "max": 2.2},
         "env_over_bare_cpu": {"median": 1.8, "min": 1.7, "max": 1.9},
         "overhead_us_per_step": {"median": 50.0, "min": 40.0, "max": 60.0},
         "overhead_cpu_us_per_step": {"median": 45.0, "min": 40.0, "max": 50.0}, "raw": {"chunks": 20},
         "repetitions": 5, "solved": 3, "tasks": 4,
         "load_average": {"before": [1.5, 1.0, 0.5], "after": [2.0, 1.1, 0.6]}}
    line = bench.report_line("single turn", r)
    assert "2.00 (1.90-2.20)" in line and "5 repetitions interleaved in 20 slices" in line
    assert "in CPU time 1.80 (1.70-1.90)" in line
    assert "load average 1.5 1.0 0.5 -> 2.0 1.1 0.6" in line and "solved 3/4" in line
