"""Files read back into a run (a reference bank, a bank to seed from, a JSONL of traces, held-back successes,
a resumed run's config.json) may be corrupt, hand-edited or simply the wrong file. Each is refused whole with
an error that names the file and the row or line, the wrong file is never modified, and nothing is merged in
part; ``lopd-train`` says it in one line, not a traceback."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

import tests.coin_env  # noqa: F401  (registers lopd-test/Coin-v0)
from lopd_envs.trace import Trace, TraceError, read_traces
from lopd_train.experience.bank import BankFileError, ExperienceBank, read_bank_file
from lopd_train.experience.modes import copy_bank, seed_bank


def trace(task_id: str = "t0", text: str = "a") -> Trace:
    tr = Trace(env_id="e", task_id=task_id, task="x", reward=1.0, success=True)
    tr.add({"name": "answer", "arguments": {"text": text}})
    return tr


def built_bank(path: Path, *traces: Trace, provenance: bool = True) -> Path:
    bank = ExperienceBank(path)
    bank.add(list(traces) or [trace()])
    if provenance:
        bank.set_provenance({"built_by": "lopd bank build"})
    bank.close()
    return path


def corrupt_row(path: Path, column: str, value) -> None:
    db = sqlite3.connect(path)
    db.execute(f"UPDATE experiences SET {column} = ? WHERE id = (SELECT MAX(id) FROM experiences)", (value,))
    db.commit()
    db.close()


def test_a_file_that_is_not_a_bank_is_refused_and_left_as_it_was(tmp_path):
    junk = tmp_path / "notes.sqlite"
    junk.write_bytes(b"not a database at all\n" * 100)
    other = tmp_path / "other.sqlite"  # SQLite, but some other program's
    db = sqlite3.connect(other)
    db.execute("CREATE TABLE songs (title TEXT)")
    db.commit()
    db.close()
    before = {p: p.read_bytes() for p in (junk, other)}
    for path in (junk, other):
        with pytest.raises(BankFileError, match="not an experience bank"):
            ExperienceBank(path)
        with pytest.raises(BankFileError, match="not an experience bank"):
            ExperienceBank(tmp_path / "run.sqlite").merge_from(path)
        with pytest.raises(BankFileError, match="not an experience bank"):
            copy_bank(ExperienceBank(tmp_path / "run2.sqlite"), str(path))
    assert {p: p.read_bytes() for p in (junk, other)} == before
    assert len(ExperienceBank(tmp_path / "run.sqlite")) == 0


@pytest.mark.parametrize("column, value, match", [
    ("trace", "{not json", "trace cannot be read"),
    ("trace", json.dumps({"env_id": "e", "task_id": "t1", "task": "x", "steps": "oops"}), "'steps' must be a list"),
    ("trace", json.dumps({"env_id": "e", "task_id": "elsewhere", "task": "x"}), "the row says"),
    ("trace", "[" * 100_000, "trace cannot be read"),
    ("reward", "high", "not a finite number"),
    ("task", None, "must be text"),
    ("task", b"\x00\xff", "must be text"),
])
def test_a_corrupt_row_refuses_the_whole_bank_naming_the_row(tmp_path, column, value, match):
    src = built_bank(tmp_path / "ref.sqlite", trace("t0"), trace("t1", "b"))
    if column == "task" and value is None:  # NOT NULL in our schema: a bank written by something else
        db = sqlite3.connect(src)
        db.executescript("ALTER TABLE experiences RENAME TO old; CREATE TABLE experiences AS SELECT * FROM old;"
                         "DROP TABLE old;")
        db.commit()
        db.close()
    corrupt_row(src, column, value)
    run = ExperienceBank(tmp_path / "run.sqlite")
    with pytest.raises(BankFileError, match=match) as err:
        copy_bank(run, str(src))
    assert "experience id 2" in str(err.value) and str(src) in str(err.value)
    with pytest.raises(BankFileError, match=match):
        run.merge_from(src)
    assert len(run) == 0  # nothing merged in part


def test_provenance_that_is_not_a_json_object_is_refused(tmp_path):
    src = built_bank(tmp_path / "ref.sqlite")
    db = sqlite3.connect(src)
    db.execute("UPDATE meta SET value = '[1, 2' WHERE name = 'provenance'")
    db.commit()
    db.close()
    with pytest.raises(BankFileError, match="provenance is not a JSON object"):
        read_bank_file(src)
    with pytest.raises(BankFileError, match="provenance"):
        ExperienceBank(src).provenance()


def test_a_good_bank_reads_back_whole(tmp_path):
    src = built_bank(tmp_path / "ref.sqlite", trace("t0"), trace("t1", "b"))
    rows, meta = read_bank_file(src)
    assert [Trace.from_json(r[7]) for r in rows] == [trace("t0"), trace("t1", "b")]
    assert dict(meta)["provenance"] == json.dumps({"built_by": "lopd bank build"})
    run = ExperienceBank(tmp_path / "run.sqlite")
    assert copy_bank(run, str(src)) == 2 and [e.task_id for e in run.all()] == ["t0", "t1"]


@pytest.mark.parametrize("line, match", [
    ("{oops", "not JSON"),
    ("[1, 2]", "a trace is a JSON object"),
    (json.dumps({"env_id": "e", "task_id": 3, "task": "x"}), "'task_id' must be a string"),
    (json.dumps({"env_id": "e", "task_id": "t", "task": "x", "reward": "1"}), "'reward' must be a number"),
    ('{"env_id": "e", "task_id": "t", "task": "x", "reward": NaN}', "'reward' must be a number"),
    (json.dumps({"env_id": "e", "task_id": "t", "task": "x", "success": "yes"}), "'success' must be true or false"),
    (json.dumps({"env_id": "e", "task_id": "t", "task": "x", "steps": [{"action": "call"}]}), "trace step 0"),
    (json.dumps({"env_id": "e", "task_id": "t", "task": "x", "steps": [{"action": {}, "extra": 1}]}), "trace step 0"),
    (json.dumps({"env_id": "e", "task_id": "t", "task": "x", "password": "x"}), "unknown trace field"),
    ("[" * 100_000, "not JSON"),
])
def test_a_bad_line_in_a_jsonl_of_traces_names_the_file_and_line_and_seeds_nothing(tmp_path, line, match):
    path = tmp_path / "traces.jsonl"
    path.write_text(trace("t0").to_json() + "\n\n" + line + "\n")
    with pytest.raises(TraceError, match=match) as err:
        read_traces(path)
    assert f"{path}, line 3" in str(err.value)
    bank = ExperienceBank(tmp_path / "run.sqlite")
    with pytest.raises(TraceError):
        seed_bank(bank, str(path))
    assert len(bank) == 0


def test_a_binary_file_given_as_traces_is_a_trace_error(tmp_path):
    path = tmp_path / "traces.jsonl"
    path.write_bytes(trace().to_json().encode() + b"\n\xff\xfe\x00\n")
    with pytest.raises(TraceError, match="line 2"):
        read_traces(path)


def test_lopd_train_says_what_is_wrong_with_an_input_file_in_one_line(tmp_path, capsys):
    from lopd_train.cli import train_main

    junk = tmp_path / "bank.sqlite"
    junk.write_text("hello")
    base = ["--model", "tiny-random", "--env", "lopd-test/Coin-v0", "--category", "all", "--steps", "1",
            "--no-progress", "--algo", "lopd"]
    with pytest.raises(SystemExit) as exit_:
        train_main([*base, "--bank", str(junk), "--output-dir", str(tmp_path / "run")])
    assert str(exit_.value).startswith("lopd-train: ") and "not an experience bank" in str(exit_.value)
    bad_jsonl = tmp_path / "seed.jsonl"
    bad_jsonl.write_text("{broken\n")
    with pytest.raises(SystemExit) as exit_:
        train_main([*base, "--bank-mode", "dynamic", "--init-bank", str(bad_jsonl), "--allow-empty-cold-start",
                    "--output-dir", str(tmp_path / "run2")])
    assert "seed.jsonl, line 1: not JSON" in str(exit_.value)
    run3 = tmp_path / "run3"
    run3.mkdir()
    (run3 / "config.json").write_text("{truncated")
    with pytest.raises(SystemExit) as exit_:
        train_main(["--resume", "--output-dir", str(run3)])
    assert "config.json is not readable JSON" in str(exit_.value)


def test_a_folder_or_a_missing_file_given_as_a_bank_is_named_as_such(tmp_path):
    with pytest.raises(BankFileError, match="not a file"):
        ExperienceBank(tmp_path)
    with pytest.raises(BankFileError, match="not a file"):
        read_bank_file(tmp_path)
    with pytest.raises(BankFileError, match="no such bank file"):
        read_bank_file(tmp_path / "missing.sqlite")
    assert not (tmp_path / "missing.sqlite").exists()


def test_lopd_train_names_a_damaged_metrics_row_on_resume_in_one_line(tmp_path):
    from lopd_train.cli import train_main

    out = tmp_path / "run"
    argv = ["--model", "tiny-random", "--env", "lopd-test/Coin-v0", "--category", "all", "--algo", "grpo",
            "--steps", "1", "--tasks-per-step", "2", "--group-size", "2", "--max-new-tokens", "8", "--lora-r", "4",
            "--lora-alpha", "8", "--no-progress", "--no-export", "--output-dir", str(out)]
    assert train_main(argv) == 0
    rows = (out / "metrics.jsonl").read_text().splitlines()
    (out / "metrics.jsonl").write_text("\n".join(["[1, 2]", *rows]) + "\n")
    with pytest.raises(SystemExit) as exit_:
        train_main([*argv, "--steps", "2", "--resume"])  # the later --steps wins
    assert str(exit_.value).startswith("lopd-train: ") and "metrics.jsonl: line 1 is not a JSON record" in str(exit_.value)


def test_corrupt_held_back_successes_refuse_the_bank_naming_the_line(tmp_path):
    src = built_bank(tmp_path / "ref.sqlite")
    bank = ExperienceBank(src)
    bank.set_meta("held_back", trace("t1").to_json() + "\n{broken\n")
    bank.close()
    with pytest.raises(BankFileError, match="held-back successes, line 2: not JSON"):
        copy_bank(ExperienceBank(tmp_path / "run.sqlite"), str(src))


def test_a_snapshot_is_sealed_so_reading_it_writes_nothing_beside_it(tmp_path):
    """A checkpoint's bank (and ``lopd bank build``'s output, ``tests/test_reference_bank.py``) is a lone file
    in rollback-journal mode: reading it creates no ``-wal``/``-shm`` files in the folder, so it can be read
    from a read-only folder or copied alone. A live bank stays in WAL mode."""
    live = ExperienceBank(tmp_path / "live.sqlite")
    live.add([trace("t0"), trace("t1", "b")])
    folder = tmp_path / "checkpoint"
    folder.mkdir()
    live.snapshot(folder / "bank.sqlite")
    assert live._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    live.close()
    db = sqlite3.connect(folder / "bank.sqlite")
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    db.close()
    rows, _ = read_bank_file(folder / "bank.sqlite")
    assert len(rows) == 2 and sorted(p.name for p in folder.iterdir()) == ["bank.sqlite"]
