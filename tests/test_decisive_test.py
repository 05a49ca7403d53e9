"""``benchmarks/decisive_test.py``: the verdict follows the task-resampled interval of own-minus-other latents,
recomputed from the per-trajectory records (a constructed arm with a channel, one without)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np

from lopd_train.latent.diagnostics import NLLRecord, write_records

ROOT = Path(__file__).resolve().parents[1]


def script():
    spec = importlib.util.spec_from_file_location("decisive_test", ROOT / "benchmarks" / "decisive_test.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def arm(folder: Path, channel: float, seed: int) -> None:
    """12 tasks x 2 trajectories; the own latents beat another task's by ``channel`` nats per token (plus noise)."""
    rng = np.random.default_rng(seed)
    recs = []
    for task in range(12):
        shift = rng.normal(0, 0.05)  # a task's trajectories move together
        for _ in range(2):
            n = 20
            none = 0.5 * n
            nll = {"none": none, "text": none - 2.0, "zero": none + 1.0, "random": none + 1.0,
                   "other": none - 0.1 * n, "latent": none - (0.1 + channel + shift + rng.normal(0, 0.01)) * n}
            recs.append(NLLRecord(f"simple_{task}", n, 4, nll, {k: v / 5 for k, v in nll.items()}))
    (folder / "records").mkdir(parents=True)
    write_records(folder / "records" / "cold_start_200.jsonl", recs)
    (folder / "results.json").write_text(json.dumps({"cold_start": [{"cold_start_steps": 200}],
                                                     "arm": {"composer": "qformer"}}))


def test_the_verdict_follows_the_interval_over_tasks(tmp_path, capsys):
    mod = script()
    arm(tmp_path / "with", 0.3, 0)
    arm(tmp_path / "without", 0.0, 1)
    assert mod.main([str(tmp_path / "without"), "--out", str(tmp_path / "a")]) == 0
    assert "No task-specific latent channel" in capsys.readouterr().out
    assert json.loads((tmp_path / "a" / "results.json").read_text())["verdict"] is False
    assert mod.main([str(tmp_path / "with"), str(tmp_path / "without"), "--out", str(tmp_path / "b")]) == 0
    assert "A task-specific latent channel exists" in capsys.readouterr().out
    report = (tmp_path / "b" / "results.md").read_text()
    assert "with" in report and "without" in report and (tmp_path / "b" / "decisive_test.png").exists()
    rows = json.loads((tmp_path / "b" / "results.json").read_text())["rows"]
    assert rows[0]["own_minus_other"]["pig"] > 0.25 and rows[0]["own_minus_other"]["tasks"] == 12
    assert abs(rows[1]["own_minus_other"]["pig"]) < 0.05
