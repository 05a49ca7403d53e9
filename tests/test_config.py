"""The one typed configuration (``lopd_train/config.py``) behind ``lopd-train`` and ``lopd-eval``: every config
the project ships still parses, lists read the same from a file and from flags, choices and types are checked
before anything loads, ``--help`` is grouped by section, and no file refers to a document outside the repo."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from lopd_train import cli, config
from lopd_train.config import TrainConfig
from lopd_train.evaluation import EvalConfig

REPO = Path(__file__).resolve().parents[1]
SHIPPED = sorted([*REPO.glob("examples/**/*.toml"), *REPO.glob("benchmarks/results/sample_efficiency/configs/*.toml")])
SAVED = sorted(REPO.glob("benchmarks/results/sample_efficiency/runs/*/config.json"))


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: str(p.relative_to(REPO)))
def test_every_shipped_config_parses(path):
    cfg, _ = cli.config_from_args(["--config", str(path)])
    raw = config.load_settings(path, TrainConfig)
    # what the file says is what the run gets: a comma string or a TOML list as a list, JSON text as a table
    for key, value in config.normalised_settings(TrainConfig, raw).items():
        assert getattr(cfg, key) == value, key
        assert not isinstance(value, str) or key not in ("tasks", "eval_tasks", "category", "env_kwargs"), key


def test_the_studys_saved_run_configs_parse():
    assert SAVED, "the study's run folders are missing"
    for path in SAVED:
        saved = json.loads(path.read_text())
        known = {f.name for f in dataclasses.fields(TrainConfig)}
        TrainConfig(**{k: v for k, v in saved.items() if k in known})


def test_lists_read_the_same_from_a_file_and_from_flags(tmp_path):
    toml = tmp_path / "run.toml"
    toml.write_text('tasks = ["simple_1", "simple_2"]\ncategory = ["simple", "multiple"]\n')
    from_file, _ = cli.config_from_args(["--config", str(toml)])
    from_flags, _ = cli.config_from_args(["--tasks", "simple_1", "simple_2", "--category", "simple", "multiple"])
    legacy, _ = cli.config_from_args(["--tasks", "simple_1,simple_2", "--category", "simple,multiple"])
    assert from_file.tasks == from_flags.tasks == legacy.tasks == ["simple_1", "simple_2"]
    assert from_file.category == from_flags.category == legacy.category == ["simple", "multiple"]
    ev = tmp_path / "eval.toml"
    ev.write_text('model = "m"\nenv = "lopd/BFCLv3-v0"\ntasks = "simple_1,simple_2"\n')
    cfg, _ = cli.eval_config_from_args(["--config", str(ev)])
    assert cfg.tasks == ["simple_1", "simple_2"] and cfg.env == ["lopd/BFCLv3-v0"]  # never a set of characters
    cfg, _ = cli.eval_config_from_args(["--model", "m", "--env", "a/b-v0", "--env", "c/d-v0", "--tasks", "x", "y"])
    assert cfg.env == ["a/b-v0", "c/d-v0"] and cfg.tasks == ["x", "y"]


def test_flags_win_over_the_file_which_wins_over_defaults(tmp_path):
    toml = tmp_path / "run.toml"
    toml.write_text('steps = 7\nalgo = "grpo"\nuse-margin = false\n')
    cfg, _ = cli.config_from_args(["--config", str(toml), "--steps", "3"])
    assert (cfg.steps, cfg.algo, cfg.lopd.use_margin, cfg.experience.top_j) == (3, "grpo", False, 3)


@pytest.mark.parametrize("argv,message", [
    (["--algo", "lpod"], "invalid choice: 'lpod'"),
    (["--kl-support", "both"], "invalid choice: 'both'"),
    (["--steps", "ten"], "invalid int value"),
    (["--report-to", "tensorboard", "wanb"], "report_to must be one of 'none', 'all', 'aim', 'clearml'"),
])
def test_bad_flags_fail_before_anything_loads(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.config_from_args(argv)
    assert exc.value.code == 2 and message in str(exc.value)  # one line, printed by the command (exit 2)


@pytest.mark.parametrize("text,message", [
    ('algo = "lpod"', "algo must be one of 'lopd', 'grpo', .*got 'lpod' \\(did you mean 'lopd'\\?\\)"),
    ('steps = "10"', "steps must be int, got '10'"),
    ('rollout-backend = "vlm"', "rollout_backend must be one of 'hf', 'vllm'"),
    ('report_to = ["tensorboard", "wanb"]', "did you mean 'wandb'"),
    ('top_jj = 2', "unknown setting 'top_jj' \\(did you mean 'top_j'\\?\\)"),
])
def test_bad_file_values_fail_before_anything_loads(tmp_path, text, message):
    toml = tmp_path / "bad.toml"
    toml.write_text(text + "\n")
    with pytest.raises(SystemExit, match=message):
        cli.config_from_args(["--config", str(toml)])


def test_algorithm_choices_are_the_registered_algorithms():
    from lopd_train import models
    from lopd_train.algorithms import ALGORITHMS

    assert set(config.ALGORITHM_NAMES) == set(ALGORITHMS) and config.DEFAULT_MODEL == models.DEFAULT_MODEL


def test_help_is_grouped_by_section():
    text = cli.train_parser().format_help()
    for group in ("env:", "model:", "algorithm:", "sampling:", "LOPD:", "GRPO:", "logging:", "distributed and engines:",
                  "experience bank (lopd, and the baselines that read one):"):
        assert f"\n{group}\n" in text, group
    assert text.index("--margin") > text.index("\nLOPD:\n") > text.index("--top-j") > text.index("--lr")
    assert text.index("--composer-lora-r") > text.index("\nLOPD:\n")  # the composer's adapter is LOPD's
    eval_help = cli.eval_parser().format_help()
    for group in ("model:", "env:", "sampling:", "backend:", "output:"):
        assert f"\n{group}\n" in eval_help, group
    assert "{hf,vllm,openai}" in eval_help and "{auto,native,text}" in eval_help


def test_eval_config_values_are_checked_too():
    with pytest.raises(ValueError, match="tool_mode must be one of 'auto', 'native', 'text'"):
        EvalConfig(model="m", env=["lopd/BFCLv3-v0"], tool_mode="nativ")
    assert EvalConfig(model="m", env=["lopd/BFCLv3-v0"], env_kwargs='{"category": "simple"}').env_kwargs == {
        "category": "simple"}


def test_no_file_refers_to_a_design_document_outside_the_repository():
    assert (REPO / "docs" / "design.md").is_file()
    offenders = [str(p.relative_to(REPO)) for p in [*REPO.glob("lopd_envs/**/*.py"), *REPO.glob("lopd_train/**/*.py"),
                                                    *REPO.glob("tests/*.py"), *REPO.glob("benchmarks/*.py"),
                                                    REPO / "README.md"]
                 if "DESIGN.md" in p.read_text() and p.name != "test_config.py"]
    assert not offenders, offenders
