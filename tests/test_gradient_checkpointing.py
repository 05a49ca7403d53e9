"""Gradient checkpointing changes memory, never the update (``models.enable_gradient_checkpointing``).

LOPD's composer encodes with the composer adapter and its teacher scores with no adapter, but their backward
runs later with the student adapter active: a plain recomputation rebuilds those activations with the wrong
LoRA (an error when the ranks differ, silently wrong gradients when they match). The same LOPD run with and
without checkpointing must log the same cold-start NLL curve and the same gradient norms."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import tests.coin_env  # noqa: F401  (registers lopd-test/Coin-v0)
from lopd_train.config import TrainConfig
from lopd_train.training.trainer import train


def run(out: Path, checkpointing: bool, composer_r: int) -> list[dict]:
    train(TrainConfig(model="tiny-random", env="lopd-test/Coin-v0", category="all", algo="lopd", steps=2,
                      tasks_per_step=2, group_size=2, max_new_tokens=8, num_latents=4, qformer_dim=32,
                      qformer_layers=1, experience_tokens=64, lora_r=4, lora_alpha=8, composer_lora_r=composer_r,
                      composer_lora_alpha=2 * composer_r, cold_start_steps=4, cold_start_batch_size=2,
                      cold_start_min_successes=1, bank_samples=3, tasks="heads_0,heads_1,tails_0,tails_1",
                      gradient_checkpointing=checkpointing, progress=False, export=False, tensorboard=False,
                      output_dir=str(out)))
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("composer_r", [4, 8], ids=["same-rank", "other-rank"])
def test_lopd_logs_the_same_curve_and_gradients_with_and_without_checkpointing(tmp_path, composer_r):
    plain = run(tmp_path / "plain", False, composer_r)
    ckpt = run(tmp_path / "ckpt", True, composer_r)
    curve = [[r["cold_start_nll"] for r in rows if "cold_start_nll" in r] for rows in (plain, ckpt)]
    assert len(curve[0]) == 4 and curve[0] == pytest.approx(curve[1], rel=1e-4)
    steps = [[r for r in rows if r["phase"] == "train"] for rows in (plain, ckpt)]
    assert len(steps[0]) == len(steps[1]) == 2
    for a, b in zip(*steps):
        for key in ("grad_norm", "composer_grad_norm", "student_kl", "probe_teacher_nll"):
            if key in a or key in b:  # the probe: every --probe-every steps and at the last
                assert a[key] == pytest.approx(b[key], rel=1e-3, abs=1e-7), key  # rounding: no shared prefix with checkpointing
    assert "probe_teacher_nll" in steps[0][-1] and "probe_teacher_nll" not in steps[0][0]
    assert steps[0][-1]["composer_grad_norm"] > 0
