"""Tracking (``lopd_train.tracking``, accelerate's trackers): metric rows and rollout tables written for real by
TensorBoard (a resume purging the later steps) and trackio (its local database) and read back, wandb in offline
mode; ``report_to`` parsed and checked against accelerate's names and the installed packages, in one line."""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from lopd_train import tracking
from lopd_train.tracking import ROLLOUT_COLUMNS, RolloutRow, Tracker, parse_report_to, scalars

ROWS = [{"phase": "cold_start", "step": 0, "cold_start_step": 1, "nll": 2.5},
        {"phase": "train", "step": 1, "rollouts": 8, "reward_mean": 0.25, "beta": 0.0, "note": "text"},
        {"phase": "train", "step": 2, "rollouts": 16, "reward_mean": 0.5, "beta": 0.1}]
TABLE = [RolloutRow("simple_3", "...the area of a triangle", "[area(b=10, h=5)]", 1.0, ["7", "12"], 0.31, 0.042),
         RolloutRow("simple_9", "...a factorial", "I don't know | sorry\nbye", 0.0)]


def test_report_to_is_a_checked_list():
    assert parse_report_to("tensorboard, wandb") == ["tensorboard", "wandb"]
    assert parse_report_to(["trackio", "trackio"]) == ["trackio"] and parse_report_to("none") == []
    assert parse_report_to("all") == ["all"] and parse_report_to(None) == []
    with pytest.raises(ValueError, match=r"report_to must be one of .*; got 'wanb' \(did you mean 'wandb'\?\)"):
        parse_report_to("tensorboard,wanb")
    with pytest.raises(ValueError, match="'none' cannot be combined"):
        parse_report_to(["none", "wandb"])


def test_the_names_are_accelerates():
    """What ``--report-to`` takes is what accelerate takes: its trackers, ``all``, and ``none``."""
    from accelerate.tracking import LOGGER_TYPE_TO_CLASS
    from accelerate.utils import LoggerType

    assert set(tracking.TRACKERS) == set(LOGGER_TYPE_TO_CLASS)
    assert set(tracking.REPORT_TO) == set(LoggerType.list()) | {"none"}


def test_an_unknown_tracker_is_one_line_naming_accelerates_trackers():
    from accelerate.tracking import LOGGER_TYPE_TO_CLASS

    from lopd_train import cli

    with pytest.raises(ValueError) as err:
        parse_report_to("tensorboard,neptune")
    message = str(err.value)
    assert "\n" not in message and message.startswith("report_to must be one of 'none', 'all', ")
    assert all(repr(name) in message for name in LOGGER_TYPE_TO_CLASS) and message.endswith("got 'neptune'")
    with pytest.raises(SystemExit) as exc:  # the command prints it and exits 2, before anything loads
        cli.config_from_args(["--report-to", "neptune"])
    assert exc.value.code == 2 and "report_to must be one of 'none', 'all', 'aim', " in str(exc.value)


def test_a_tracker_not_installed_is_one_line_with_its_install(monkeypatch):
    from accelerate import tracking as accelerate_tracking

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    with pytest.raises(ValueError) as err:
        parse_report_to("tensorboard,wandb")
    assert str(err.value) == ("report_to: 'wandb' needs the wandb package, which is not installed: "
                              'pip install "lopd[tracking]"')
    monkeypatch.undo()
    available = {t.value for t in accelerate_tracking.get_available_trackers()}
    for name in set(tracking.TRACKERS) - available:  # the ones really missing here (mlflow, aim...)
        with pytest.raises(ValueError, match=rf"^report_to: '{name}' needs the .* package, which is not installed: "
                                             rf"pip install \S+$"):
            parse_report_to(name)
    # where accelerate's own check disagrees (a package importable without its metadata): the same kind of line
    monkeypatch.setattr(accelerate_tracking, "_available_trackers", [])
    with pytest.raises(ValueError, match=r"^report_to: accelerate finds no installed package for \['tensorboard'\]"):
        Tracker(["tensorboard"], "unused")


def test_scalars_name_metrics_as_the_runs_tensorboard_did():
    assert scalars(ROWS[0]) == ({"cold_start/nll": 2.5}, 1)
    assert scalars(ROWS[1]) == ({"train/rollouts": 8.0, "train/reward_mean": 0.25, "train/beta": 0.0}, 1)


