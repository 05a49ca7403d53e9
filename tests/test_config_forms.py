"""One configuration spine: list and table settings are real lists and dicts however they were written (flags,
TOML, an older run's saved ``config.json``), an older run's saved settings compare equal to today's, each
algorithm reads its own section, one sampling type, and one assembler of an env's ``gym.make`` arguments."""

from __future__ import annotations

import ast
import dataclasses
import json
from pathlib import Path

import pytest

from lopd_train import cli, textforms
from lopd_train.config import TRAIN_SECTIONS, VIEWS, TrainConfig
from lopd_train.envargs import gym_kwargs
from lopd_train.errors import RunMismatchError
from lopd_train.sampling import Sampling
from lopd_train.training import runrecord
from lopd_train.training.heldout import settings_differ

OLD = {"category": "simple,multiple", "tasks": "simple_1,simple_2", "eval_tasks": "simple_3",
       "env_kwargs": '{"few_shot": "simple_0"}', "eval_env_kwargs": "{}", "lora_targets": "q_proj,v_proj",
       "report_to": "tensorboard"}


def test_every_text_form_becomes_the_same_list_or_table(tmp_path):
    old = TrainConfig(**OLD)
    toml = tmp_path / "run.toml"
    toml.write_text('category = ["simple", "multiple"]\ntasks = ["simple_1", "simple_2"]\neval_tasks = ["simple_3"]\n'
                    'env_kwargs = { few_shot = "simple_0" }\nlora_targets = ["q_proj", "v_proj"]\n')
    from_file, _ = cli.config_from_args(["--config", str(toml)])
    from_flags, _ = cli.config_from_args(["--category", "simple,multiple", "--tasks", "simple_1", "simple_2",
                                          "--eval-tasks", "simple_3", "--env-kwargs", '{"few_shot": "simple_0"}',
                                          "--lora-targets", "q_proj,v_proj"])
    for cfg in (old, from_file, from_flags):
        assert cfg.category == ["simple", "multiple"] and cfg.tasks == ["simple_1", "simple_2"]
        assert cfg.eval_tasks == ["simple_3"] and cfg.env_kwargs == {"few_shot": "simple_0"}
        assert cfg.eval_env_kwargs == {} and cfg.lora_targets == ["q_proj", "v_proj"]
        assert cfg.report_to == ["tensorboard"]
    default = TrainConfig()
    assert (default.lora_targets, default.category, default.tasks) == ("all-linear", ["simple"], None)
    assert TrainConfig(lora_targets=["all-linear"]).lora_targets == "all-linear"
    assert textforms.as_list(["a,b", " c "]) == ["a", "b", "c"] and textforms.as_list("abc") == ["abc"]


def test_an_older_runs_saved_settings_compare_equal_to_todays(tmp_path):
    now = TrainConfig(**OLD, output_dir=str(tmp_path)).to_dict()
    rec = runrecord.record({**now, **OLD}, None)  # run.json of a run started by an older lopd
    runrecord.check_settings(rec, now, tmp_path)  # no mismatch
    with pytest.raises(RunMismatchError, match="category"):
        runrecord.check_settings(rec, TrainConfig(**{**OLD, "category": "simple"}).to_dict(), tmp_path)
    assert settings_differ(now, {**now, **OLD}) == {}
    assert set(settings_differ(now, {**now, **OLD, "env_kwargs": "{}"})) == {"env_kwargs"}
    (tmp_path / "config.json").write_text(json.dumps({**now, **OLD}))  # a resumed older run's saved config
    cfg, _ = cli.config_from_args(["--output-dir", str(tmp_path), "--resume"])
    assert cfg.to_dict() == now


def test_each_algorithm_reads_its_own_section_through_a_live_view():
    cfg = TrainConfig(margin=0.1, clip_low=0.3, teacher="ema")
    assert (cfg.lopd.margin, cfg.grpo.clip_low, cfg.baselines.teacher) == (0.1, 0.3, "ema")
    cfg.grpo.grpo_kl_coef = 0.5  # a view: writes reach the flat setting, which flags and files name
    assert cfg.grpo_kl_coef == 0.5 and "lopd" not in cfg.to_dict()
    with pytest.raises(AttributeError, match="LopdSection has no setting 'clip_low'"):
        _ = cfg.lopd.clip_low
    # what several algorithms share has a section of its own: the bank and retrieval, the top-M KL
    cfg = TrainConfig(top_j=5, bank_mode="dynamic", top_m=7, kl_support="student")
    assert (cfg.experience.top_j, cfg.experience.bank_mode, cfg.kl.top_m, cfg.kl.kl_support) == (5, "dynamic", 7,
                                                                                                  "student")
    with pytest.raises(AttributeError, match="LopdSection has no setting 'top_j'"):
        _ = cfg.lopd.top_j
    # every view is a property of TrainConfig, and every field is in exactly one section
    views = {name: getattr(cfg, name) for name in VIEWS}
    assert all(type(v).__name__ == "SectionView" for v in views.values())
    names = [f.name for section in TRAIN_SECTIONS for f in dataclasses.fields(section)]
    assert sorted(names) == sorted(f.name for f in dataclasses.fields(TrainConfig)) and len(set(names)) == len(names)


