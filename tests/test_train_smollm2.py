"""The default small model for real (slow: fetches/converts SmolLM2-135M-Instruct once, then trains)."""

from __future__ import annotations

import json
import math

import pytest

pytestmark = pytest.mark.slow


def test_smollm2_alias_is_a_plain_transformers_checkpoint():
    from lopd_train import models

    path = models.ensure_smollm2()
    assert (path / "config.json").exists()
    model, tok = models.load_backbone(models.DEFAULT_MODEL)
    assert model.config.hidden_size == 576 and tok.eos_token == "<|im_end|>"
    assert not models.template_supports_tools(tok)  # SmolLM2's template ignores tools=


def test_one_lopd_step_on_bfcl_with_smollm2_exports_a_loadable_student(tmp_path):
    from transformers import AutoModelForCausalLM

    from lopd_train.config import TrainConfig
    from lopd_train.training.trainer import train

    out = tmp_path / "run"
    cfg = TrainConfig(env="lopd/BFCLv3-v0", category="simple", model="smollm2-135m-instruct", steps=1,
                      tasks_per_step=1, group_size=2, max_new_tokens=32, cold_start_steps=0, output_dir=str(out),
                      progress=False)
    result = train(cfg)
    assert result["step"] == 1 and result["rollouts"] == 2
    row = json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])
    assert row["phase"] == "train" and math.isfinite(row["grad_norm"]) and "skipped_no_context" in row
    if row["context_fraction"] > 0:  # some rollout retrieved an experience: the student was distilled
        assert row["grad_norm"] > 0
    student = AutoModelForCausalLM.from_pretrained(out / "student")
    assert student.config.hidden_size == 576
