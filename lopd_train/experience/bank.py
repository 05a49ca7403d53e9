"""The experience bank (dense retrieval over it: :mod:`.retriever`).

The bank stores "task + simplified action-result trace" (``Trace.render()``) of episodes in SQLite: every
insert is one transaction (atomic, durable across ``kill -9``), and a unique key over the env, the task and
the trace text deduplicates. Successes only, unless an insert asks to keep failures (the authors'
``build_memory_bank.py`` keeps every sampled trajectory, flagged). A ``meta`` table holds the bank's
provenance (who built it, from which model, tasks and sampling, and how many rollouts that cost).
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

SCHEMA = """
CREATE TABLE IF NOT EXISTS experiences (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    key TEXT UNIQUE NOT NULL,
    env_id TEXT NOT NULL,
    task_id TEXT NOT NULL,
    task TEXT NOT NULL,
    text TEXT NOT NULL,
    reward REAL NOT NULL,
    rollout INTEGER NOT NULL,
    trace TEXT NOT NULL,
    success INTEGER NOT NULL DEFAULT 1
);
CREATE TABLE IF NOT EXISTS meta (
    name TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
"""
COLUMNS = "id, key, env_id, task_id, task, text, reward, rollout, trace, success"


@dataclass(frozen=True)
class Experience:
    id: int
    key: str
    env_id: str
    task_id: str
    task: str
    text: str
    reward: float
    rollout: int
    trace: str  # Trace.to_json()
    success: bool = True


def experience_key(env_id: str, task_id: str, text: str) -> str:
    return hashlib.sha256(f"{env_id}\x00{task_id}\x00{text}".encode()).hexdigest()


def trace_key(trace) -> str:
    return experience_key(trace.env_id, trace.task_id, trace.render())


class BankFileError(ValueError):
    """A file given as an experience bank that is not one, or whose rows cannot be read back."""


_REQUIRED = ("key", "env_id", "task_id", "task", "text", "reward", "rollout", "trace")


def _open_bank(path: Path) -> tuple[sqlite3.Connection, set[str]]:
    """A read-only connection to a bank file and its ``experiences`` columns; refuses a file that is not a
    bank (not SQLite, or SQLite without the bank's table and columns), which is therefore never modified."""
    if not path.is_file():
        raise BankFileError(f"{path}: {'not a file' if path.exists() else 'no such bank file'}")
    src = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        columns = {r[1] for r in src.execute("PRAGMA table_info(experiences)")}
    except sqlite3.Error as exc:
        src.close()
        raise BankFileError(f"{path} is not an experience bank (SQLite: {exc})") from None
    missing = [c for c in _REQUIRED if c not in columns]
    if missing:
        src.close()
        raise BankFileError(f"{path} is not an experience bank: its 'experiences' table lacks {missing}"
                            if columns else f"{path} is not an experience bank: it has no 'experiences' table")
    return src, columns


def check_bank_file(path: str | Path) -> None:
    """Refuse a file that is not an experience bank (:func:`_open_bank`)."""
    _open_bank(Path(path))[0].close()


def read_bank_file(path: str | Path, vocab: int | None = None) -> tuple[list[tuple], list[tuple]]:
    """Every row of a bank file (the columns ``ExperienceBank.add`` writes, in order) and its meta rows,
    read-only and checked (:func:`read_bank_rows`), so a corrupt bank is refused whole with the row named,
    never merged in part nor discovered later inside a cold start."""
    rows, meta, _ = read_bank_rows(path, vocab)
    return [r[1:] for r in rows], meta


def read_bank_rows(path: str | Path, vocab: int | None = None) -> tuple[list[tuple], list[tuple], int]:
    """A bank file's rows with their ids, its meta rows and its next-id counter, read-only and checked for
    shape and content: each row's fields have their types; its key is the digest of its env, task and text and
    its text the rendering of its trace (an altered row is refused, not silently kept under its old key); its
    trace reads back as a :class:`~lopd_envs.trace.Trace` of the row's env and task; and with ``vocab`` (the
    tokenizer's size) the token ids the trace carries are ids of that tokenizer. Errors name the file and row."""
    from lopd_envs.trace import Trace, TraceError, parse_trace_lines

    path = Path(path)
    src, columns = _open_bank(path)
    try:
        success = "success" if "success" in columns else "1"
        rows = src.execute(f"SELECT id, key, env_id, task_id, task, text, reward, rollout, trace, {success} "
                           "FROM experiences ORDER BY id").fetchall()
        has_meta = src.execute("SELECT name FROM sqlite_master WHERE type='table' AND name='meta'").fetchone()
        meta = src.execute("SELECT name, value FROM meta").fetchall() if has_meta else []
        has_seq = src.execute("SELECT name FROM sqlite_master WHERE type='table' AND name='sqlite_sequence'").fetchone()
        seq = src.execute("SELECT seq FROM sqlite_sequence WHERE name='experiences'").fetchone() if has_seq else None
    except sqlite3.Error as exc:
        raise BankFileError(f"{path}: cannot read the bank (SQLite: {exc})") from None
    finally:
        src.close()
    for row in rows:
        rid, key, env_id, task_id, task, text, reward, rollout, trace, ok = row
        where = f"{path}, experience id {rid}"
        if not all(isinstance(v, str) for v in (key, env_id, task_id, task, text, trace)):
            raise BankFileError(f"{where}: key, env_id, task_id, task, text and trace must be text")
        if isinstance(reward, bool) or not isinstance(reward, (int, float)) or not np.isfinite(reward):
            raise BankFileError(f"{where}: reward {reward!r:.40} is not a finite number")
        if not isinstance(rollout, int) or ok not in (0, 1):
            raise BankFileError(f"{where}: rollout must be an integer and success 0 or 1")
        try:
            t = Trace.from_json(trace)
        except TraceError as exc:
            raise BankFileError(f"{where}: its trace cannot be read ({exc})") from None
        if (t.env_id, t.task_id) != (env_id, task_id):
            raise BankFileError(f"{where}: its trace is of {t.env_id}/{t.task_id}, the row says {env_id}/{task_id}")
        if key != experience_key(env_id, task_id, text):
            raise BankFileError(f"{where}: its key is not the digest of its env, task and text (the row was "
                                "altered after it was written)")
        if text != t.render():
            raise BankFileError(f"{where}: its text is not the rendering of its trace (the row was altered after "
                                "it was written)")
        if vocab is not None:
            check_token_ids(t, vocab, where)
    for name, value in meta:
        if name == "provenance":
            _provenance(value, path)
        elif name == "held_back":
            try:
                held = parse_trace_lines(str(value).splitlines(), f"{path}: held-back successes")
            except TraceError as exc:
                raise BankFileError(str(exc)) from None
            if vocab is not None:
                for i, t in enumerate(held):
                    check_token_ids(t, vocab, f"{path}, held-back success {i + 1}")
    top = max((r[0] for r in rows), default=0)
    return rows, meta, max(int(seq[0]) if seq and isinstance(seq[0], int) else 0, top)


def check_token_ids(trace: Any, vocab: int, where: str) -> None:
    """The token ids a trace carries (``attach_sequence``: what a cold start replays) are ids of a tokenizer of
    ``vocab`` tokens, with an action mask of 0/1 as long: an id outside would crash the cold start's embedding
    lookup far from the file it came from."""
    from lopd_train.rollout.replay import SEQUENCE_KEY

    seq = trace.metadata.get(SEQUENCE_KEY) if isinstance(trace.metadata, dict) else None
    if seq is None:
        return
    ids, mask = (seq.get("ids"), seq.get("mask")) if isinstance(seq, dict) else (None, None)
    if not isinstance(ids, list) or not isinstance(mask, list) or len(ids) != len(mask):
        raise BankFileError(f"{where}: its token sequence must hold lists 'ids' and 'mask' of one length")
    for i, tok in enumerate(ids):
        if isinstance(tok, bool) or not isinstance(tok, int) or not 0 <= tok < vocab:
            raise BankFileError(f"{where}: token id {tok!r:.40} at position {i} is not an id of the tokenizer "
                                f"(0 to {vocab - 1}); the bank was written with another tokenizer or altered")
    if any(m not in (0, 1) or isinstance(m, bool) for m in mask):
        raise BankFileError(f"{where}: its action mask must hold only 0 and 1")


def _provenance(value: Any, path: Path) -> dict[str, Any]:
    try:
        info = json.loads(value)
    except (TypeError, json.JSONDecodeError, RecursionError):
        info = None
    if not isinstance(info, dict):
        raise BankFileError(f"{path}: its provenance is not a JSON object")
    return info


class ExperienceBank:
    """Traces on disk. ``add`` ignores duplicates (and failures unless ``keep_failures``) and returns the new
    rows."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        if self.path.exists() and (not self.path.is_file() or self.path.stat().st_size):
            check_bank_file(self.path)  # never write our tables into some other file, nor half-use a corrupt one
        self._db = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(SCHEMA)
        columns = {r[1] for r in self._db.execute("PRAGMA table_info(experiences)")}
        if "success" not in columns:  # a bank written before failures could be kept: all successes
            self._db.execute("ALTER TABLE experiences ADD COLUMN success INTEGER NOT NULL DEFAULT 1")

    def close(self) -> None:
        self._db.close()

    def __len__(self) -> int:
        return self._db.execute("SELECT COUNT(*) FROM experiences").fetchone()[0]

    def add(self, traces: Iterable[Any], rollout: int = 0, keep_failures: bool = False) -> list[Experience]:
        added = []
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                for trace in traces:
                    if trace is None or not (trace.success or keep_failures):
                        continue
                    text = trace.render()
                    key = experience_key(trace.env_id, trace.task_id, text)
                    cur = self._db.execute(
                        "INSERT OR IGNORE INTO experiences (key, env_id, task_id, task, text, reward, rollout, trace,"
                        " success) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (key, trace.env_id, trace.task_id, trace.task, text, float(trace.reward), int(rollout),
                         trace.to_json(), int(bool(trace.success))))
                    if cur.rowcount and cur.lastrowid is not None:  # a row inserted has its id
                        added.append(self.get(cur.lastrowid))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return added

    def _row(self, row) -> Experience:
        return Experience(*row[:-1], success=bool(row[-1]))

    def get(self, exp_id: int) -> Experience:
        row = self._db.execute(f"SELECT {COLUMNS} FROM experiences WHERE id = ?", (int(exp_id),)).fetchone()
        if row is None:
            raise KeyError(exp_id)
        return self._row(row)

    def get_by_key(self, key: str) -> Experience | None:
        row = self._db.execute(f"SELECT {COLUMNS} FROM experiences WHERE key = ?", (key,)).fetchone()
        return self._row(row) if row else None

    def all(self) -> list[Experience]:
        rows = self._db.execute(f"SELECT {COLUMNS} FROM experiences ORDER BY id").fetchall()
        return [self._row(r) for r in rows]

    # -- provenance: one JSON object, written once by whoever built the bank
    def provenance(self) -> dict[str, Any]:
        row = self._db.execute("SELECT value FROM meta WHERE name = 'provenance'").fetchone()
        return _provenance(row[0], self.path) if row else {}

    def set_provenance(self, info: dict[str, Any]) -> None:
        self.set_meta("provenance", json.dumps(info, sort_keys=True))

    def set_meta(self, name: str, value: str) -> None:
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO meta (name, value) VALUES (?, ?)", (name, value))

    def held_back(self) -> list[Any]:
        """The successes held back when the bank was built (:mod:`lopd_train.experience.build`): never among
        its experiences, scored by the PIG diagnostic."""
        from lopd_envs.trace import parse_trace_lines

        row = self._db.execute("SELECT value FROM meta WHERE name = 'held_back'").fetchone()
        return parse_trace_lines(row[0].splitlines(), f"{self.path}: held-back successes") if row else []

    def snapshot(self, dest: str | Path) -> None:
        """A consistent copy of the bank (SQLite online backup), e.g. into a checkpoint folder, sealed
        (:meth:`seal`): readers of a checkpoint need nothing beside the file and write nothing into the folder."""
        dest_db = sqlite3.connect(str(dest))
        with dest_db:
            self._db.backup(dest_db)
        dest_db.execute("PRAGMA journal_mode=DELETE")
        dest_db.close()

    def seal(self) -> None:
        """Switch the file from the write-ahead log (the live bank's mode: a reader never blocks the writer)
        to a rollback journal. A WAL file cannot be opened by a reader without its ``-shm`` index beside it,
        which SQLite creates, so a bank handed on (``lopd bank build``'s output) could not be read from a
        read-only folder or as a lone copy; a sealed one can. SQLite folds the log into the file first."""
        with self._lock:
            self._db.execute("PRAGMA journal_mode=DELETE")

    def merge_from(self, other: str | Path, vocab: int | None = None) -> int:
        """Insert the experiences of another bank file that this one lacks (by key); returns how many."""
        return self.insert(*read_bank_file(other, vocab))

    def restore_from(self, snapshot: str | Path, vocab: int | None = None) -> int:
        """Make this bank exactly the bank file ``snapshot`` (a checkpoint's): its rows under their ids, its
        meta, and its next id, in one transaction; returns its size. A resumed run must not keep what the
        live bank gained after the checkpoint: the steps after it run again and add their experiences again,
        under the ids the uninterrupted run gave them."""
        rows, meta, seq = read_bank_rows(snapshot, vocab)
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.execute("DELETE FROM experiences")
                self._db.execute("DELETE FROM meta")
                self._db.executemany("INSERT INTO experiences (id, key, env_id, task_id, task, text, reward, rollout, "
                                     "trace, success) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
                self._db.executemany("INSERT INTO meta (name, value) VALUES (?, ?)", meta)
                self._db.execute("DELETE FROM sqlite_sequence WHERE name = 'experiences'")
                self._db.execute("INSERT INTO sqlite_sequence (name, seq) VALUES ('experiences', ?)", (seq,))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return len(rows)

    def insert(self, rows: Sequence[tuple], meta: Sequence[tuple]) -> int:
        """Insert rows and meta as :func:`read_bank_file` returns them (those this bank lacks, by key) in one
        transaction; returns how many experiences were new."""
        with self._lock:
            before = len(self)
            self._db.execute("BEGIN IMMEDIATE")
            self._db.executemany("INSERT OR IGNORE INTO experiences (key, env_id, task_id, task, text, reward, "
                                 "rollout, trace, success) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
            self._db.executemany("INSERT OR IGNORE INTO meta (name, value) VALUES (?, ?)", meta)
            self._db.execute("COMMIT")
            return len(self) - before


def trace_json(trace) -> str:
    return json.dumps(trace.to_dict(), ensure_ascii=False, sort_keys=True)
