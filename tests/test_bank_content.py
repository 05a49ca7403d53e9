"""Banks are checked for content, not only shape (issue 55, class 7): a row whose text, env or task was altered
no longer matches its key, token ids outside the tokenizer would crash a cold start's embedding lookup; both are
refused when the bank is read, naming the file and the row."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

import tests.coin_env  # noqa: F401  (registers lopd-test/Coin-v0)
from lopd_envs.trace import Trace
from lopd_train.experience.bank import BankFileError, ExperienceBank, read_bank_file
from lopd_train.rollout.replay import SEQUENCE_KEY
from lopd_train.training.trainer import Trainer
from tests.test_train_trainer import tiny_cfg


def trace(task_id: str, ids: list[int]) -> Trace:
    tr = Trace(env_id="lopd-test/Coin-v0", task_id=task_id, task=f"Write a note about {task_id}.", reward=1.0,
               success=True)
    tr.add({"text": "a note"}, "noted 6 chars")
    tr.add({"text": "done"})
    tr.metadata[SEQUENCE_KEY] = {"prompt": "0" * 16, "ids": ids, "mask": [1] * len(ids)}
    return tr


def bank_file(path: Path, ids: list[int] = (5, 6, 7)) -> Path:
    bank = ExperienceBank(path)
    bank.add([trace("heads_0", list(ids)), trace("heads_1", [1, 2])])
    bank.close()
    return path


def test_a_row_altered_after_it_was_written_is_refused_naming_file_and_row(tmp_path):
    path = bank_file(tmp_path / "bank.sqlite")
    read_bank_file(path, vocab=259)  # as written: accepted
    db = sqlite3.connect(path)
    db.execute("UPDATE experiences SET text = text || ' (edited)' WHERE id = 2")
    db.commit()
    db.close()
    with pytest.raises(BankFileError, match=rf"{path}, experience id 2: its key is not the digest"):
        read_bank_file(path)
    bank_file(tmp_path / "b.sqlite")
    db = sqlite3.connect(tmp_path / "b.sqlite")  # the trace changed, text and key left as they were
    tr = trace("heads_1", [1, 2])
    tr.steps[0].result = "noted 999 chars"
    db.execute("UPDATE experiences SET trace = ? WHERE id = 2", (tr.to_json(),))
    db.commit()
    db.close()
    with pytest.raises(BankFileError, match="experience id 2: its text is not the rendering of its trace"):
        read_bank_file(tmp_path / "b.sqlite")


def test_token_ids_outside_the_tokenizer_are_refused_naming_file_row_and_id(tmp_path):
    path = bank_file(tmp_path / "bank.sqlite", ids=[5, 10**6, 7])
    read_bank_file(path)  # its shape is fine
    with pytest.raises(BankFileError, match=rf"{path}, experience id 1: token id 1000000 at position 1 is not an "
                                            r"id of the tokenizer \(0 to 258\)"):
        read_bank_file(path, vocab=259)


@pytest.mark.parametrize("kind", ["sqlite", "jsonl"])
def test_a_run_seeded_with_out_of_vocabulary_ids_stops_before_its_cold_start(tmp_path, kind):
    if kind == "sqlite":
        source = bank_file(tmp_path / "seed.sqlite", ids=[5, -3])
        where = rf"{source}, experience id 1: token id -3"
    else:
        source = tmp_path / "seed.jsonl"
        source.write_text(trace("heads_0", [1, 2]).to_json() + "\n" + trace("heads_1", [300]).to_json() + "\n")
        where = rf"{source}, trace 2: token id 300"
    cfg = tiny_cfg(tmp_path / "run", env="lopd-test/Coin-v0", category="all", export=False, tensorboard=False,
                   init_bank=str(source))
    with pytest.raises(BankFileError, match=where):
        Trainer(cfg)
