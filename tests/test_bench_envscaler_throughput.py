"""benchmarks/envscaler_throughput.py: the two sides alternate in rounds whose order rotates, every figure is a
median with its range over those rounds, each ratio is paired per round, and the load before and after is
printed. One smoke run on two real scenarios (sandboxed); nothing is asserted about how fast they were."""

from __future__ import annotations

import json
import re

import pytest

from tests.bench_loader import load_benchmark

bench = load_benchmark("envscaler_throughput")


def test_sides_alternate_in_rotating_order(monkeypatch):
    calls = []
    monkeypatch.setattr(bench, "in_process", lambda envs, rows, sol: calls.append(("in-process", len(rows)))
                        or (1.0, 0.5, 4, 2))
    monkeypatch.setattr(bench, "sandboxed", lambda rows, sol: calls.append(("env", len(rows))) or (4.0, 1.0, 4, 2))
    timed = bench.interleaved({}, [{}] * 5, {}, repeat=3)
    assert calls[:2] == [("in-process", 2), ("env", 2)]  # the warm-up of both sides, not counted
    assert [c[0] for c in calls[2:]] == ["in-process", "env", "env", "in-process", "in-process", "env"]
    assert timed["orders"] == [["in-process", "env"], ["env", "in-process"], ["in-process", "env"]]
    assert len(timed["runs"]["env"]) == len(timed["runs"]["in-process"]) == len(timed["load_1min"]) == 3


def test_ratios_are_paired_per_round():
    timed = {"runs": {"in-process": [(1.0, 0.1, 10, 4), (2.0, 0.2, 10, 4)],
                      "env": [(10.0, 2.0, 10, 4), (40.0, 2.0, 10, 4)]}, "orders": [], "load_1min": [1.0, 2.0]}
    s = bench.summarise(timed)
    assert s["ratio_episode_steps"] == {"median": pytest.approx(0.075), "min": 0.05, "max": 0.1}
    assert s["ratio_call_steps"] == {"median": pytest.approx(0.075), "min": 0.05, "max": 0.1}
    assert s["env_steps_per_s"] == {"median": pytest.approx(0.625), "min": 0.25, "max": 1.0}
    assert s["in_process_call_steps_per_s"]["max"] == pytest.approx(40.0)


def test_smoke_run_prints_medians_ranges_and_the_load(tmp_path, capsys):
    out = tmp_path / "es.json"
    result = bench.main(["--scenarios", "1", "--repeat", "2", "--json", str(out)])
    text = capsys.readouterr().out
    assert json.loads(out.read_text())["scenarios"] == 1 and result["rounds"] == 2
    assert result["orders"] == [["in-process", "env"], ["env", "in-process"]]
    for key in ("env_steps_per_s", "in_process_steps_per_s", "ratio_episode_steps", "ratio_call_steps"):
        d = result[key]
        assert d["min"] <= d["median"] <= d["max"] and d["min"] > 0, key
    number = r"[\d.]+ \([\d.]+-[\d.]+\)"
    assert re.search(rf"whole episodes : env {number} steps/s\s+in-process {number} steps/s\s+ratio {number}", text)
    assert re.search(rf"tool-call steps: env {number} steps/s", text)
    assert re.search(r"^load average [\d. ]+ -> [\d. ]+$", text, re.MULTILINE)
    assert len(result["load_average"]["before"]) == len(result["load_average"]["after"]) == 3
