"""The one reader of benchmark data files (JSON Lines, gzip-compressed or not, and whole-file JSON).

Why one reader: a benchmark file that is empty, cut short, garbled or missing a field must fail with ONE
error that names the file (and the line), whichever suite reads it. Left to each suite, the same corrupt
file surfaces as a ``KeyError: 'function'`` three calls deep, an ``EOFError`` from gzip, or, worst, as a
task silently built from less data than the benchmark has. Every suite's data module reads through here
and adds only what its own format needs (the fields each row must have, how files pair).
"""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

GZIP_MAGIC = b"\x1f\x8b"

# what a field must hold: one type or several (as ``isinstance`` takes them)
FieldTypes = Mapping[str, "type | tuple[type, ...]"]
RowCheck = Callable[[dict], "str | None"]  # returns why a row is unusable, or None


class DataFileError(ValueError):
    """A data file is unusable. ``path`` and ``line`` (1-based, None for a whole-file problem) locate it;
    the message reads ``<path>:<line>: <problem>`` so editors and terminals can jump there."""

    def __init__(self, path: str | Path, problem: str, line: int | None = None):
        self.path, self.line, self.problem = Path(path), line, problem
        where = f"{path}:{line}" if line is not None else f"{path}"
        super().__init__(f"{where}: {problem}")


def _is_gzip(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(2) == GZIP_MAGIC
    except OSError as exc:  # a folder, no permission, a dangling link: still one error naming the file
        raise DataFileError(path, f"cannot be read ({exc.strerror or exc})") from None


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """Numbered text lines of a plain or gzip file (by content, not name: a ``.gz`` that is not gzip is
    reported as such). Decompression and decoding errors become :class:`DataFileError`."""
    gz = _is_gzip(path)
    if path.suffix == ".gz" and not gz:
        raise DataFileError(path, "named .gz but is not a gzip file")
    number = 0
    try:  # bytes per line, decoded line by line, so a decoding error has its exact line number
        with (gzip.open(path, "rb") if gz else open(path, "rb")) as f:
            for number, raw in enumerate(f, 1):
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise DataFileError(path, f"not UTF-8 text ({exc.reason} at byte {exc.start} of the line)",
                                        number) from None
                yield number, line
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise DataFileError(path, f"truncated or corrupt gzip data after line {number} ({exc})") from None


def _row_problem(row: Any, fields: FieldTypes, check: RowCheck | None) -> str | None:
    if not isinstance(row, dict):
        return f"a row must be a JSON object, got {type(row).__name__}"
    for name, kind in fields.items():
        if name not in row:
            return f"row lacks the field {name!r}"
        if not isinstance(row[name], kind):
            wanted = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
            return f"field {name!r} must be {wanted}, got {type(row[name]).__name__}"
    return check(row) if check is not None else None


def iter_jsonl(path: str | Path, fields: FieldTypes | None = None, check: RowCheck | None = None,
               ) -> Iterator[tuple[int, dict]]:
    """``(line number, row)`` for each non-blank line, each row a JSON object holding ``fields`` (name →
    type) and passing ``check``; the first bad line raises :class:`DataFileError` with its number."""
    path = Path(path)
    for number, line in _lines(path):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except (ValueError, RecursionError) as exc:  # JSONDecodeError, the int digit limit, deep nesting
            detail = exc.msg if isinstance(exc, json.JSONDecodeError) else f"{type(exc).__name__}: {exc}"
            cut = " (the file may be truncated)" if not line.endswith("\n") else ""
            raise DataFileError(path, f"corrupt JSON line: {detail}{cut}", number) from None
        problem = _row_problem(row, fields or {}, check)
        if problem:
            raise DataFileError(path, problem, number)
        yield number, row


def read_jsonl(path: str | Path, fields: FieldTypes | None = None, check: RowCheck | None = None,
               allow_empty: bool = False) -> list[dict]:
    """All rows of a JSON Lines file (see :func:`iter_jsonl`). A file without rows is an error unless
    ``allow_empty``: no benchmark ships an empty file, so an empty one is a failed copy or download."""
    rows = [row for _, row in iter_jsonl(path, fields, check)]
    if not rows and not allow_empty:
        raise DataFileError(path, "the file holds no rows (empty or blank)")
    return rows


def read_json(path: str | Path) -> Any:
    """A whole-file JSON document; a syntax error names its line."""
    path = Path(path)
    text = "".join(line for _, line in _lines(path))
    if not text.strip():
        raise DataFileError(path, "the file is empty")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataFileError(path, f"corrupt JSON: {exc.msg} (column {exc.colno})", exc.lineno) from None
    except (ValueError, RecursionError) as exc:
        raise DataFileError(path, f"corrupt JSON: {type(exc).__name__}: {exc}") from None


def line_numbers(path: str | Path) -> list[int]:
    """The line number of each row of a JSON Lines file (blank lines skipped), for errors about row N."""
    return [number for number, line in _lines(Path(path)) if line.strip()]


def check_unique(rows: Sequence[dict], path: str | Path, key: str = "id") -> None:
    """Ids must be unique within a file: a repeated one would make two tasks answer to one id (and an
    answer file's later row silently replace the earlier). The repeat is named with its line."""
    seen: set[Any] = set()
    for i, row in enumerate(rows):
        if row[key] in seen:
            line = line_numbers(path)[i]
            raise DataFileError(path, f"{key} {row[key]!r} appears twice (again here)", line)
        seen.add(row[key])


def pair_by_key(left: Sequence[dict], left_path: str | Path, right: Sequence[dict], right_path: str | Path,
                key: str = "id") -> list[tuple[dict, dict]]:
    """Rows of two files that must correspond one to one, in order, by ``key`` (questions and their
    answers). The first row that does not pair is named in both files, with its line."""
    for i in range(max(len(left), len(right))):
        a = left[i][key] if i < len(left) else None
        b = right[i][key] if i < len(right) else None
        if a != b:
            ln_left, ln_right = line_numbers(left_path), line_numbers(right_path)
            at_left = f"{left_path}:{ln_left[i]}" if i < len(ln_left) else f"{left_path} (ends after {len(left)} rows)"
            at_right = f"{right_path}:{ln_right[i]}" if i < len(ln_right) else f"{right_path} (ends after {len(right)} rows)"
            raise DataFileError(left_path, f"row {i + 1} does not pair with its counterpart: {key} {a!r} at "
                                           f"{at_left}, {key} {b!r} at {at_right} ({len(left)} rows against "
                                           f"{len(right)})")
    return list(zip(left, right))
