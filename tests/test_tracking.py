"""Tracking (``lopd_train.tracking``): metric rows and rollout tables written for real by TensorBoard and
trackio (its local database) and read back, wandb in offline mode; ``report_to`` parsed and checked."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from lopd_train.tracking import ROLLOUT_COLUMNS, RolloutRow, Tracker, parse_report_to, scalars

ROWS = [{"phase": "cold_start", "step": 0, "cold_start_step": 1, "nll": 2.5},
        {"phase": "train", "step": 1, "rollouts": 8, "reward_mean": 0.25, "beta": 0.0, "note": "text"},
        {"phase": "train", "step": 2, "rollouts": 16, "reward_mean": 0.5, "beta": 0.1}]
TABLE = [RolloutRow("simple_3", "...the area of a triangle", "[area(b=10, h=5)]", 1.0, ["7", "12"], 0.31, 0.042),
         RolloutRow("simple_9", "...a factorial", "I don't know | sorry\nbye", 0.0)]


def test_report_to_is_a_checked_list():
    assert parse_report_to("tensorboard, wandb") == ["tensorboard", "wandb"]
    assert parse_report_to(["trackio", "trackio"]) == ["trackio"] and parse_report_to("none") == []
    with pytest.raises(ValueError, match=r"report_to must be one of .*; got 'wanb' \(did you mean 'wandb'\?\)"):
        parse_report_to("tensorboard,wanb")
    with pytest.raises(ValueError, match="'none' cannot be combined"):
        parse_report_to(["none", "wandb"])


def test_scalars_name_metrics_as_the_runs_tensorboard_did():
    assert scalars(ROWS[0]) == ({"cold_start/nll": 2.5}, 1)
    assert scalars(ROWS[1]) == ({"train/rollouts": 8.0, "train/reward_mean": 0.25, "train/beta": 0.0}, 1)


def test_tensorboard_scalars_and_rollout_table_read_back(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tracker = Tracker(["tensorboard"], tmp_path)
    for row in ROWS:
        tracker.log(row)
    tracker.log_rollouts(TABLE, step=2)
    tracker.close()
    acc = EventAccumulator(str(tmp_path / "tb"), size_guidance={"tensors": 0, "scalars": 0})
    acc.Reload()
    assert [(e.step, e.value) for e in acc.Scalars("train/reward_mean")] == [(1, 0.25), (2, 0.5)]
    assert [(e.step, e.value) for e in acc.Scalars("cold_start/nll")] == [(1, 2.5)]
    [text] = acc.Tensors("rollouts/text_summary")
    table = text.tensor_proto.string_val[0].decode()
    assert "| simple_3 | ...the area of a triangle | [area(b=10, h=5)] | 1.0 | 7, 12 | 0.31 | 0.042 |" in table
    assert "I don't know \\| sorry<br>bye" in table  # pipes and newlines cannot break the table


_TRACKIO_CHILD = textwrap.dedent("""
    import json, sys
    from lopd_train.tracking import RolloutRow, Tracker
    rows, table = json.loads(sys.argv[1]), [RolloutRow(**r) for r in json.loads(sys.argv[2])]
    tracker = Tracker(["trackio"], sys.argv[3], project="lopd-test", run_name="run-1", config={"algo": "lopd"})
    for row in rows:
        tracker.log(row)
    tracker.log_rollouts(table, step=2)
    tracker.close()
    from trackio import SQLiteStorage
    print(json.dumps(SQLiteStorage.get_logs("lopd-test", "run-1")))
