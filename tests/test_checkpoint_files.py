"""Checkpoints hold tensors and plain data only (issue 55, class 1): a pickle planted in a checkpoint never runs,
an old-format checkpoint is refused with how to convert it and converts without running code; and a full disk
or a torn file never leaves a checkpoint that --resume trusts (class 5)."""

from __future__ import annotations

import errno
import json
import shutil
from pathlib import Path
from typing import NamedTuple

import pytest
import torch

import tests.coin_env  # noqa: F401  (registers lopd-test/Coin-v0)
from lopd_train import statefile
from lopd_train.errors import CheckpointError, NoSpaceError
from lopd_train.experience import plain
from lopd_train.training import checkpoints, convert_checkpoint
from lopd_train.training.trainer import Trainer, train
from tests.test_train_trainer import coin, rows

DROP = ("seconds", "rollout_seconds", "update_seconds")


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ckpt") / "run"
    train(coin(out, steps=1))
    return out


def copy(run: Path, dest: Path) -> Path:
    shutil.copytree(run, dest)
    return dest


class Payload:
    """Unpickled, it creates ``marker``: the proof that loading ran code."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def plant(ckpt: Path, marker: Path) -> None:
    for f in ckpt.glob("trainer.*"):
        f.unlink()
    torch.save({"lora": Payload(str(marker)), "algo": {}, "rng": {}}, ckpt / "trainer.pt")


def test_checkpoints_hold_no_pickle(run):
    folders = [p for p in (run / "checkpoints").iterdir() if p.is_dir()]
    assert {p.name for p in folders} >= {"cold-start", "step-000001"}
    for folder in folders:
        assert not (folder / "trainer.pt").exists()
        state = statefile.load(folder / "trainer")
        assert state["lora"] and isinstance(state["algo"]["probes"], list)
        for f in folder.rglob("*"):
            if f.is_file():
                head = f.read_bytes()[:4]
                assert head != b"PK\x03\x04" and head[:1] != b"\x80", f"{f} looks like a pickle"


def test_a_pickle_planted_in_a_checkpoint_never_runs(run, tmp_path):
    out = copy(run, tmp_path / "run")
    ckpt = checkpoints.latest(out / "checkpoints")
    marker = tmp_path / "pwned"
    plant(ckpt, marker)
    with pytest.raises(CheckpointError, match=r"old pickle format.*python -m lopd_train.training.convert_checkpoint"):
        Trainer(coin(out, steps=2), resume=True)
    with pytest.raises(CheckpointError, match="convert"):  # --init-from reads it no more than --resume
        Trainer(coin(tmp_path / "forked", steps=2, init_from=str(ckpt)))
    assert convert_checkpoint.main([str(ckpt)]) == 2  # the converter's restricted unpickler refuses it
    assert not marker.exists()


def test_a_state_file_refuses_objects_and_a_torn_tensor_file(tmp_path):
    with pytest.raises(TypeError, match=r"state\.algo\.x: a builtins\.object cannot go into a state file"):
        statefile.save(tmp_path / "s", {"algo": {"x": object()}})
    statefile.save(tmp_path / "s", {"w": torch.arange(6.0), "t": (1, "a", None), "k": {3: float("nan")}})
    back = statefile.load(tmp_path / "s")
    assert torch.equal(back["w"], torch.arange(6.0)) and back["t"] == (1, "a", None) and 3 in back["k"]
    data = bytearray((tmp_path / "s.safetensors").read_bytes())
    data[-1] ^= 1  # same size, other bytes
    (tmp_path / "s.safetensors").write_bytes(bytes(data))
    with pytest.raises(statefile.StateFileError, match="torn or altered"):
        statefile.load(tmp_path / "s")


def test_an_old_format_checkpoint_is_refused_then_converted_and_resumes_the_same(run, tmp_path):
    ref = copy(run, tmp_path / "ref")
    old = copy(run, tmp_path / "old")
    for ckpt in (p for p in (old / "checkpoints").iterdir() if p.is_dir()):  # as lopd wrote them before
        blob = statefile.load(ckpt / "trainer")
        blob["algo"]["probes"] = plain.probes_from_plain(blob["algo"]["probes"])  # Trajectory objects
        torch.save(blob, ckpt / "trainer.pt")
        for f in statefile.paths(ckpt / "trainer"):
            f.unlink()
    with pytest.raises(CheckpointError, match=f"convert_checkpoint {old / 'checkpoints'}"):
        Trainer(coin(old, steps=2), resume=True)
    assert convert_checkpoint.main([str(old)]) == 0
    assert not list((old / "checkpoints").rglob("trainer.pt"))
    train(coin(ref, steps=2), resume=True)
    train(coin(old, steps=2), resume=True)
    strip = lambda rs: [{k: v for k, v in r.items() if k not in DROP} for r in rs]  # noqa: E731
    assert strip(rows(old)) == strip(rows(ref))


# ------------------------------------------------------------------------------------------ class 5


def test_a_full_disk_is_said_before_writing_and_keeps_the_last_good_checkpoint(run, tmp_path, monkeypatch):
    out = copy(run, tmp_path / "run")
    trainer = Trainer(coin(out, steps=3), resume=True)
    try:
        before = checkpoints.latest(trainer.ckpt_dir)
        trainer.step = 2
        class Usage(NamedTuple):
            total: int
            used: int
            free: int

        monkeypatch.setattr(checkpoints.shutil, "disk_usage", lambda p: Usage(10**9, 10**9 - 4096, 4096))
        with pytest.raises(NoSpaceError, match=r"no space left on .*checkpoints: the checkpoint of step 2 needs "
                                               r"about .* MiB, 0\.0 MiB are free; the last good checkpoint, "
                                               "step-000001, is kept for --resume"):
            checkpoints.save(trainer)
        assert checkpoints.latest(trainer.ckpt_dir) == before
        assert not list(trainer.ckpt_dir.glob(".tmp-*"))
    finally:
        trainer.close()


def test_a_disk_that_fills_while_writing_leaves_no_torn_checkpoint(run, tmp_path, monkeypatch):
    out = copy(run, tmp_path / "run")
    trainer = Trainer(coin(out, steps=3), resume=True)
    real = statefile.write_atomic

    def fills(path, data):
        if path.suffix == ".safetensors":
            path.with_name(f".{path.name}.tmp").write_bytes(data[:len(data) // 2])  # what fitted
            raise OSError(errno.ENOSPC, "No space left on device")
        real(path, data)

    try:
        trainer.step = 2
        monkeypatch.setattr(statefile, "write_atomic", fills)
        with pytest.raises(NoSpaceError, match=r"no space left on .*while writing the checkpoint of step 2"):
            checkpoints.save(trainer)
        assert checkpoints.latest(trainer.ckpt_dir).name == "step-000001"
        assert not list(trainer.ckpt_dir.glob(".tmp-*")) and not (trainer.ckpt_dir / "step-000002").exists()
    finally:
        trainer.close()


def test_a_torn_newest_checkpoint_is_not_the_one_resume_uses(run, tmp_path):
    out = copy(run, tmp_path / "run")
    ckpt_dir = out / "checkpoints"
    assert checkpoints.latest(ckpt_dir).name == "step-000001"
    tensors = ckpt_dir / "step-000001" / "trainer.safetensors"
    tensors.write_bytes(tensors.read_bytes()[:1000])  # torn by a crash of the file system
    assert checkpoints.latest(ckpt_dir).name == "step-000000"  # the last good one
    (ckpt_dir / "latest").write_text("../../elsewhere")  # the pointer names only this run's folders
    assert checkpoints.latest(ckpt_dir).name == "step-000000"
    state = json.loads((ckpt_dir / "step-000000" / "state.json").read_text())
    assert state["step"] == 0
