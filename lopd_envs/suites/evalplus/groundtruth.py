"""Expected outputs of HumanEval+ / MBPP+ (evalplus's ``get_groundtruth``): each canonical solution is
run once in the sandbox, timed per input, and the outputs are cached on disk, keyed by the dataset file's
hash and the sandbox's Python version (outputs and times depend on both).

Why the on-disk form is two files per task: some tasks' expected outputs are huge (HumanEval/130 and /15:
124 and 147 MB of JSON, ~1 GB and 5-15 s once parsed into Python objects), yet most answers never need
them (no code, code that fails to load, a wrong first output). So ``<task>.json`` holds only what every
run needs (per-input canonical times, errors, and the byte offset of each output), and
``<task>.outputs.jsonl`` one encoded output per line, decoded one at a time when the judge compares it
(:class:`StoredOutputs`): memory is bounded by the largest single output (plus the small groups, up to
1 MiB encoded each, which stay decoded once read), and time by the outputs that are actually compared. Caches of the earlier one-file format (v2) are converted once when found.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lopd_envs import assets
from lopd_envs.codeexec import valuecodec
from lopd_envs.codeexec.functest import Group, run_function_tests
from lopd_envs.sandbox import Sandbox
from lopd_envs.suites.evalplus.data import file_digest

GROUNDTRUTH_VERSION = "3"
LEGACY_VERSIONS = ("2",)  # one JSON file per task holding every output: converted on first use
#: value codec tags whose values are not equal whenever their encodings are (see StoredOutputs.encoded)
UNEQUAL_TAGS = (b'"$":"opaque"', b'"$":"ndarray"', b'"$":"npscalar"')
INLINE_BYTES = 1 << 20  # expected outputs up to this size (encoded) are compared as records stream in
#: expected outputs at least this big (encoded) are also kept as a digest (``valuecodec.digest``): a result
#: with the same digest is recognised without being encoded, sent or read (HumanEval/130, /15, /100 ...)
DIGEST_BYTES = 64 << 10
#: tags of buffer objects: every buffer marshals as ``bytes``, so their digests are not kept
BUFFER_TAGS = (b'"$":"bytes"', b'"$":"bytearray"')
KEPT_BYTES = 1 << 20  # a group whose outputs together are this small is kept decoded (see StoredOutputs)


class StoredOutputs(Sequence[Any]):
    """One group's expected outputs in an outputs file, each read by its byte offset only when indexed and
    not kept (the judge compares each input once: the streaming check's results are reused by the final
    verdict), so an oracle held for the whole process costs its offsets only.

    Except small groups (all outputs together within :data:`KEPT_BYTES` encoded, 158 of HumanEval+'s 164
    tasks): their bytes are read in one go on first use, and each output, decoded when first indexed, is
    kept. Every solution judged on the task compares them again, and opening the file for each output
    was the scorer's largest cost per test."""

    def __init__(self, path: Path, offsets: list[int], ends: list[int], floats: Sequence[int] | None = None,
                 digests: dict[str, str] | None = None):
        self.path, self.offsets, self.ends = path, offsets, ends
        self.floats = None if floats is None else frozenset(floats)  # outputs evalplus's is_floats holds for
        #: the big outputs' digests (see :data:`DIGEST_BYTES`); None: not computed yet for this cache
        self.digests = None if digests is None else {int(i): d for i, d in digests.items()}
        self._block: bytes | None = None
        self._kept: dict[int, Any] = {}
        self._encoded: dict[int, bytes | None] = {}
        self._lock = threading.Lock()

    def encoded(self, i: int) -> bytes | None:
        """Output ``i``'s stored bytes (its ``valuecodec.dumps``), for recognising an equal result without
        parsing it (:attr:`Group.expected_json`); None where equal bytes would not mean a passing
        comparison (NaN is unequal to itself; opaque values equal nothing; numpy compares element-wise)
        or where evalplus's float rule needs the value and the index does not record it."""
        if not 0 <= i < len(self.offsets) or self.floats is None:
            return None
        if i in self._encoded:
            return self._encoded[i]
        small = self.ends[-1] - self.offsets[0] <= KEPT_BYTES
        if small:
            base = self.offsets[0]
            data = self._small_block()[self.offsets[i] - base:self.ends[i] - base]
        else:
            data = self.raw(i)
        kept = small or len(data) < DIGEST_BYTES  # every solution of the task asks again; big ones are read again
        data = data[:-1] if data.endswith(b"\n") and equal_when_identical(data) else None
        if kept:
            self._encoded[i] = data
        return data

    def _small(self, i: int) -> tuple[bool, Any]:
        """``(True, output i)`` for a small group, ``(False, None)`` otherwise."""
        if not self.offsets or self.ends[-1] - self.offsets[0] > KEPT_BYTES:
            return False, None
        if i in self._kept:
            return True, self._kept[i]
        block, base = self._small_block(), self.offsets[0]
        value = valuecodec.loads(block[self.offsets[i] - base:self.ends[i] - base].decode("utf-8"))
        with self._lock:
            self._kept[i] = value
        return True, value

    def _small_block(self) -> bytes:
        """A small group's outputs file bytes, read once."""
        with self._lock:
            if self._block is None:
                with open(self.path, "rb") as f:
                    f.seek(self.offsets[0])
                    self._block = f.read(self.ends[-1] - self.offsets[0])
            return self._block

    def raw(self, i: int) -> bytes:
        """Output ``i``'s line as stored."""
        with open(self.path, "rb") as f:
            f.seek(self.offsets[i])
            return f.read(self.ends[i] - self.offsets[i])

    def encoded_size(self, i: int) -> int:
        """Bytes of output ``i`` as stored: what decoding it will cost, known without reading it."""
        return self.ends[i] - self.offsets[i]

    def __len__(self) -> int:
        return len(self.offsets)

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if -len(self) <= i < len(self):
            small, value = self._small(i % len(self))
            if small:
                return value
        with open(self.path, "rb") as f:
            f.seek(self.offsets[i])  # an index out of range raises IndexError here, as a list would
            return valuecodec.loads(f.readline().decode("utf-8"))


