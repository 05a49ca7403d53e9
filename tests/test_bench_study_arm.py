"""benchmarks/study_arm.py: the two arms alternate in rounds of rotating order, each reduced run's parts are
timed with their units (bank rollouts, cold-start steps, training rollouts, evaluated tasks, checkpoints), and
the full arm's projection multiplies each unit's cost by the full study's count of it. The reduced runs are
the tiny random model on the toy env, in-process; nothing is asserted about how long anything took."""

from __future__ import annotations

import argparse
import re

import pytest

from tests.bench_loader import load_benchmark

bench = load_benchmark("study_arm")


def tiny_args(**kw) -> argparse.Namespace:
    base = {"steps": 1, "pool_tasks": 4, "heldout_tasks": 2, "bank_samples": 1, "cold_start_steps": 1, "rounds": 1,
            "tiny": True}
    return argparse.Namespace(**{**base, **kw})


def test_full_counts_follow_the_study_config():
    """LOPD's bank (4 x 32 = 128 rollouts) crosses the first milestone with the student unchanged: that point is
    reused, so 4 of its 5 points evaluate; GRPO spends all 512 rollouts on 64 steps and evaluates 5 points."""
    lopd, grpo = bench.full_counts("lopd", False), bench.full_counts("grpo", False)
    assert lopd["bank"] == 128 and lopd["cold_start"] == 200 and lopd["train"] == 384 and lopd["points"] == 4
    assert lopd["heldout"] == 4 * 120 and lopd["train_eval"] == 4 * 32 and lopd["pig"] == 48 // 8
    assert grpo["bank"] == 0 and grpo["cold_start"] == 0 and grpo["train"] == 512 and grpo["points"] == 5
    assert grpo["heldout"] == 5 * 120 and "pig" not in grpo and grpo["checkpoint"] == 64


def test_projection_multiplies_unit_costs_by_counts():
    runs = [{"wall_s": 10.0, "seconds": {"bank": 2.0, "rollout": 2.0, "update": 2.0, "heldout": 1.0},
             "units": {"bank": 4, "rollout": 4, "update": 4, "heldout": 2}},
            {"wall_s": 20.0, "seconds": {"bank": 4.0, "rollout": 4.0, "update": 4.0, "heldout": 3.0},
             "units": {"bank": 4, "rollout": 4, "update": 4, "heldout": 2}}]
    costs = bench.per_unit(runs)
    assert costs["train"] == {"median": 1.5, "min": 1.0, "max": 2.0}  # (rollout + update) per training rollout
    assert costs["fixed"] == {"median": 4.0, "min": 3.0, "max": 5.0}
    proj = bench.project(costs, {"bank": 128, "train": 384, "heldout": 480, "cold_start": 200, "fixed": 1})
    assert proj["parts"]["bank"] == {"median": 96.0, "min": 64.0, "max": 128.0}
    assert proj["total_s"]["median"] == pytest.approx(96 + 576 + 480 + 4)
    assert proj["unmeasured"] == ["cold_start"]  # never hidden: printed beside the projection


def test_arms_alternate_in_rotating_order(monkeypatch, capsys):
    order = []

    def fake(arm, argv):
        order.append(arm)
        return {"arm": arm, "wall_s": 5.0, "seconds": {"rollout": 1.0, "update": 1.0}, "units": {"rollout": 4},
                "rollouts": 4, "steps": 1}
    monkeypatch.setattr(bench, "run_arm", fake)
    result = bench.main(["--rounds", "3"])
    assert order == ["lopd", "grpo", "grpo", "lopd", "lopd", "grpo"] and len(result["load_1min_per_round"]) == 3
    out = capsys.readouterr().out
    assert re.search(r"lopd full arm \(4 held-out points evaluated\): projected [\d.]+ h \([\d.]+ h-[\d.]+ h\); "
                     r"not measured in the reduced run: bank, cold_start", out)
    assert re.search(r"^load average [\d. ]+ -> [\d. ]+; \d+ s; command:", out, re.MULTILINE)


@pytest.mark.parametrize("arm", ["lopd", "grpo"])
def test_reduced_run_times_every_part_with_its_units(arm):
    r = bench.arm_worker(arm, tiny_args())
    u = r["units"]
    assert r["steps"] == 1 and u["rollout"] == u["update"] == 4  # 2 tasks x 2 rollouts, one step
    assert u["heldout"] == 2 * 2 and u["train_eval"] == 2 * 4  # the start point and the final one, each file
    assert u["checkpoint"] >= 1 and r["wall_s"] >= sum(r["seconds"].values())
    if arm == "lopd":
        assert u["bank"] == 4 and u.get("cold_start", 0) <= 1  # 1 sample x 4 pool tasks; a step if any success
    else:
        assert "bank" not in u and "cold_start" not in u
