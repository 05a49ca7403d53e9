"""A run folder is one run of one process (issue 55): settings are range-checked and the env built before any
model loads (class 4), --resume refuses another run's settings or data, naming the key (class 2), a second
process on the folder is refused naming the holder's pid, and a crashed holder leaves nothing stuck (class 3).
On the command line each of these is one line and exit status 2."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import typing
from pathlib import Path

import pytest

import tests.coin_env  # noqa: F401  (registers lopd-test/Coin-v0)
from lopd_train import cli, config, models
from lopd_train.config import TrainConfig
from lopd_train.errors import RunLockedError, RunMismatchError, RunSettingError
from lopd_train.runlock import FolderLock
from lopd_train.training import runrecord
from lopd_train.training.trainer import Trainer, train
from tests.test_train_trainer import coin

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("folder") / "run"
    train(coin(out, steps=1))
    return out


@pytest.fixture
def no_model(monkeypatch):
    """Any model load fails the test: the refusals below come before one."""
    def load(*a, **k):
        raise AssertionError("a model was loaded before the settings were checked")
    monkeypatch.setattr(models, "load_backbone", load)


# ------------------------------------------------------------------------------------------ class 4

@pytest.mark.parametrize("key, value, words", [
    ("save_every", 0, "at least 1"), ("lr", float("nan"), "above 0, a finite number"), ("seed", -1, "at least 0"),
    ("tasks_per_step", 0, "at least 1"), ("top_p", 1.5, "above 0 and at most 1"), ("env_workers", 0, "at least 1"),
    ("keep_checkpoints", 0, "at least 1"), ("max_grad_norm", float("inf"), "above 0"),
])
def test_a_value_out_of_range_is_refused_naming_key_value_and_range(key, value, words):
    with pytest.raises(ValueError, match=rf"^{key} = {value!r} is out of range: it must be {words}"):
        TrainConfig(**{key: value})


def test_every_numeric_setting_of_both_commands_declares_its_range():
    from lopd_train.evaluation import EvalConfig

    for cls in (TrainConfig, EvalConfig):
        for name, typ in config.field_types(cls).items():
            members = typing.get_args(typ) or (typ,)
            if any(t in (int, float) for t in members) and typ is not bool:
                assert name in config.RANGES, f"{cls.__name__}.{name} declares no range"
    with pytest.raises(ValueError, match=r"concurrency = 0 is out of range: it must be at least 1"):
        EvalConfig(model="m", env=["lopd-test/Coin-v0"], concurrency=0)
    with pytest.raises(ValueError, match=r"request_timeout = 0.0 is out of range: it must be above 0"):
        EvalConfig(model="m", env=["lopd-test/Coin-v0"], request_timeout=0.0)


@pytest.mark.parametrize("kw, words", [
    ({"env": "lopd-test/Nope-v0"}, "--env lopd-test/Nope-v0.*`Nope` doesn't exist"),
    ({"env_kwargs": {"bogus": 1}}, "unexpected keyword argument 'bogus'"),
    ({"category": "sideways"}, "unknown category 'sideways'"),
])
def test_env_settings_the_env_refuses_stop_the_run_before_any_model_loads(tmp_path, no_model, kw, words):
    with pytest.raises(RunSettingError, match=words):
        Trainer(coin(tmp_path / "r", **kw))


def one_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    return err


@pytest.mark.parametrize("argv, words", [
    (["--save-every", "0"], "save_every = 0 is out of range"),
    (["--no-such-option"], "unrecognized arguments: --no-such-option"),
    (["--algo", "ppo"], "invalid choice"),
    (["--env", "lopd-test/Nope-v0", "--model", "tiny-random"], "--env lopd-test/Nope-v0"),
])
def test_user_errors_on_the_command_line_are_one_line_and_exit_2(tmp_path, capsys, no_model, argv, words):
    with pytest.raises(SystemExit) as exit_:
        cli.train_main([*argv, "--output-dir", str(tmp_path / "r"), "--no-progress"])
    assert exit_.value.code == 2
    assert words in one_line(capsys)


# ------------------------------------------------------------------------------------------ class 2

@pytest.mark.parametrize("change", [{"algo": "grpo"}, {"model": "smollm2-135m-instruct"}, {"seed": 3},
                                    {"tasks_per_step": 1}, {"category": "heads"}])
def test_resume_refuses_another_runs_settings_naming_the_key(run, tmp_path, no_model, change):
    import shutil

    out = tmp_path / "run"
    shutil.copytree(run, out)
    (key, _), = change.items()
    cfg = coin(out, steps=2, **change)
    now = re.escape(repr(getattr(cfg, key)))  # in the config's held form (a category is a list)
    with pytest.raises(RunMismatchError, match=rf"--resume of .* with other settings \({key}: the run has .*, now "
                                               rf"{now}\).*keeps its settings except steps, "):
        Trainer(cfg, resume=True)
    assert json.loads((out / runrecord.RUN_FILE).read_text())["settings"]["seed"] == 0  # the record is untouched


def test_resume_refuses_other_data_naming_the_file(run, tmp_path, no_model):
    import shutil

    out = tmp_path / "run"
    shutil.copytree(run, out)
    rec = json.loads((out / runrecord.RUN_FILE).read_text())
    rec["data"] = {"tasks.jsonl": "ab" * 32}  # the run read a file this env does not read now
    (out / runrecord.RUN_FILE).write_text(json.dumps(rec))
    with pytest.raises(RunMismatchError, match=r"data file tasks\.jsonl is not read now"):
        Trainer(coin(out, steps=2), resume=True)
    was = {"data": {"a.json": "1" * 64}}
    with pytest.raises(RunMismatchError, match=r"data file a.json has changed \(sha256 111111111111..., now 2222"):
        runrecord.check_data(was, {"files": [{"path": "/x/a.json", "sha256": "2" * 64}]}, out)
    runrecord.check_data(was, {"files": [{"path": "/elsewhere/a.json", "sha256": "1" * 64}]}, out)  # same data


def test_a_resume_may_change_what_does_not_define_the_run(run, tmp_path):
    import shutil

    out = tmp_path / "run"
    shutil.copytree(run, out)
    Trainer(coin(out, steps=5, save_every=2, keep_checkpoints=3, progress=True), resume=True).close()


# ------------------------------------------------------------------------------------------ class 3

def hold(folder: Path) -> subprocess.Popen:
    """Another process holding the folder's lock, as a running lopd-train does."""
    code = ("import sys, time; from lopd_train.runlock import FolderLock; "
            f"lock = FolderLock({str(folder)!r}, 'lopd-train').acquire(); print('held', flush=True); time.sleep(600)")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_process_on_a_run_folder_is_refused_naming_the_holder(tmp_path, no_model, capsys):
    out = tmp_path / "run"
    proc = hold(out)
    try:
        with pytest.raises(RunLockedError, match=rf"{out} is in use by lopd-train \(pid {proc.pid}\)"):
            Trainer(coin(out))
        with pytest.raises(SystemExit) as exit_:
            cli.train_main(["--output-dir", str(out), "--model", "tiny-random", "--env", "lopd-test/Coin-v0"])
        assert exit_.value.code == 2 and f"pid {proc.pid}" in one_line(capsys)
        with pytest.raises(SystemExit) as exit_:
            cli.eval_main(["--model", "tiny-random", "--env", "lopd-test/Coin-v0", "--output", str(out)])
        assert exit_.value.code == 2 and f"lopd-eval: {out} is in use" in one_line(capsys)
    finally:
        proc.send_signal(signal.SIGKILL)  # a crash: the kernel drops its lock
        proc.wait()
    FolderLock(out).acquire().release()


def test_one_process_cannot_open_one_folder_twice_and_a_finished_run_frees_it(run, tmp_path):
    import shutil

    out = tmp_path / "run"
    shutil.copytree(run, out)
    first = Trainer(coin(out, steps=2), resume=True)
    try:
        with pytest.raises(RunLockedError, match=rf"in use by this process \(pid {os.getpid()}\)"):
            Trainer(coin(out, steps=2), resume=True)
    finally:
        first.close()
    with pytest.raises(RunMismatchError):  # a run that fails to start frees the folder too
        Trainer(coin(out, steps=2, env_kwargs={"bogus": 1}), resume=True)
    Trainer(coin(out, steps=2), resume=True).close()
