"""Which data an env actually loaded: every env sets ``provenance`` when it loads its tasks, and training runs
and evaluations write it next to their results, so a number can always be traced to the exact files behind
it (the official release, a pre-release standing in for it, or lopd's own bundled data chosen by name).

    env = gym.make("lopd/BFCLv3-v0", category="simple")
    lopd_envs.provenance.of(env)   # {"benchmark": "BFCL-v3", "source": "official", "version": ..., "files": [...]}
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: ``source`` values: the benchmark's own files; a local file standing in for the release (MBPP+'s
#: pre-release); lopd's bundled sample problems; lopd's own environments in the benchmark's format; a file
#: the user named through the benchmark's own override variable (evalplus's ``HUMANEVAL_OVERRIDE_PATH``).
SOURCES = ("official", "stand-in", "bundled", "ours", "override")

_hashes: dict[tuple[str, int, int], str] = {}
_lock = threading.Lock()


def file_sha256(path: Path) -> str:
    """sha256 of a file, computed once per (path, size, mtime) in this process: release files can be
    gigabytes and many envs are made from the same ones."""
    stat = path.stat()
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    with _lock:
        if key in _hashes:
            return _hashes[key]
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    with _lock:
        _hashes[key] = digest.hexdigest()
    return _hashes[key]


@dataclass(frozen=True)
class Provenance:
    """``benchmark``: its name; ``source``: one of :data:`SOURCES`; ``version``: the release, wheel or
    commit the files belong to; ``origin``: where they were found (a folder, a hub repository);
    ``files``: the files read (hashed only when :meth:`to_dict` is called)."""

    benchmark: str
    source: str
    version: str
    origin: str = ""
    files: Sequence[Path] = field(default_factory=tuple)  # stored as a tuple, duplicates dropped

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise ValueError(f"provenance source must be one of {SOURCES}, got {self.source!r}")
        object.__setattr__(self, "files", tuple(dict.fromkeys(Path(f) for f in self.files)))

    def to_dict(self, hashes: bool = True) -> dict[str, Any]:
        """A JSON-ready record; with ``hashes``, each file's size and sha256."""
        files = [{"path": str(f), "bytes": f.stat().st_size, "sha256": file_sha256(f)} if hashes
                 else {"path": str(f)} for f in self.files]
        return {"benchmark": self.benchmark, "source": self.source, "version": self.version,
                "origin": self.origin, "files": files}


def of(env: Any, hashes: bool = True) -> dict[str, Any]:
    """The provenance record of an env (wrapped or not). Every lopd env has one after construction."""
    record: Provenance | None = getattr(getattr(env, "unwrapped", env), "provenance", None)
    if record is None:
        raise AttributeError(f"{type(getattr(env, 'unwrapped', env)).__name__} records no data provenance")
    return record.to_dict(hashes)

