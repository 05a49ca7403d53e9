"""Expected outputs of HumanEval+ / MBPP+ (evalplus's ``get_groundtruth``): each canonical solution is
run once in the sandbox, timed per input, and the outputs are cached on disk as JSON, keyed by the dataset
file's hash and the sandbox's Python version (outputs and times depend on both)."""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lopd_envs import assets
from lopd_envs.codeexec import valuecodec
from lopd_envs.codeexec.functest import Group, run_function_tests
from lopd_envs.sandbox import Sandbox
from lopd_envs.suites.evalplus.data import file_digest

GROUNDTRUTH_VERSION = "2"


@dataclass
class Oracle:
    """Expected outputs and canonical per-input times of one task (evalplus's ``get_groundtruth``)."""

    base: list[Any]
    base_time: list[float]
    plus: list[Any]
    plus_time: list[float]
    errors: dict[str, str] = field(default_factory=dict)  # group -> why its expected outputs are missing

    @property
    def error(self) -> str | None:
        return "; ".join(f"{g}: {e}" for g, e in self.errors.items()) or None


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
        try:
            data = valuecodec.loads(self._file(problem["task_id"]).read_text())
            return Oracle(data["base"], data["base_time"], data["plus"], data["plus_time"], data.get("errors", {}))
        except (OSError, ValueError, KeyError, TypeError):
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
            tmp = self._file(problem["task_id"]).with_suffix(f".tmp{os.getpid()}.{threading.get_ident()}")
            tmp.write_text(json.dumps({"base": [valuecodec.encode(x) for x in oracle.base],
                                       "plus": [valuecodec.encode(x) for x in oracle.plus],
                                       "base_time": oracle.base_time, "plus_time": oracle.plus_time,
                                       "errors": oracle.errors}))
            os.replace(tmp, self._file(problem["task_id"]))
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
