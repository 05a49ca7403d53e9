"""benchmarks/sample_efficiency.py: the table's arithmetic, and the whole study end to end on a tiny random
model (runs, held-out points, table, CSV, PNG, resume that skips finished runs)."""

from __future__ import annotations

import csv
import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def load_study():
    spec = importlib.util.spec_from_file_location("sample_efficiency", ROOT / "benchmarks" / "sample_efficiency.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


se = load_study()


def test_heldout_and_training_pools_are_fixed_disjoint_and_large_enough():
    assert len(se.HELDOUT) == len(set(se.HELDOUT)) == 120 and len(se.POOL) == len(set(se.POOL)) == 32
    assert set(se.HELDOUT).isdisjoint(se.POOL) and not {"simple_0", "simple_1"} & set(se.HELDOUT + se.POOL)
    assert se.COMMON["eval_training_tasks"] is True  # the pool's reward is reported beside the held-out one


def test_plan_puts_the_headline_first_seeds_first_and_gives_them_three_seeds():
    names = [r.name for r in se.plan([v.name for v in se.VARIANTS], None)]
    assert names[:3] == ["lopd-s0", "grpo-s0", "opsd-s0"]
    three = ("lopd", "grpo", "opsd", "sdpo-ref", "sdft-ref")  # the headline and the references' baselines
    assert sorted(n for n in names if n.endswith(("-s1", "-s2"))) == sorted(
        f"{a}-s{s}" for a in three for s in (1, 2))
    assert len(names) == len(se.VARIANTS) + 2 * len(three)
    with pytest.raises(SystemExit):
        se.plan(["nope"], None)


def test_run_config_spends_the_budget_including_bank_and_cold_start():
    run = se.Run(se.BY_NAME["lopd-nomargin"], 3)
    cfg = se.run_config(run, Path("/x"), 512, 128, tiny=False)
    assert cfg["rollout_budget"] == 512 and cfg["steps"] == 64 and cfg["eval_every_rollouts"] == 128
    assert cfg["algo"] == "lopd" and cfg["beta_lr"] == 0.0 and cfg["beta_init"] == 0.0 and cfg["seed"] == 3
    assert cfg["bank_samples"] == 4 and cfg["cold_start_steps"] > 0 and cfg.get("bank_mode", "reference") == "reference"
    assert cfg["output_dir"] == "/x/runs/lopd-nomargin-s3"
    assert cfg["init_from"] == "/x/runs/lopd-s3/checkpoints/cold-start"  # it shares LOPD's cold start
    assert "init_from" not in se.run_config(se.Run(se.BY_NAME["lopd"], 3), Path("/x"), 512, 128, tiny=False)
    grpo = se.run_config(se.Run(se.BY_NAME["grpo"], 0), Path("/x"), 512, 128, tiny=False)
    assert "bank_samples" not in grpo and "cold_start_steps" not in grpo


def test_every_unforked_run_takes_point_zero_from_the_first_planned_one():
    """One evaluation of the untrained student serves the study: each unforked run names the first planned run
    in --eval-start-from; that run evaluates its own, and forks copy their source's records instead."""
    runs = se.plan([v.name for v in se.VARIANTS], None)
    source = se.start_points_source(runs)
    assert source.name == "lopd-s0"
    cfgs = {r.name: se.run_config(r, Path("/x"), 512, 128, tiny=False, start_from=source) for r in runs}
    assert "eval_start_from" not in cfgs["lopd-s0"]
    assert cfgs["grpo-s2"]["eval_start_from"] == cfgs["sdft-s0"]["eval_start_from"] == "/x/runs/lopd-s0"
    forked = [n for n, c in cfgs.items() if "init_from" in c]
    assert forked and all("eval_start_from" not in cfgs[n] for n in forked)
    assert sum("eval_start_from" in c for c in cfgs.values()) == len(runs) - 1 - len(forked)
    from lopd_train.config import TrainConfig

    for c in cfgs.values():  # every config is one the trainer accepts
        TrainConfig(**c)


def test_point_zero_source_is_a_run_that_already_holds_it(tmp_path):
    """A study resumed on a new machine, where only committed runs survive, takes point 0 from a run that holds
    it (both files, with its config) rather than re-evaluating it in the first planned run; a run with only
    one of the two points, or a damaged file, is no source."""
    runs = se.plan([v.name for v in se.VARIANTS], None)
    assert se.start_points_source(runs, tmp_path).name == "lopd-s0"  # nothing on disk
    point = json.dumps({"milestone": 0, "rollouts": 0, "step": 0, "mean_reward": 0.5, "rewards": {"a": 0.5}})
    opsd = tmp_path / "runs" / "opsd-s0"
    opsd.mkdir(parents=True)
    (opsd / "config.json").write_text("{}")
    (opsd / "heldout.jsonl").write_text(point + "\n")
    assert se.start_points_source(runs, tmp_path).name == "lopd-s0"  # no training-pool point
    (opsd / "train_eval.jsonl").write_text("[1, 2]\n" + point + "\n")
    assert se.start_points_source(runs, tmp_path).name == "lopd-s0"  # damaged before the last line
    (opsd / "train_eval.jsonl").write_text(point + "\n")
    assert se.start_points_source(runs, tmp_path).name == "opsd-s0"
    cfgs = {r.name: se.run_config(r, tmp_path, 512, 128, tiny=False, start_from=se.start_points_source(runs, tmp_path))
            for r in runs}
    assert "eval_start_from" not in cfgs["opsd-s0"]
    assert cfgs["lopd-s0"]["eval_start_from"] == str(opsd)


def test_paired_difference_cancels_task_difficulty_and_brackets_the_mean():
    a = {f"t{i}": float(i % 2) for i in range(40)}
    b = {f"t{i}": 0.0 for i in range(40)}
    d = se.paired_difference(a, b)
    assert d["diff"] == pytest.approx(0.5) and d["low"] < 0.5 < d["high"] and d["low"] > 0 and d["n"] == 40
    assert se.paired_difference(a, a)["diff"] == 0.0 and se.paired_difference(a, {"x": 1.0}) is None
    assert se.seed_mean_per_task({0: {"t": 1.0, "u": 0.0}, 1: {"t": 0.0}}) == {"t": 0.5, "u": 0.0}


def test_a_paired_cell_names_unequal_seed_counts_and_only_those():
    """A seed mean against a single GRPO seed is not the final comparison; the cell must say so."""
    tasks = {f"t{i}": float(i % 2) for i in range(20)}
    per_task = {"lopd": {0: {0: tasks, 1: tasks}, 128: {0: tasks, 1: tasks}},
                "grpo": {0: {0: tasks, 1: tasks}, 128: {0: tasks}}}
    (row,) = se.paired_table(per_task, budget=128, every=128)
    assert row[0] == "lopd"
    assert row[1] == "+0.000 [+0.000, +0.000]"
    assert row[2] == "+0.000 [+0.000, +0.000] (2 vs 1 seeds)"


def test_the_cold_start_nll_of_a_resumed_cold_start_starts_at_its_first_step():
    """lopd-s0's cold start resumed from a checkpoint: its summary row has no first NLL, the step-1 row does."""
    steps = [{"phase": "cold_start", "step": 0, "cold_start_step": k, "cold_start_nll": v}
             for k, v in ((1, 0.19), (2, 0.15), (3, 0.01))]
    resumed = [*steps, {"phase": "cold_start", "cold_start_steps": 3, "cold_start_resumed_at": 2,
                        "cold_start_nll_last": 0.01}]
    assert se.cold_start_nll(resumed) == (0.19, 0.01)
    whole = [*steps, {"phase": "cold_start", "cold_start_steps": 3, "cold_start_nll_first": 0.19,
                      "cold_start_nll_last": 0.01}]
    assert se.cold_start_nll(whole) == (0.19, 0.01)
    assert se.cold_start_nll([{"phase": "train", "step": 1}]) == (None, None)


def test_a_runaway_is_a_delta_growing_more_than_one_nat_within_five_steps():
    rows = [{"phase": "train", "step": s, "margin_delta": d} for s, d in
            enumerate([0.0, 0.01, 0.02, 0.83, 1.5, 2.9, 4.29, 4.3, 4.2, 4.25], start=38)]
    assert se.runaways(rows) == [(38, 47, pytest.approx(4.28))]  # study v1's lopd-m0.1-s0, one stretch
    slow = [{"phase": "train", "step": s, "margin_delta": 0.3 * s} for s in range(20)]  # 1.5 per 5 steps
    assert se.runaways(slow, window=5, jump=1.6) == [] and se.runaways(slow, window=5, jump=1.4) != []
    assert se.runaways([{"phase": "cold_start", "step": 0}]) == []


def test_rollouts_to_reach_is_the_first_budget_at_or_above_the_target():
    curve = {0: 0.2, 96: 0.5, 192: 0.45, 288: 0.6}
    assert se.rollouts_to_reach(curve, 0.5) == 96
    assert se.rollouts_to_reach(curve, 0.55) == 288
    assert se.rollouts_to_reach(curve, 0.7) is None


def test_table_waits_for_every_grpo_seed_before_naming_a_target():
    data = {"grpo": {0: {0: 0.1, 1: 0.3}, 8: {0: 0.5}}, "lopd": {0: {0: 0.2}, 8: {0: 0.6}}}
    _, rows, _ = se.table(data, 8, 8, {"grpo": 2, "lopd": 1})
    assert all(r[-1] == "n/a (GRPO unfinished)" for r in rows)
    data["grpo"][8][1] = 0.7  # GRPO's final: 0.6
    _, rows, csv_rows = se.table(data, 8, 8, {"grpo": 2, "lopd": 1})
    by = {r[0]: r for r in rows}
    assert by["grpo"][2] == "0.200 ± 0.100" and by["grpo"][-1] == "8"
    assert by["lopd"][-1] == "8"
    assert {r["grpo_final"] for r in csv_rows} == {0.6}


def test_run_summary_counts_training_steps_updates_and_success(tmp_path):
    rows = [{"phase": "cold_start", "rollouts": 16, "success_rate": 1.0, "seconds": 900.0},
            {"phase": "train", "rollouts": 24, "success_rate": 0.25, "grad_norm": 0.3, "bank_size": 3, "seconds": 40.0},
            {"phase": "train", "rollouts": 32, "success_rate": 0.0, "grad_norm": 0.0, "bank_size": 3, "seconds": 50.0},
            {"phase": "train", "rollouts": 40, "success_rate": 0.5, "grad_norm": 1.2, "bank_size": 5, "seconds": 45.0}]
    m = se.run_summary(rows)
    assert m == {"steps": 3, "rollouts": 40, "train_success": pytest.approx(0.25), "updated_steps": 2, "bank": 5,
                 "median_step_s": 45.0}
    assert se.run_summary([])["train_success"] is None
    path = tmp_path / "metrics.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + '\n{"phase": "tra')  # killed mid-write
    from lopd_train.training.heldout import read_points  # the report reads metrics.jsonl with it

    assert read_points(path) == rows


def test_a_committed_copy_without_checkpoints_reports_partial_but_resumes_as_new(tmp_path):
    run = tmp_path / "opsd-s1"
    run.mkdir()
    assert se.status(run, 512) == se.report_status(run, 512) == "new"
    (run / "metrics.jsonl").write_text(json.dumps({"phase": "train", "rollouts": 8}) + "\n")
    assert se.status(run, 512) == "new"  # nothing to resume from
    assert se.report_status(run, 512) == "partial"  # but its rows are reported
    (run / "heldout.jsonl").write_text(json.dumps({"milestone": 512, "rollouts": 512, "rewards": {}}) + "\n")
    assert se.status(run, 512) == se.report_status(run, 512) == "done"


def test_task_changes_name_the_tasks_gained_and_lost_since_the_untrained_student():
    pts = [{"rollouts": 0, "rewards": {"a": 1.0, "b": 0.0, "c": 1.0, "d": 0.0}},
           {"rollouts": 96, "rewards": {"a": 0.0, "b": 1.0, "c": 1.0, "d": 0.0}},
           {"rollouts": 192, "rewards": {"a": 0.0, "b": 0.0, "c": 1.0, "d": 1.0}}]
    ch = se.task_changes(pts)
    assert ch == {"from": 0, "to": 192, "gained": ["d"], "lost": ["a"], "kept": 1}  # b came and went: not gained
    assert se.task_changes(pts[:1]) is None
    assert se.task_changes([{"rollouts": 0}, *pts[:1]]) is None  # a point without per-task rewards is not compared


def read_csv(path: Path) -> list[dict]:
    with open(path) as f:
        return list(csv.DictReader(f))


def test_a_child_run_is_the_documented_command_at_its_thread_count(tmp_path, monkeypatch):
    """``--jobs``: each run is exactly its ``commands.md`` line (``lopd-train --config C --resume``) in a child
    with ``threads`` torch threads, its output in the run folder."""
    import subprocess

    seen = {}

    def fake_run(cmd, **kw):
        seen.update(cmd=cmd, **kw)
        kw["stdout"].write(b"trained\n")
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(subprocess, "run", fake_run)
    run = se.Run(se.BY_NAME["grpo"], 1)
    cfg = tmp_path / "configs" / "grpo-s1.toml"
    rc = se.execute_child(run, cfg, tmp_path / "runs" / "grpo-s1", threads=1)
    assert rc == 0
    assert seen["cmd"][1:] == ["-m", "lopd_train.cli", "--config", str(cfg), "--resume"]
    assert seen["env"]["OMP_NUM_THREADS"] == "1" and seen["cwd"] == se.ROOT
    assert (tmp_path / "runs" / "grpo-s1" / "study.log").read_text() == "trained\n"


@pytest.mark.parametrize("codes, retries, calls, rc", [
    ([-9, 0], 2, 2, 0),        # killed once (out of memory), resumed, finished
    ([-9, -9, -9], 2, 3, -9),  # killed every time: given up after the retries, reported
    ([-9], 0, 1, -9),          # --retries 0: never restarted
    ([1], 2, 1, 1),            # an error is not retried
    ([-15], 2, 1, -15),        # SIGTERM is somebody stopping the study: not retried
])
def test_a_child_killed_by_sigkill_is_resumed_a_bounded_number_of_times(tmp_path, monkeypatch, capsys, codes,
                                                                       retries, calls, rc):
    import subprocess

    seen = []

    def fake_run(cmd, **kw):
        seen.append(cmd)
        return subprocess.CompletedProcess(cmd, codes[len(seen) - 1])

    monkeypatch.setattr(subprocess, "run", fake_run)
    run = se.Run(se.BY_NAME["grpo"], 1)
    got = se.execute_child(run, tmp_path / "c.toml", tmp_path / "runs" / "grpo-s1", threads=1, retries=retries)
    assert got == rc and len(seen) == calls
    assert all(c[-1] == "--resume" for c in seen)  # each restart resumes from the run's last checkpoint
    assert capsys.readouterr().out.count("resuming it") == calls - 1


def test_a_failing_child_run_is_reported_not_hidden(tmp_path):
    run = se.Run(se.BY_NAME["grpo"], 0)
    rc = se.execute_child(run, tmp_path / "missing.toml", tmp_path / "runs" / "grpo-s0", threads=1)
    assert rc != 0
    assert "missing.toml" in (tmp_path / "runs" / "grpo-s0" / "study.log").read_text()


@pytest.mark.parametrize("algos,budget,every,jobs", [
    pytest.param(["grpo"], 8, 4, 1, id="grpo"),
    pytest.param(["lopd", "grpo"], 8, 4, 1, id="lopd+grpo"),
    pytest.param(["grpo"], 8, 4, 2, id="grpo-jobs2"),
    pytest.param(["lopd", "lopd-m0.1"], 8, 4, 2, id="lopd+fork-jobs2"),  # the fork waits for LOPD's cold start
])
def test_tiny_study_end_to_end(tmp_path, capsys, algos, budget, every, jobs):
    """The whole study on a tiny model: runs, held-out points at each milestone, the table's cells as the
    means of their runs, the PNG, the commands, and a second call that skips every finished run; with
    ``--jobs 2`` the two seeds run side by side as ``lopd-train`` children. Each case takes 6-9 s on 2 cores
    (measured with both cores busy elsewhere), so all three stay in the default run."""
    out = tmp_path / "se"
    args = ["--tiny", "--out", str(out), "--algos", ",".join(algos), "--seeds", "0,1", "--budget", str(budget),
            "--eval-every", str(every), "--jobs", str(jobs)]
    milestones = list(range(0, budget + 1, every))
    assert se.main(args) == 0
    runs = sorted(p.name for p in (out / "runs").iterdir())
    assert runs == sorted(f"{a}-s{s}" for a in algos for s in (0, 1))
    curves = {}
    for name in runs:
        pts = [json.loads(line) for line in (out / "runs" / name / "heldout.jsonl").read_text().splitlines()]
        assert [p["milestone"] for p in pts] == milestones
        curves[name] = {p["milestone"]: p["mean_reward"] for p in pts}
        cfg = json.loads((out / "runs" / name / "config.json").read_text())
        assert cfg["rollout_budget"] == budget and cfg["eval_tasks"] == ["heads_3", "tails_3"]
    rows = read_csv(out / "results.csv")
    assert len(rows) == len(algos) * len(milestones)
    for r in rows:  # each CSV cell is the mean of its runs' held-out points
        vals = [curves[f"{r['variant']}-s{s}"][int(r["rollouts"])] for s in (0, 1)]
        assert float(r["mean_reward"]) == pytest.approx(sum(vals) / 2, abs=1e-4)
        assert json.loads(r["per_seed"]) == {"0": vals[0], "1": vals[1]}
    md = (out / "results.md").read_text()
    assert all(f"| {a} | 0,1 |" in md for a in algos) and ("n/a" not in md or "grpo" not in algos)
    assert all(f"| {n} | done |" in md for n in runs)  # the training table names every run
    from lopd_train import software  # and the software section the one stack they all ran on

    stack = ", ".join(f"{n} {v}" for n, v in software.numeric_versions(software.snapshot()).items())
    assert f"- {stack}: " in md and all(n in md.split(f"- {stack}: ")[1].splitlines()[0] for n in runs)
    assert (out / "sample_efficiency.png").stat().st_size > 1000
    assert "lopd-train --config" in (out / "commands.md").read_text()
    # a second invocation skips every finished run and rewrites the same table
    before = {n: (out / "runs" / n / "heldout.jsonl").read_text() for n in runs}
    capsys.readouterr()
    assert se.main([*args, "--resume"]) == 0
    assert capsys.readouterr().out.count("] done:") == len(runs)
    assert {n: (out / "runs" / n / "heldout.jsonl").read_text() for n in runs} == before
    assert read_csv(out / "results.csv") == rows


@pytest.mark.parametrize("argv, says", [
    (["--seeds", "0,one"], "--seeds"), (["--algos", ","], "no variants chosen"), (["--algos", "lopd,ppo"], "unknown"),
    (["--budget", "0"], "must be positive"), (["--jobs", "-1"], "must be positive"),
])
def test_bad_study_arguments_stop_with_a_message(tmp_path, argv, says):
    with pytest.raises(SystemExit) as exit_:
        se.main(["--tiny", "--dry-run", "--out", str(tmp_path), *argv])
    assert says in str(exit_.value)


def test_the_report_names_each_software_stack_and_the_runs_that_recorded_none(tmp_path):
    """A run resumed on another machine with another transformers shows the step where its stack changed; a
    committed run of an older lopd (no software.jsonl) is named as not recorded."""
    from lopd_train import software

    now = software.snapshot()
    moved = dict(now, packages=dict(now["packages"], transformers="9.9.9"))
    runs = [se.Run(se.BY_NAME["lopd"], 0), se.Run(se.BY_NAME["grpo"], 0), se.Run(se.BY_NAME["opsd"], 0)]
    for run, rows in zip(runs, ([(0, now), (12, now), (20, moved)], [(0, now)], None)):
        folder = tmp_path / "runs" / run.name
        folder.mkdir(parents=True)
        for step, snap in rows or []:
            software.record(folder, step, step * 8, now=snap)
    md = "\n".join(se.software_lines(tmp_path, runs))
    assert "lopd-s0 (from step 0 to step 20)" in md and "lopd-s0 (from step 20)" in md
    assert "transformers 9.9.9" in md and "grpo-s0" in md.split("transformers 9.9.9")[0]
    assert "not recorded (started before runs recorded it): opsd-s0" in md