""")


def test_trackio_writes_locally_and_the_values_read_back(tmp_path):
    env = {**os.environ, "TRACKIO_DIR": str(tmp_path / "trackio"), "HF_HUB_OFFLINE": "1"}
    table = [{k: getattr(r, k) for k in ("task_id", "prompt_tail", "completion", "reward", "experience_ids",
                                         "delta", "teacher_student_kl")} for r in TABLE]
    proc = subprocess.run([sys.executable, "-c", _TRACKIO_CHILD, json.dumps(ROWS), json.dumps(table),
                           str(tmp_path / "run")], capture_output=True, text=True, timeout=300, env=env,
                          cwd=Path(__file__).resolve().parents[1])
    assert proc.returncode == 0, proc.stderr[-3000:]
    logs = json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("[")))
    rewards = [(entry["step"], entry["train/reward_mean"]) for entry in logs if "train/reward_mean" in entry]
    assert rewards == [(1, 0.25), (2, 0.5)]
    [tables] = [entry["rollouts"] for entry in logs if "rollouts" in entry]
    text = json.dumps(tables)
    assert "simple_3" in text and "[area(b=10, h=5)]" in text and "7, 12" in text
    assert all(column in text for column in ROLLOUT_COLUMNS)


def test_wandb_offline_run_holds_the_metrics_and_the_table(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    tracker = Tracker(["wandb"], tmp_path, project="lopd-test", run_name="run-1", config={"algo": "lopd"})
    for row in ROWS:
        tracker.log(row)
    tracker.log_rollouts(TABLE, step=2)
    tracker.close()
    import wandb

    wandb.teardown()  # the service writes the transaction log out when it stops (at exit in a real run)
    [run_dir] = list((tmp_path / "wandb").glob("offline-run-*"))
    # wandb 0.31 keeps history in its binary transaction log (read by `wandb sync`, no Python reader); the
    # table is a JSON file beside it
    log = next(run_dir.glob("run-*.wandb")).read_bytes()
    assert b"train/reward_mean" in log and b"cold_start/nll" in log
    [table_file] = list((run_dir / "files" / "media" / "table").glob("rollouts_*.table.json"))
    table = json.loads(table_file.read_text())
    assert table["columns"] == list(ROLLOUT_COLUMNS) and table["data"][0][1] == "simple_3"
    assert table["data"][0][5] == "7, 12" and table["data"][1][6] is None


def test_a_training_run_reports_its_metrics_rollout_tables_and_data_provenance(tmp_path, bfcl_data):
    """``lopd-train --report-to tensorboard --rollout-table-every 1``, for real on a tiny model and BFCL-v3: the
    step metrics and one rollout table per step read back from TensorBoard, and provenance.json in the run."""
    import re

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from lopd_train.config import TrainConfig
    from lopd_train.training.trainer import train

    out = tmp_path / "run"
    cfg = TrainConfig(model="tiny-random", env="lopd/BFCLv3-v0", category="simple", tasks=["simple_0", "simple_1"],
                      algo="grpo", steps=2, tasks_per_step=2, group_size=1, max_new_tokens=8, lora_r=4,
                      lora_alpha=8, progress=False, output_dir=str(out), export=False, cold_start_steps=0,
                      bank_mode="dynamic", report_to=["tensorboard"], rollout_table_every=1)
    train(cfg)
    acc = EventAccumulator(str(out / "tb"), size_guidance={"tensors": 0, "scalars": 0})
    acc.Reload()
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    train_rows = [r for r in metrics if r.get("phase") == "train"]
    assert [(e.step, e.value) for e in acc.Scalars("train/reward_mean")] == \
        [(r["step"], pytest.approx(r["reward_mean"])) for r in train_rows]
    tables = [t.tensor_proto.string_val[0].decode() for t in acc.Tensors("rollouts/text_summary")]
    assert len(tables) == 2 and all(len(re.findall(r"\n\| \d \| simple_[01] \|", t)) == 2 for t in tables)
    record = json.loads((out / "provenance.json").read_text())
    assert record["source"] == "official" and record["version"] == "bfcl-eval==2025.8.6.2"
    assert [f["path"].rsplit("/", 1)[-1] for f in record["files"]] == ["BFCL_v3_simple.json"] * 2