def flat_reads(root: Path, names: set[str]) -> list[str]:
    """``file:line name`` of each read or write of a setting in ``names`` straight off a config
    (``cfg.X``, ``config.X``, ``<anything>.cfg.X``) in the Python files under ``root``."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not (isinstance(node, ast.Attribute) and node.attr in names):
                continue
            owner = node.value
            held = owner.id if isinstance(owner, ast.Name) else owner.attr if isinstance(owner, ast.Attribute) else ""
            if held in ("cfg", "config"):
                found.append(f"{path}:{node.lineno} {node.attr}")
    return found


def test_settings_not_every_algorithm_reads_are_read_through_their_section():
    """lopd_train and the benchmarks read a view section's setting through its view (``cfg.lopd.margin``), never
    flat (``cfg.margin``). Not counted: config.py, which defines the views, and the sampler's code
    (lopd_train/rollout/), whose ``cfg`` is a :class:`Sampling` with a ``top_m`` of its own."""
    names = {f.name for section in VIEWS.values() for f in dataclasses.fields(section)}
    sampling = {f.name for f in dataclasses.fields(Sampling)}
    repo = Path(__file__).resolve().parent.parent
    config, rollout = str(repo / "lopd_train" / "config.py"), str(repo / "lopd_train" / "rollout")
    found = [hit for root in ("lopd_train", "benchmarks") for hit in flat_reads(repo / root, names)
             if not hit.startswith(config) and not (hit.startswith(rollout) and hit.split()[-1] in sampling)]
    assert found == []


def test_the_flat_read_finder_finds_flat_reads(tmp_path):
    (tmp_path / "a.py").write_text("x = cfg.top_j + self.cfg.margin + trainer.config.clip_low\n"
                                   "y = cfg.lopd.margin + self.bank + cfg.lr\n")
    assert sorted(flat_reads(tmp_path, {"top_j", "margin", "clip_low", "bank"})) == [
        f"{tmp_path / 'a.py'}:1 {name}" for name in ("clip_low", "margin", "top_j")]


def test_one_sampling_type_and_temperature_zero_is_greedy():
    from lopd_train.evaluation import backends
    from lopd_train.rollout import engine

    assert backends.Sampling is engine.SamplingConfig is Sampling
    assert Sampling(temperature=0.0).greedy and not Sampling(temperature=0.7).greedy
    assert Sampling(temperature=0.7, greedy=True).greedy
    assert backends.sampling_dict(Sampling(temperature=0.0, max_new_tokens=4)) == {
        "temperature": 0.0, "max_new_tokens": 4, "max_sequence_tokens": 2048, "tool_syntax": "hermes",
        "tool_prompt": "auto", "seed": 0}


def test_one_assembler_of_gym_make_arguments():
    from lopd_train.evaluation import EvalConfig, env_kwargs
    from lopd_train.training.envs import run_env_kwargs

    cfg = TrainConfig(category="simple", env_kwargs={"few_shot": "simple_0"}, eval_env_kwargs={"few_shot": "x"},
                      data_dir="/d", max_turns=3)
    assert run_env_kwargs(cfg) == {"few_shot": "simple_0", "category": "simple", "data_dir": "/d", "max_turns": 3}
    assert run_env_kwargs(cfg, heldout=True)["few_shot"] == "x"
    ev = EvalConfig(model="m", env=["lopd/ACEBench-v0", "lopd/BFCLv3-v0"], language="zh", category="a,b",
                    env_kwargs={"k": 1, "lopd/BFCLv3-v0": {"k": 2}})
    assert env_kwargs(ev, "lopd/ACEBench-v0") == {"k": 1, "category": ["a", "b"], "language": "zh"}
    assert env_kwargs(ev, "lopd/BFCLv3-v0") == {"k": 2, "category": ["a", "b"]}
    assert gym_kwargs("lopd/BFCLv3-v0", {}, category=["all"]) == {"category": "all"}


def test_no_other_comma_split_in_the_trainer():
    root = Path(__file__).resolve().parents[1] / "lopd_train"
    where = [str(p.relative_to(root)) for p in root.rglob("*.py") if 'split(",")' in p.read_text()]
    assert where == ["textforms.py"]