def test_tensorboard_scalars_and_rollout_table_read_back(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tracker = Tracker(["tensorboard"], tmp_path, config={"algo": "lopd", "tasks": ["simple_3"]})
    for row in ROWS:
        tracker.log(row)
    tracker.log_rollouts(TABLE, step=2)
    tracker.close()
    acc = EventAccumulator(str(tmp_path / "tb"), size_guidance={"tensors": 0, "scalars": 0})  # the run's tb/
    acc.Reload()
    assert [(e.step, e.value) for e in acc.Scalars("train/reward_mean")] == [(1, 0.25), (2, 0.5)]
    assert [(e.step, e.value) for e in acc.Scalars("cold_start/nll")] == [(1, 2.5)]
    assert sorted(acc.Tags()["scalars"]) == ["cold_start/nll", "train/beta", "train/reward_mean", "train/rollouts"]
    assert "algo: lopd" in next((tmp_path / "tb").glob("*/hparams.yml")).read_text()  # accelerate's hparams
    [text] = acc.Tensors("rollouts/text_summary")
    table = text.tensor_proto.string_val[0].decode()
    assert "| simple_3 | ...the area of a triangle | [area(b=10, h=5)] | 1.0 | 7, 12 | 0.31 | 0.042 |" in table
    assert "I don't know \\| sorry<br>bye" in table  # pipes and newlines cannot break the table


def test_a_resumed_run_purges_the_steps_after_its_checkpoint(tmp_path):
    """The trainer resumes from step 2 with ``purge_step=3``: TensorBoard drops what the first run logged at 3
    and 4, so the curve holds the resumed run's values there, once each."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    first = Tracker(["tensorboard"], tmp_path)
    for step in (1, 2, 3, 4):
        first.log({"phase": "train", "step": step, "reward_mean": step / 10})
    first.close()
    resumed = Tracker(["tensorboard"], tmp_path, resume=True, purge_step=3)
    for step in (3, 4, 5):
        resumed.log({"phase": "train", "step": step, "reward_mean": 1 + step / 10})
    resumed.close()
    acc = EventAccumulator(str(tmp_path / "tb"), size_guidance={"scalars": 0})
    acc.Reload()
    assert [(e.step, round(e.value, 3)) for e in acc.Scalars("train/reward_mean")] == \
        [(1, 0.1), (2, 0.2), (3, 1.3), (4, 1.4), (5, 1.5)]


def test_all_is_every_tracker_accelerate_finds_installed(tmp_path, monkeypatch):
    from accelerate import tracking as accelerate_tracking
    from accelerate.utils import LoggerType

    monkeypatch.setattr(accelerate_tracking, "_available_trackers", [LoggerType.TENSORBOARD])
    tracker = Tracker(["all"], tmp_path)
    tracker.log(ROWS[1])
    tracker.close()
    assert tracker.names == ["tensorboard"] and list((tmp_path / "tb").glob("events.out.tfevents.*"))


def test_no_tensorboard_leaves_it_out_of_all_too(tmp_path, monkeypatch):
    """``--no-tensorboard`` with ``--report-to all``: ``all`` is expanded first, then TensorBoard left out."""
    from accelerate import tracking as accelerate_tracking
    from accelerate.utils import LoggerType

    monkeypatch.setattr(accelerate_tracking, "_available_trackers", [LoggerType.TENSORBOARD])
    tracker = Tracker(["all"], tmp_path, exclude=("tensorboard",))
    tracker.log(ROWS[1])
    tracker.close()
    assert tracker.names == [] and not (tmp_path / "tb").exists()


def test_a_tracker_without_tables_gets_the_scalars_and_one_warning(tmp_path, caplog):
    class NoTables:  # as accelerate's dvclive, mlflow, aim, comet_ml and swanlab trackers: log, no log_table
        name = "dvclive"

        def __init__(self):
            self.logged = []

        def log(self, values, step=None):
            self.logged.append((values, step))

    tracker = Tracker([], tmp_path)
    tracker.trackers.append(NoTables())
    with caplog.at_level(logging.WARNING, logger="lopd_train.tracking"):
        tracker.log(ROWS[1])
        tracker.log_rollouts(TABLE, step=1)
        tracker.log_rollouts(TABLE, step=2)
    assert tracker.trackers[0].logged == [({"train/rollouts": 8.0, "train/reward_mean": 0.25, "train/beta": 0.0}, 1)]
    assert [r.getMessage() for r in caplog.records] == \
        ["report_to: accelerate's dvclive tracker takes no tables; the rollout tables are not sent to it"]


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
    print(json.dumps(SQLiteStorage.get_run_config("lopd-test", "run-1")))
    print(json.dumps(SQLiteStorage.get_logs("lopd-test", "run-1")))
""")


def test_trackio_writes_locally_and_the_values_read_back(tmp_path):
    if importlib.util.find_spec("trackio") is None:
        pytest.skip("trackio is not installed (pip install \"lopd[tracking]\")")
    env = {**os.environ, "TRACKIO_DIR": str(tmp_path / "trackio"), "HF_HUB_OFFLINE": "1"}
    table = [{k: getattr(r, k) for k in ("task_id", "prompt_tail", "completion", "reward", "experience_ids",
                                         "delta", "teacher_student_kl")} for r in TABLE]
    proc = subprocess.run([sys.executable, "-c", _TRACKIO_CHILD, json.dumps(ROWS), json.dumps(table),
                           str(tmp_path / "run")], capture_output=True, text=True, timeout=300, env=env,
                          cwd=Path(__file__).resolve().parents[1])
    assert proc.returncode == 0, proc.stderr[-3000:]
    logs = json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("[")))
    config = json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("{")))
    assert config["algo"] == "lopd" and "allow_val_change" not in config
    rewards = [(entry["step"], entry["train/reward_mean"]) for entry in logs if "train/reward_mean" in entry]
    assert rewards == [(1, 0.25), (2, 0.5)]
    [tables] = [entry["rollouts"] for entry in logs if "rollouts" in entry]
    text = json.dumps(tables)
    assert "simple_3" in text and "[area(b=10, h=5)]" in text and "7, 12" in text
    assert all(column in text for column in ROLLOUT_COLUMNS)


def test_wandb_offline_run_holds_the_metrics_and_the_table(tmp_path, monkeypatch):
    if importlib.util.find_spec("wandb") is None:
        pytest.skip("wandb is not installed (pip install \"lopd[tracking]\")")
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
    assert b"train/reward_mean" in log and b"cold_start/nll" in log and b"algo" in log  # the config too
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
