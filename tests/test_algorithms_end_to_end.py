"""Every ``--algo`` through the one training loop, end to end, on a tiny random model and the coin-flip env:
rollouts, update, metrics, checkpoint and resume; ``lopd-train --help`` lists each with what its teacher
sees."""

from __future__ import annotations

import json
import math

import pytest

from lopd_train import statefile
from lopd_train.algorithms import ALGORITHMS
from lopd_train.training.trainer import train
from tests.test_train_trainer import rows, tiny_cfg

COIN = dict(env="lopd-test/Coin-v0", category="all", export=False, tensorboard=False, skill_tokens=6,
            max_new_tokens=8)
#: resumed half-way where the algorithm keeps state of its own (the EMA adapter, the skill bank)
RESUMED = ("sdpo", "skill_sd")
FLAGS = {"grpo": dict(grpo_kl_coef=0.1), "sdpo": dict(teacher="ema", distill_loss="sampled")}
#: LOPD's own end-to-end runs (cold start, resume, kill -9) are in tests/test_train_trainer.py
BASELINES = sorted(set(ALGORITHMS) - {"lopd"})


@pytest.mark.parametrize("algo", BASELINES)
def test_every_baseline_trains_through_the_same_loop_and_resumes(tmp_path, algo):
    """Two steps (one, then a resumed second for :data:`RESUMED`): rollouts, update, metrics, checkpoints."""
    import torch

    import tests.coin_env  # noqa: F401
    from lopd_train.experience.bank import ExperienceBank

    cfg = {**COIN, **FLAGS.get(algo, {})}
    if algo in RESUMED:
        train(tiny_cfg(tmp_path, algo=algo, steps=1, **cfg))
    result = train(tiny_cfg(tmp_path, algo=algo, steps=2, **cfg), resume=algo in RESUMED)
    assert result["step"] == 2 and result["rollouts"] == 8
    train_rows = [x for x in rows(tmp_path) if x["phase"] == "train"]
    assert [x["step"] for x in train_rows] == [1, 2]
    assert all(math.isfinite(x["grad_norm"]) for x in train_rows)
    state = json.loads((tmp_path / "checkpoints" / "step-000002" / "state.json").read_text())
    assert state["algo"] == algo and state["rollouts"] == 8
    blob = statefile.load(tmp_path / "checkpoints" / "step-000002" / "trainer")
    lora_b = [v for k, v in blob["lora"].items() if "lora_B" in k and ".student." in k]
    if algo == "vanilla":  # never updated: LoRA B still at its zero init
        assert lora_b and all(torch.count_nonzero(v) == 0 for v in lora_b)
        assert all(x["grad_norm"] == 0.0 for x in train_rows)
    if algo in ("opsd", "sdpo", "sdft", "skill_sd"):  # supervised exactly when some rollout had a context
        assert all((x["grad_norm"] > 0) == (x["context_fraction"] > 0) for x in train_rows)
    if algo == "sdpo":  # the EMA teacher's deltas (the EMA of s*BA per layer) are checkpointed with the algorithm
        assert blob["algo"]["ema_deltas"] and not any(".ema." in k for k in blob["lora"])
    if algo == "skill_sd":  # the skill bank lives in the run folder and in the checkpoint
        assert len(ExperienceBank(tmp_path / "skills.sqlite")) == len(blob["algo"]["skills"])
        assert train_rows[1]["skill_bank_size"] >= train_rows[0]["skill_bank_size"]


def test_help_lists_every_algorithm_with_what_its_teacher_sees():
    from lopd_train.cli import train_parser

    text = train_parser().format_help()
    for name, cls in ALGORITHMS.items():
        assert cls.teacher_sees, name
        assert f"  {name}" in text and cls.teacher_sees[:40] in " ".join(text.split())