def equal_when_identical(encoded: bytes) -> bool:
    """Whether two values with these same encoded bytes always compare equal: no NaN (unequal to itself),
    no opaque value (equal to nothing), no numpy value (compared element-wise)."""
    return b"NaN" not in encoded and not any(tag in encoded for tag in UNEQUAL_TAGS)


def output_digest(value: Any, encoded: bytes) -> str | None:
    """The digest kept for an expected output (``encoded``: its stored bytes), or None: a small output, one
    whose equality is not identity (see :func:`equal_when_identical`), or one holding a buffer."""
    if len(encoded) < DIGEST_BYTES or not equal_when_identical(encoded) or any(t in encoded for t in BUFFER_TAGS):
        return None
    return valuecodec.digest(value)


@dataclass
class Oracle:
    """Expected outputs and canonical per-input times of one task (evalplus's ``get_groundtruth``).
    ``base``/``plus`` are sequences: lists when just computed, :class:`StoredOutputs` when read back."""

    base: Sequence[Any]
    base_time: list[float]
    plus: Sequence[Any]
    plus_time: list[float]
    errors: dict[str, str] = field(default_factory=dict)  # group -> why its expected outputs are missing

    @property
    def error(self) -> str | None:
        return "; ".join(f"{g}: {e}" for g, e in self.errors.items()) or None

    def expected_json(self, group: str) -> Callable[[int], bytes | None] | None:
        """What :attr:`Group.expected_json` gets for ``group``: the stored bytes of each output, when the
        outputs are on disk (a just-computed oracle has values only, and no bytes to compare against)."""
        outputs = getattr(self, group)
        return outputs.encoded if isinstance(outputs, StoredOutputs) else None

    def expected_digests(self, group: str) -> dict[int, str] | None:
        """What :attr:`Group.digests` gets for ``group``: the big outputs' digests, when on disk."""
        outputs = getattr(self, group)
        return outputs.digests if isinstance(outputs, StoredOutputs) else None

    def is_floats(self, group: str, i: int) -> bool:
        """evalplus's ``is_floats`` of expected output ``i``, from the index where it is kept."""
        outputs = getattr(self, group)
        if isinstance(outputs, StoredOutputs) and outputs.floats is not None:
            return i in outputs.floats
        from evalplus.eval import is_floats

        return is_floats(outputs[i])

    def cheap(self, group: str, i: int) -> bool:
        """Whether expected output ``i`` of ``group`` can be had at once (in memory, or small on disk). The
        streaming check compares only these while the candidate's records arrive: decoding a 12 MB output
        there would stall reading the sandbox's pipe, and the candidate's clock runs meanwhile. Bigger
        ones are compared after the run, one at a time."""
        outputs = getattr(self, group)
        return not isinstance(outputs, StoredOutputs) or outputs.encoded_size(i) <= INLINE_BYTES


