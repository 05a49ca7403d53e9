"""lopd-train explains every knob and reads a config file; lopd-eval scores a model on an env."""

from __future__ import annotations

import dataclasses
import json

import pytest

import tests.coin_env  # noqa: F401  (registers lopd-test/Coin-v0)
from lopd_train import cli
from lopd_train.config import TrainConfig


def test_help_explains_every_knob(capsys):
    with pytest.raises(SystemExit):
        cli.train_main(["--help"])
    text = capsys.readouterr().out
    for f in dataclasses.fields(TrainConfig):
        flag = "--" + f.name.replace("_", "-")
        assert flag in text, flag
        assert f.metadata.get("help"), f"{f.name} has no help text"
    for word in ("--config", "--resume", "reverse KL", "latent"):
        assert word in text


def test_paper_defaults():
    cfg = TrainConfig()
    assert (cfg.experience.top_j, cfg.lopd.num_latents, cfg.kl.top_m, cfg.lopd.margin) == (3, 32, 20, 0.05)
    assert cfg.algo == "lopd" and cfg.model == "smollm2-135m-instruct"


def test_reference_code_defaults():
    """The authors' choices (bingreeky/LOPD @ 50c3d7f) are the defaults where they do not depend on model size."""
    cfg = TrainConfig()
    assert (cfg.lopd.anchor_coef, cfg.lopd.beta_init, cfg.lopd.beta_lr, cfg.max_grad_norm) == (0.2, 0.0, 0.5, 1.0)
    assert (cfg.kl.kl_support, cfg.lopd.composer_weighting, cfg.experience.experience_format) == ("teacher", "sequence",
                                                                                                 "chat")
    assert (cfg.lopd.composer_lora_r, cfg.lopd.composer_lora_alpha, cfg.lopd.cold_start_batch_size) == (8, 16, 8)
    assert cfg.lopd.cold_start_steps > 0


def test_unknown_choices_are_refused_clearly():
    for bad in ({"kl_support": "both"}, {"composer_weighting": "rollout"}, {"experience_format": "json"}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            TrainConfig(**bad)


def test_config_file_sets_knobs_and_flags_win(tmp_path):
    toml = tmp_path / "run.toml"
    toml.write_text('env = "lopd/HumanEvalPlus-v0"\nsteps = 7\ntop-j = 2\nuse_margin = false\n'
                    'env_kwargs = { scoring = "strict" }\n')
    cfg, _ = cli.config_from_args(["--config", str(toml), "--steps", "9"])
    assert cfg.env == "lopd/HumanEvalPlus-v0" and cfg.steps == 9
    assert cfg.experience.top_j == 2 and cfg.lopd.use_margin is False
    assert cfg.env_kwargs == {"scoring": "strict"}
    js = tmp_path / "run.json"
    js.write_text(json.dumps({"algo": "grpo", "lr": 0.001}))
    cfg, _ = cli.config_from_args(["--config", str(js), "--no-tensorboard"])
    assert cfg.algo == "grpo" and cfg.lr == 0.001 and cfg.tensorboard is False


def test_config_file_rejects_unknown_settings(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("stepz = 3\n")
    with pytest.raises(SystemExit):
        cli.config_from_args(["--config", str(bad)])


def test_lopd_eval_writes_table_json_and_chart(tmp_path, capsys):
    out = tmp_path / "eval.json"
    assert cli.eval_main(["--model", "tiny-random", "--env", "lopd-test/Coin-v0", "--max-new-tokens", "8",
                          "--batch-size", "4", "--out", str(out)]) == 0
    table = capsys.readouterr().out
    assert "lopd-test/Coin-v0" in table and "(all)" in table
    res = json.loads(out.read_text())["results"][0]
    assert res["n"] == 8 and set(res["categories"]) == {"heads", "tails"}
    assert out.with_suffix(".png").exists()


def test_the_readme_main_job_config_is_a_valid_run_that_evaluates_before_and_after():
    """The README's main job: every key a real option, LOPD with the reference bank and a cold start that runs,
    held-out tasks disjoint from the training tasks, both scored at rollouts 0 and at the end of the run (the
    budget, or the final point before it)."""
    from pathlib import Path

    cfg, _ = cli.config_from_args(["--config", str(Path(__file__).resolve().parents[1] /
                                                     "examples/smollm2_bfcl_lopd.toml")])
    assert cfg.algo == "lopd" and cfg.model == "smollm2-135m-instruct" and cfg.experience.bank_mode == "reference"
    assert cfg.lopd.cold_start_steps > 0 and not cfg.lopd.allow_empty_cold_start and cfg.eval_training_tasks
    held, pool = cfg.eval_tasks, cfg.tasks
    assert len(held) == len(set(held)) >= 8 and set(held).isdisjoint(pool)
    assert cfg.rollout_budget == (len(pool) * cfg.experience.bank_samples
                                  + cfg.steps * cfg.tasks_per_step * cfg.group_size)
    assert cfg.eval_every_rollouts == cfg.rollout_budget > 0  # before (0) and after (the budget or final point)


@pytest.mark.parametrize("value, says", [("{bad", "is not JSON"), ("[1]", "must be a JSON object")])
def test_env_kwargs_that_are_not_a_json_object_are_one_line_exit_2(capsys, value, says):
    from lopd_train.cli import train_main

    with pytest.raises(SystemExit) as exc:
        train_main(["--env-kwargs", value])
    err = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2 and len(err) == 1 and says in err[0] and "--env-kwargs" in err[0]


def test_export_of_a_folder_that_is_no_run_is_one_line_exit_2(tmp_path, capsys):
    from lopd_train.export import main

    with pytest.raises(SystemExit) as exc:
        main([str(tmp_path / "nope")])
    err = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2 and len(err) == 1 and "is not a lopd-train run folder" in err[0]
