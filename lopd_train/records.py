"""``records.jsonl``: one JSON line per task and sample, append-only and durable.

A record whose ``error`` is set (the server's reply was unusable) is not a score: ``--resume`` runs it
again and :func:`settled` keeps the newer record. Each record is written whole, flushed and fsynced before the next, so a ``kill -9`` loses at most the line
being written. Reading for ``--resume`` keeps every complete line and cuts a torn last line off the file
(otherwise the next append would glue a new record onto the fragment and corrupt both).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Self


def record_key(record: dict[str, Any]) -> tuple[str, str, int]:
    return (record["env"], record["task_id"], int(record["sample"]))


def settled(records: Iterable[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The last record written for each (env, task, sample), split into those the model earned and those a
    server error cut short (``error`` set): a resumed run writes a retried record again, after its error."""
    last: dict[tuple[str, str, int], dict[str, Any]] = {}
    for r in records:
        last.pop(record_key(r), None)  # re-insert, so the order is the order of the settling writes
        last[record_key(r)] = r
    good = [r for r in last.values() if not r.get("error")]
    return good, [r for r in last.values() if r.get("error")]


class RecordsError(ValueError):
    """A JSONL file of records (evaluation records, a run's metrics or points) damaged before its last line."""


def read_records(path: Path, repair: bool = False) -> list[dict[str, Any]]:
    """Every complete record in ``path`` (none if it does not exist). A last line without its newline, or
    one that is not JSON, is a torn write: it is ignored, and with ``repair`` truncated off the file. A
    bad line before the last is corruption, not a crash, and raises."""
    path = Path(path)
    if not path.exists():
        return []
    data = path.read_bytes()
    out, pos = [], 0
    while pos < len(data):
        end = data.find(b"\n", pos)
        line = data[pos:] if end < 0 else data[pos:end]
        try:
            record = json.loads(line) if end >= 0 else None
        except (ValueError, RecursionError):
            record = None
        if not isinstance(record, dict):  # every record is a JSON object; anything else is damage
            record = None
        if record is None:
            rest = data[end + 1:] if end >= 0 else b""
            if rest.strip():
                raise RecordsError(f"{path}: line {len(out) + 1} is not a JSON record (and is not the last line)")
            if repair:
                with open(path, "r+b") as fh:
                    fh.truncate(pos)
                    fh.flush()
                    os.fsync(fh.fileno())
            break
        out.append(record)
        pos = end + 1
    return out


class RecordWriter:
    """Append records durably (one ``write`` of the whole line, then flush and fsync)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fh = open(self.path, "ab")  # noqa: SIM115 - held until close()

    def write(self, record: dict[str, Any]) -> None:
        self.fh.write((json.dumps(record, ensure_ascii=False, default=str) + "\n").encode())
        self.fh.flush()
        os.fsync(self.fh.fileno())

    def write_all(self, records: Iterable[dict[str, Any]]) -> None:
        for r in records:
            self.write(r)

    def close(self) -> None:
        self.fh.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
