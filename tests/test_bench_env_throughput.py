"""benchmarks/env_throughput.py: the bare scorer and the env are timed in interleaved repetitions (ABBA...),
each ratio pairs the two passes of one repetition, and the summary is median and range with the load. The
clock is a stand-in here, so nothing is timed."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]


def load_bench():
    spec = importlib.util.spec_from_file_location("env_throughput", ROOT / "benchmarks" / "env_throughput.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bench = load_bench()


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


def test_interleaved_alternates_order_and_pairs_ratios(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(bench, "time", SimpleNamespace(perf_counter=clock.perf_counter))
    calls = []

    def bare():
        calls.append("bare")
        clock.now += 1.0

    def env():
        calls.append("env")
        clock.now += 3.0

    out = bench.interleaved(4, bare, env)
    # an untimed warm-up pair, then bare/env, env/bare, bare/env, env/bare
    assert calls == ["bare", "env"] + ["bare", "env", "env", "bare", "bare", "env", "env", "bare"]
    assert out["ratios"] == [3.0] * 4
    assert out["bare_s"] == [1.0] * 4 and out["env_s"] == [3.0] * 4


def test_ratio_is_paired_even_when_the_load_moves_between_repetitions(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(bench, "time", SimpleNamespace(perf_counter=clock.perf_counter))
    loads = iter([1, 1, 1, 1, 4, 4, 2, 2])  # warm-up pair, then three repetitions at loads 1, 4, 2
    state = {}

    def bare():
        state["load"] = next(loads)
        clock.now += 1.0 * state["load"]

    def env():
        state["load"] = next(loads)
        clock.now += 2.0 * state["load"]

    out = bench.interleaved(3, bare, env)
    assert out["ratios"] == [2.0, 2.0, 2.0]  # a best-of on each side apart would mix loads
    summary = bench.summarise(out, 100, [1.0, 1.0, 1.0])
    assert summary["env_over_bare"] == {"median": 2.0, "min": 2.0, "max": 2.0}
    assert summary["bare_steps_per_s"] == {"median": 50.0, "min": 25.0, "max": 100.0}
    assert summary["repetitions"] == 3 and summary["load_average"]["before"] == [1.0, 1.0, 1.0]
    assert len(summary["load_average"]["after"]) == 3


def test_report_line_prints_median_range_and_load():
    r = {"env_steps_per_s": {"median": 10.0, "min": 9.0, "max": 11.0},
         "bare_steps_per_s": {"median": 20.0, "min": 18.0, "max": 22.0},
         "env_over_bare": {"median": 2.0, "min": 1.9, "max": 2.2},
         "overhead_us_per_step": {"median": 50.0, "min": 40.0, "max": 60.0},
         "repetitions": 5, "solved": 3, "tasks": 4,
         "load_average": {"before": [1.5, 1.0, 0.5], "after": [2.0, 1.1, 0.6]}}
    line = bench.report_line("single turn", r)
    assert "2.00 (1.90-2.20)" in line and "5 interleaved repetitions" in line
    assert "load average 1.5 1.0 0.5 -> 2.0 1.1 0.6" in line and "solved 3/4" in line
