"""``benchmarks/privileged_gain.py`` end to end on the toy env with a tiny random model: the text pilot and the
latent PIG at each cold-start budget are written, and a run killed part-way resumes from its saved state (same
bank, same held-back successes, the composer where it stopped, restored bit for bit)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch

import tests.coin_env  # noqa: F401  (registers lopd-test/Coin-v0)
from lopd_train import statefile

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


def test_a_killed_pig_run_resumes_where_it_stopped(script, tmp_path):
    """An unbroken run measures at every budget; a run "killed" after 2 steps and resumed keeps what it had
    measured (text pilot, the points at 0 and 2) bit for bit, on the same bank and held-back successes (the
    saved ones, not a rebuilt bank), and adds the point at 4 from the composer it saved. Whether the composer
    comes back exactly is the next test's; two separate processes are not compared number for number (the
    bank's threaded sampling may order its rows differently, and Adam turns the teacher's float rounding into
    steps of up to ~lr)."""
    cfg = tmp_path / "toy.toml"
    cfg.write_text(CONFIG)
    whole = run(script, cfg, tmp_path / "whole", "0,2,4")
    assert [r["cold_start_steps"] for r in whole["cold_start"]] == [0, 2, 4]
    assert len(whole["text_pilot"]) == 1 and whole["held_back"]
    assert (tmp_path / "whole" / "results.md").read_text().count("\n| ") >= 4

    part = tmp_path / "part"
    first = run(script, cfg, part, "0,2")  # "killed" after 2 steps: its state holds the composer there
    assert [r["cold_start_steps"] for r in first["cold_start"]] == [0, 2]
    saved = statefile.load(part / "state" / "state")
    assert saved["done"] == 2
    resumed = run(script, cfg, part, "0,2,4", "--resume")
    assert resumed["bank"] == first["bank"] and resumed["held_back"] == first["held_back"]
    assert resumed["text_pilot"] == first["text_pilot"]  # measured once, kept
    assert resumed["cold_start"][:2] == first["cold_start"]  # the points measured before the kill, as they were
    assert [r["cold_start_steps"] for r in resumed["cold_start"]] == [0, 2, 4]
    # each start's software, with the cold-start steps it started from
    assert [s["cold_start_steps"] for s in resumed["software"]] == [0, 2]
    assert resumed["software"][0]["packages"]["torch"] == torch.__version__
    after = statefile.load(part / "state" / "state")
    assert after["done"] == 4
    moved = max(float((after["lora"][n] - saved["lora"][n]).abs().max()) for n in saved["lora"])
    assert moved > 0  # the two steps after the resume trained the composer it restored


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
    args = argparse.Namespace(config=str(cfg), pool=4, samples=6, hold_back=2, set=[], per_task=1, bank_from=None)
    trainer.build_bank()
    algo.cold_start(trainer.cold_start_data())
    (tmp_path / "state").mkdir()
    script.save_state(tmp_path / "state", args, algo, {"cold_start": []}, 2)
    before = {n: p.detach().clone() for n, p in algo.policy.named_parameters() if "lora_" in n}
    before_q = {n: p.detach().clone() for n, p in algo.composer.compressor.state_dict().items()}
    with torch.no_grad():
        for n, p in algo.policy.named_parameters():
            if "lora_" in n:
                p.add_(1.0)
        for p in algo.composer.compressor.parameters():
            p.add_(1.0)
    script.restore(algo, script.load_state(tmp_path / "state", args))
    after = {n: p for n, p in algo.policy.named_parameters() if "lora_" in n}
    assert before and all(torch.equal(before[n], after[n]) for n in before)
    assert all(torch.equal(before_q[n], p) for n, p in algo.composer.compressor.state_dict().items())
    trainer.close()


def test_resume_refuses_a_state_of_other_arguments(script, tmp_path):
    cfg = tmp_path / "toy.toml"
    cfg.write_text(CONFIG)
    run(script, cfg, tmp_path / "out", "0")
    with pytest.raises(SystemExit, match="other arguments"):
        script.main(["--config", str(cfg), "--out", str(tmp_path / "out"), "--pool", "3", "--samples", "6",
                     "--hold-back", "2", "--cold-start", "0,2", "--resume"])


@pytest.mark.parametrize("flag, value", [
    ("--cold-start", "0,fifty"), ("--cold-start", "-50"), ("--top-j", "0"), ("--top-j", "1,,3"),
    ("--formats", "chat,html"), ("--pool", "0"), ("--samples", "many"), ("--save-every", "0"),
    ("--hold-back", "-1"), ("--success-samples", "-2"),
])
def test_bad_arguments_are_refused_before_any_model_loads(script, capsys, flag, value):
    with pytest.raises(SystemExit) as exit_:
        script.parse(["--config", "c.toml", "--out", "o", flag, value])
    assert exit_.value.code == 2 and flag in capsys.readouterr().err


def test_list_arguments_parse_to_lists(script):
    args = script.parse(["--config", "c.toml", "--out", "o", "--cold-start", "0, 50,1000", "--formats", "trace"])
    assert args.cold_start == [0, 50, 1000] and args.formats == ["trace"] and args.top_j == [1, 3]


def test_sampled_success_has_the_other_task_control(script, tmp_path):
    cfg = tmp_path / "toy.toml"
    cfg.write_text(CONFIG)
    res = run(script, cfg, tmp_path / "out", "1", "--success-samples", "1")
    for row in res["cold_start"]:
        assert set(row["sampled_success"]) == {"none", "text", "latent", "other"}
        assert all(0.0 <= v <= 1.0 for v in row["sampled_success"].values())
    assert "another task's latents" in (tmp_path / "out" / "results.md").read_text()


def test_pig_of_a_kept_checkpoint_is_measured_without_touching_the_run(tmp_path):
    """``benchmarks/pig_of_checkpoint.py`` forks a LOPD run's cold-start checkpoint and measures PIG there with
    the run's own code path; the run folder is left as it was."""
    from lopd_train.config import TrainConfig
    from lopd_train.training.trainer import train

    spec = importlib.util.spec_from_file_location("pig_of_checkpoint", ROOT / "benchmarks" / "pig_of_checkpoint.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    run = tmp_path / "run"
    train(TrainConfig(model="tiny-random", env="lopd-test/Coin-v0", category="all", steps=1, tasks_per_step=2,
                      group_size=2, max_new_tokens=8, num_latents=4, qformer_dim=32, qformer_layers=1,
                      experience_tokens=64, lora_r=4, lora_alpha=8, composer_lora_r=4, composer_lora_alpha=8,
                      progress=False, export=False, tensorboard=False, output_dir=str(run), cold_start_steps=2,
                      cold_start_batch_size=2, cold_start_min_successes=1, bank_samples=6, pig_trajectories=2,
                      pig_every=1, tasks="heads_0,heads_1,tails_0,tails_1"))
    # as in the study, where every run but the first takes its 0-rollout points from another run
    saved = json.loads((run / "config.json").read_text())
    (run / "config.json").write_text(json.dumps({**saved, "eval_start_from": str(tmp_path / "first-run")}))
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    assert mod.main([str(run), "--json", str(tmp_path / "pig.json")]) == 0
    got = json.loads((tmp_path / "pig.json").read_text())
    assert got["checkpoint"] == "cold-start" and got["step"] == 0
    assert {"pig_text", "pig_latent", "pig_zero"} <= set(got)
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before
    with pytest.raises(SystemExit):
        mod.main([str(run), "--checkpoint", "nowhere"])


def test_arms_share_one_bank_and_write_per_trajectory_records(script, tmp_path):
    """The decisive test's arms: one run builds the bank and holds back (``--build-only``), each arm measures on
    that bank (``--bank-from``) with its own composer and pairing, and commits the per-trajectory NLLs from
    which every interval recomputes (the paired own-minus-other difference resamples tasks)."""
    from lopd_train.latent import diagnostics

    cfg = tmp_path / "toy.toml"
    cfg.write_text(CONFIG)
    shared = tmp_path / "shared"
    built = run(script, cfg, shared, "0", "--build-only", "--per-task", "2")
    assert built["cold_start"] == [] and built["per_task"] == 2 and built["held_back"]
    arms = {}
    for name, sets in (("exclude", ["--set", "cold_start_retrieval=exclude"]),
                       ("perceiver", ["--set", "composer=perceiver", "--set", "cold_start_retrieval=self"])):
        arms[name] = run(script, cfg, tmp_path / name, "0,2", "--bank-from", str(shared), *sets)
        rep = arms[name]
        assert rep["held_back"] == built["held_back"] and rep["bank"] == built["bank"]
        assert rep["text_pilot"] == built["text_pilot"]  # measured once, on the shared bank
        assert rep["arm"]["cold_start_retrieval"] == name if name == "exclude" else rep["arm"]["composer"] == name
        for row in rep["cold_start"]:
            recs = diagnostics.read_records(tmp_path / name / "records" / f"cold_start_{row['cold_start_steps']}.jsonl")
            assert len(recs) == len(built["held_back"])
            again = diagnostics.paired_gain(recs, "latent", "other", by_task=True)
            assert again == row["own_minus_other"]
            assert row["latent"] == diagnostics.bootstrap_gain(recs, "latent")
    assert arms["perceiver"]["arm"]["composer"] == "perceiver"
