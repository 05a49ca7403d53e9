"""``benchmarks/privileged_gain.py`` end to end on the toy env with a tiny random model: the text pilot and the
latent PIG at each cold-start budget are written, and a run killed part-way resumes from its saved state (same
bank, same held-back successes, the composer where it stopped) to the same numbers as a run never killed."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch

import lopd_train.testing  # noqa: F401  (registers lopd-test/Coin-v0)

ROOT = Path(__file__).resolve().parents[1]

CONFIG = """env = "lopd-test/Coin-v0"
category = "all"
model = "tiny-random"
tasks = "heads_0,heads_1,tails_0,tails_1"
max_new_tokens = 8
num_latents = 4
qformer_dim = 32
qformer_layers = 1
experience_tokens = 64
lora_r = 4
lora_alpha = 8
composer_lora_r = 4
composer_lora_alpha = 8
cold_start_batch_size = 2
cold_start_min_successes = 1
top_j = 1
progress = false
"""


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("privileged_gain", ROOT / "benchmarks" / "privileged_gain.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run(script, cfg: Path, out: Path, cold_start: str, *extra: str) -> dict:
    assert script.main(["--config", str(cfg), "--out", str(out), "--pool", "4", "--samples", "6", "--hold-back",
                        "2", "--formats", "chat", "--top-j", "1", "--cold-start", cold_start, "--save-every", "2",
                        "--threads", "1", *extra]) == 0
    return json.loads((out / "results.json").read_text())


def latent(report: dict) -> list[tuple[int, float, float]]:
    return [(r["cold_start_steps"], round(r["latent"]["pig"], 6), round(r["zero"]["pig"], 6))
            for r in report["cold_start"]]


def test_a_killed_pig_run_resumes_to_the_numbers_of_an_unbroken_one(script, tmp_path):
    cfg = tmp_path / "toy.toml"
    cfg.write_text(CONFIG)
    whole = run(script, cfg, tmp_path / "whole", "0,2,4")
    assert [r["cold_start_steps"] for r in whole["cold_start"]] == [0, 2, 4]
    assert len(whole["text_pilot"]) == 1 and whole["held_back"]
    assert (tmp_path / "whole" / "results.md").read_text().count("\n| ") >= 4

    part = tmp_path / "part"
    first = run(script, cfg, part, "0,2")  # "killed" after 2 steps: its state holds the composer there
    assert [r["cold_start_steps"] for r in first["cold_start"]] == [0, 2]
    resumed = run(script, cfg, part, "0,2,4", "--resume")
    def bank(report):  # the same seed builds the same bank; only its build time differs
        return {k: v for k, v in report["bank"].items() if k != "time"}
    assert resumed["held_back"] == whole["held_back"] and bank(resumed) == bank(whole)
    assert resumed["text_pilot"] == whole["text_pilot"]  # measured once, kept
    # the composer where an unbroken run has it: encoder LoRA, Q-Former, optimiser moments. A tensor left out
    # of the state is off by ~lr = 1e-4 per Adam step (each first step moves every weight by lr); float rounding
    # (the teacher's cached prefixes have another history after a restart) was measured at <= 1.6e-6; the exact round trip is the next test's
    a, b = (torch.load(d / "state" / "state.pt", weights_only=False) for d in (tmp_path / "whole", part))
    assert a["done"] == b["done"] == 4
    assert a["lora"].keys() == b["lora"].keys() and a["algo"]["qformer"].keys() == b["algo"]["qformer"].keys()
    for name in a["lora"]:
        torch.testing.assert_close(b["lora"][name], a["lora"][name], atol=1e-5, rtol=0)
    for name in a["algo"]["qformer"]:
        torch.testing.assert_close(b["algo"]["qformer"][name], a["algo"]["qformer"][name], atol=1e-5, rtol=0)
    moments = [(x["exp_avg"], y["exp_avg"]) for x, y in zip(a["algo"]["composer_opt"]["state"].values(),
                                                             b["algo"]["composer_opt"]["state"].values())]
    assert moments and all(torch.allclose(x, y, atol=1e-5, rtol=0) for x, y in moments)
    assert [r[0] for r in latent(resumed)] == [0, 2, 4]
    assert [x for r in latent(resumed) for x in r[1:]] == pytest.approx([x for r in latent(whole) for x in r[1:]],
                                                                        rel=1e-3)


def test_the_saved_state_restores_the_composer_exactly(script, tmp_path):
    """save_state then restore into a composer moved elsewhere: every LoRA weight, the Q-Former and the
    optimiser's moments come back bit for bit."""
    import argparse

    from lopd_train.cli import load_config_file
    from lopd_train.config import TrainConfig
    from lopd_train.training.trainer import Trainer

    cfg = tmp_path / "toy.toml"
    cfg.write_text(CONFIG)
    values = {**load_config_file(str(cfg)), "algo": "lopd", "output_dir": str(tmp_path / "run"), "export": False,
              "tensorboard": False, "eval_every_rollouts": 0}
    trainer = Trainer(TrainConfig(**values))
    algo = trainer.algo
    args = argparse.Namespace(config=str(cfg), pool=4, samples=6, hold_back=2, set=[])
    trainer.build_bank()
    algo.cold_start(trainer.cold_start_data())
    (tmp_path / "state").mkdir()
    script.save_state(tmp_path / "state", args, algo, {"cold_start": []}, 2)
    before = {n: p.detach().clone() for n, p in algo.policy.named_parameters() if "lora_" in n}
    before_q = {n: p.detach().clone() for n, p in algo.composer.qformer.state_dict().items()}
    with torch.no_grad():
        for n, p in algo.policy.named_parameters():
            if "lora_" in n:
                p.add_(1.0)
        for p in algo.composer.qformer.parameters():
            p.add_(1.0)
    script.restore(algo, script.load_state(tmp_path / "state", args))
    after = {n: p for n, p in algo.policy.named_parameters() if "lora_" in n}
    assert before and all(torch.equal(before[n], after[n]) for n in before)
    assert all(torch.equal(before_q[n], p) for n, p in algo.composer.qformer.state_dict().items())
    trainer.close()


def test_resume_refuses_a_state_of_other_arguments(script, tmp_path):
    cfg = tmp_path / "toy.toml"
    cfg.write_text(CONFIG)
    run(script, cfg, tmp_path / "out", "0")
    with pytest.raises(SystemExit, match="other arguments"):
        script.main(["--config", str(cfg), "--out", str(tmp_path / "out"), "--pool", "3", "--samples", "6",
                     "--hold-back", "2", "--cold-start", "0,2", "--resume"])