def write_oracle(meta: Path, oracle: Oracle) -> None:
    """The two-file form of ``oracle``: outputs first, then the small index (written last, atomically, so
    an index on disk always describes a complete outputs file)."""
    outputs = meta.with_name(meta.stem + ".outputs.jsonl")
    tag = f".tmp{os.getpid()}.{threading.get_ident()}"
    offsets: dict[str, list[int]] = {"base": [], "plus": []}
    digests: dict[str, Any] = {"scheme": valuecodec.DIGEST_SCHEME, "base": {}, "plus": {}}
    tmp_out = outputs.with_name(outputs.name + tag)
    with open(tmp_out, "wb") as f:
        for name in ("base", "plus"):
            for i, value in enumerate(getattr(oracle, name)):
                offsets[name].append(f.tell())
                line = valuecodec.dumps(value).encode("utf-8") + b"\n"
                f.write(line)
                kept = output_digest(value, line)
                if kept is not None:
                    digests[name][str(i)] = kept
        size = f.tell()
    os.replace(tmp_out, outputs)
    write_index(meta, {"base_time": oracle.base_time, "plus_time": oracle.plus_time, "errors": oracle.errors,
                       "offsets": offsets, "outputs": outputs.name, "outputs_size": size,
                       "floats": float_indices(oracle), "digests": digests})


def write_index(meta: Path, index: dict) -> None:
    tmp_meta = meta.with_name(meta.name + f".tmp{os.getpid()}.{threading.get_ident()}")
    tmp_meta.write_text(json.dumps(index))
    os.replace(tmp_meta, meta)


def float_indices(oracle: Oracle) -> dict[str, list[int]]:
    """Per group, the outputs that evalplus's ``is_floats`` holds for (they switch its comparison to a
    tolerance). Kept in the index so a result recognised by its bytes needs no decoding of either side."""
    from evalplus.eval import is_floats

    return {name: [i for i in range(len(getattr(oracle, name))) if is_floats(getattr(oracle, name)[i])]
            for name in ("base", "plus")}


def add_digests(meta: Path, oracle: Oracle) -> Oracle:
    """An index written before it kept digests (or with another scheme): the big outputs' digests computed
    once, each output decoded in turn (memory: the largest one), and saved."""
    digests: dict[str, Any] = {"scheme": valuecodec.DIGEST_SCHEME}
    for name in ("base", "plus"):
        outputs, digests[name] = getattr(oracle, name), {}
        for i in range(len(outputs)):
            if outputs.encoded_size(i) >= DIGEST_BYTES:
                line = outputs.raw(i)
                kept = output_digest(valuecodec.loads(line.decode("utf-8")), line)
                if kept is not None:
                    digests[name][str(i)] = kept
    try:
        index = json.loads(meta.read_text())
        index["digests"] = digests
        write_index(meta, index)
    except (OSError, ValueError):
        return oracle
    return read_oracle(meta) or oracle


def add_float_indices(meta: Path, oracle: Oracle) -> Oracle:
    """An index written before it kept ``floats``: computed once (each output decoded in turn) and saved."""
    try:
        index = json.loads(meta.read_text())
        index["floats"] = float_indices(oracle)
        write_index(meta, index)
    except (OSError, ValueError):
        return oracle
    return read_oracle(meta) or oracle


def read_oracle(meta: Path) -> Oracle | None:
    """An :class:`Oracle` whose outputs stay on disk, or None when the files are missing or do not agree."""
    try:
        index = json.loads(meta.read_text())
        outputs = meta.with_name(index["outputs"])
        if outputs.stat().st_size != index["outputs_size"]:
            return None
        offsets = index["offsets"]
        if len(offsets["base"]) != len(index["base_time"]) or len(offsets["plus"]) != len(index["plus_time"]):
            return None
        starts = offsets["base"] + offsets["plus"]
        ends = [*starts[1:], index["outputs_size"]]
        nb = len(offsets["base"])
        floats = index.get("floats") or {}
        digests = index.get("digests") or {}
        if digests.get("scheme") != valuecodec.DIGEST_SCHEME:
            digests = {}
        return Oracle(StoredOutputs(outputs, offsets["base"], ends[:nb], floats.get("base"), digests.get("base")),
                      index["base_time"],
                      StoredOutputs(outputs, offsets["plus"], ends[nb:], floats.get("plus"), digests.get("plus")),
                      index["plus_time"], index.get("errors", {}))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def read_legacy(path: Path) -> Oracle | None:
    """A v2 cache file (every output in one JSON document), or None."""
    try:
        data = valuecodec.loads(path.read_text())
        return Oracle(data["base"], data["base_time"], data["plus"], data["plus_time"], data.get("errors", {}))
    except (OSError, ValueError, KeyError, TypeError):
        return None


