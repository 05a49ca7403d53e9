"""Resume is exact for the experience bank (issue 55, class 6): a run stopped at any point and resumed has the
bank, its ids and every logged row of the run that was never stopped. The bank is restored from the
checkpoint's snapshot, not merged into the live bank (which keeps what the stopped run added after it)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

import tests.coin_env  # noqa: F401  (registers lopd-test/Coin-v0)
from lopd_train.training.trainer import Trainer, train
from tests.test_train_trainer import rows, tiny_cfg

DROP = ("seconds", "rollout_seconds", "update_seconds")


class Killed(BaseException):
    """Stands for kill -9: nothing after it runs (no checkpoint, no close)."""


def coin(out: Path):
    return tiny_cfg(out, env="lopd-test/Coin-v0", category="all", export=False, tensorboard=False, steps=4,
                    save_every=2)


def bank_rows(out: Path) -> list[tuple]:
    db = sqlite3.connect(out / "bank.sqlite")
    try:
        return db.execute("SELECT id, key, rollout FROM experiences ORDER BY id").fetchall()
    finally:
        db.close()


def strip(rs: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in DROP} for r in rs]


@pytest.fixture(scope="module")
def straight(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("straight") / "run"
    train(coin(out))
    return out


@pytest.mark.parametrize("method, nth", [
    ("rollout_batch", 2),  # inside step 1 (call 1 is the cold start's batch): its successes are in the live bank,
                           # the last checkpoint is the cold start's
    ("rollout_batch", 4),  # inside step 3, after step 2's checkpoint
    ("log", 6),  # step 3's row logged (3 cold-start rows, steps 1-3), step 4 and its checkpoint never came
])
def test_a_run_killed_and_resumed_has_the_uninterrupted_runs_bank_ids_and_rows(straight, tmp_path, monkeypatch,
                                                                               method, nth):
    out = tmp_path / "run"
    real = getattr(Trainer, method)
    calls = {"n": 0}

    def killed(self, *a, **k):
        calls["n"] += 1
        result = real(self, *a, **k)
        if calls["n"] == nth:
            raise Killed
        return result

    monkeypatch.setattr(Trainer, method, killed)
    with pytest.raises(Killed):
        train(coin(out))
    monkeypatch.setattr(Trainer, method, real)
    stopped = bank_rows(out)
    train(coin(out), resume=True)
    assert bank_rows(out) == bank_rows(straight), f"stopped with {len(stopped)} rows"
    assert strip(rows(out)) == strip(rows(straight))