class GroundTruth:
    """Expected outputs computed once per task from the canonical solution, cached on disk as JSON."""

    def __init__(self, dataset: str, path: Path, sandbox: Sandbox):
        self.dataset, self.sandbox = dataset, sandbox
        python = getattr(sandbox, "python", None)
        pyver = "".join(map(str, python.version[:2])) if python else "x"
        self.folder = assets.cache_dir() / "evalplus" / "groundtruth" / \
            f"{path.name.split('.')[0]}-{file_digest(path)}-py{pyver}-v{GROUNDTRUTH_VERSION}"
        self._memory: dict[str, Oracle] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()

    def get(self, problem: dict) -> Oracle:
        task_id = problem["task_id"]
        with self._lock:
            if task_id in self._memory:
                return self._memory[task_id]
            lock = self._locks.setdefault(task_id, threading.Lock())
        with lock:
            if task_id not in self._memory:
                self._memory[task_id] = self._load(problem) or self._compute(problem)
        return self._memory[task_id]

    def _file(self, task_id: str) -> Path:
        return self.folder / (task_id.replace("/", "_") + ".json")

    def _load(self, problem: dict) -> Oracle | None:
        meta = self._file(problem["task_id"])
        oracle = read_oracle(meta)
        if oracle is not None:
            if any(isinstance(o, StoredOutputs) and o.floats is None for o in (oracle.base, oracle.plus)):
                oracle = add_float_indices(meta, oracle)
            if any(isinstance(o, StoredOutputs) and o.digests is None for o in (oracle.base, oracle.plus)):
                oracle = add_digests(meta, oracle)
            return oracle
        for version in LEGACY_VERSIONS:  # convert an earlier cache once instead of re-running the solution
            legacy = self.folder.with_name(self.folder.name.rsplit("-v", 1)[0] + f"-v{version}") / meta.name
            old = read_legacy(legacy) if legacy.exists() else None
            if old is not None:
                self.folder.mkdir(parents=True, exist_ok=True)
                write_oracle(meta, old)
                return read_oracle(meta) or old
        return None

    def _compute(self, problem: dict) -> Oracle:
        from evalplus.eval._special_oracle import MBPP_OUTPUT_NOT_NONE_TASKS

        code = problem["prompt"] + problem["canonical_solution"]
        not_none = self.dataset == "mbpp" and problem["entry_point"] in MBPP_OUTPUT_NOT_NONE_TASKS
        run = run_function_tests(self.sandbox, code, problem["entry_point"],
                                 [Group("base", problem["base_input"]), Group("plus", problem["plus_input"])],
                                 guard=False, reference=True, output_not_none=not_none, timeout=1200)
        oracle = Oracle([], [], [], [])
        for name in ("base", "plus"):
            g, inputs = run.groups[name], problem[f"{name}_input"]
            missing = [i for i in range(len(inputs)) if i not in g.outputs]
            if g.exec_error or missing or run.result.error:
                oracle.errors[name] = (g.exec_error or run.result.error or
                                       f"canonical solution failed on {name} input {missing[:1]}: "
                                       f"{g.errors.get(missing[0], run.result.stderr[-300:]) if missing else ''}")
            setattr(oracle, name, [g.outputs.get(i) for i in range(len(inputs))])
            setattr(oracle, f"{name}_time", [g.times.get(i, 0.0) for i in range(len(inputs))])
        if not (run.result.error or run.result.timed_out):  # cache real failures, not a broken/slow run
            self.folder.mkdir(parents=True, exist_ok=True)
            write_oracle(self._file(problem["task_id"]), oracle)
            return read_oracle(self._file(problem["task_id"])) or oracle  # outputs leave memory
        return oracle


_groundtruths: dict[tuple, GroundTruth] = {}
_gt_lock = threading.Lock()


def groundtruth_for(dataset: str, path: Path, sandbox: Sandbox) -> GroundTruth:
    """One :class:`GroundTruth` per (dataset file, sandbox) in the process, shared by every env on them."""
    key = (dataset, str(path), id(sandbox))
    with _gt_lock:
        if key not in _groundtruths:
            _groundtruths[key] = GroundTruth(dataset, path, sandbox)
        return _groundtruths[key]
