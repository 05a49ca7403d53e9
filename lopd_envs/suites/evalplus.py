"""HumanEval+ and MBPP+ (``lopd/HumanEvalPlus-v0``, ``lopd/MBPPPlus-v0``): evalplus's differential testing.

Data: the official ``HumanEvalPlus-v0.1.10.jsonl.gz`` and ``MbppPlus-*.jsonl.gz`` through the asset layer,
read with evalplus's own loaders (``stream_jsonl``, ``mbpp_deserialize_inputs``, ``completeness_check``).
The expected outputs come from running each canonical solution once (in the sandbox, timed per input)
and are cached in ``<cache>/evalplus/groundtruth/``. A candidate runs on the ``base`` and then the ``plus``
inputs inside the sandbox, each group on a fresh ``exec`` of its code, with evalplus 0.3.1's rules:
per-input limit ``max(1 s, 4 × canonical time)``, its reliability guard, stop at the first failure, and
its comparison (exact match, MBPP's special oracles, ``atol`` with ``np.allclose(rtol=1e-7)``).

Categories: ``plus`` (base and plus tests, the default; ``"all"`` means this) and ``base`` (base tests only).
The episode is one turn: the answer's code is extracted (see ``codeexec.extract_code``) and scored.

Scoring ``official`` reproduces evalplus 0.3.1's verdicts, quirks included:
  * HumanEval/32 (``find_zero``): evalplus's special oracle ``continue``s without counting the input, so
    no solution, the canonical one included, ever passes.
  * ``atol`` leaks: once an expected output is a float with ``atol == 0``, ``atol`` becomes 1e-6 for every
    later input of the group (so later integers compare with ``np.allclose`` too).
``strict`` deviates in exactly these two points: HumanEval/32 passes when every root satisfies
``|poly(x)| <= atol``, and ``atol`` is reset for each input.
Both modes, for safety: comparisons happen outside the sandbox on plain values, so a returned object of a
custom class (for example one whose ``__eq__`` always says yes) equals nothing, where evalplus would call
its ``__eq__`` (the standard library's ``Counter``/``OrderedDict``/``defaultdict`` do come back as such);
and the sandbox offers the standard library only (no numpy).
Known gap: an expected output too large to ship out of the sandbox within 4 GiB (in the MBPP+ pre-release
only Mbpp/255, ~1 GB for one plus input) leaves that group without expected outputs: it is judged
``fail`` (evalplus's own run fails it too: candidates run out of memory there), the other group as usual.

Options: ``sandbox=`` (backend name or instance), ``version=`` (MBPP+: ``"auto"``, ``"v0.2.0"`` or a
pre-release tag), ``timeout_per_task=`` (evalplus's ``EVALPLUS_TIMEOUT_PER_TASK``, 60 s per group).
Speed: one sandboxed process runs both groups; outputs stream back and the scorer tells the harness to
stop a group at its first wrong output, as evalplus's ``fast_check`` does.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from lopd_envs import assets
from lopd_envs.core import AgentEnv, Task, select
from lopd_envs.sandbox import Sandbox, get_sandbox
from lopd_envs.suites.codeexec import (CodeAnswerEpisode, FunctionRun, Group, GroupOutcome, defines, encode_inputs, extract_code,
                                       fenced_blocks, run_function_tests)
from lopd_envs.trace import compact

HUMANEVAL_FILE = "HumanEvalPlus-v0.1.10.jsonl.gz"
MBPP_FILE = "MbppPlus-v0.2.0.jsonl.gz"
MIN_TIME_LIMIT = 1.0  # evalplus DEFAULT_MIN_TIME_LIMIT
GT_TIME_LIMIT_FACTOR = 4.0  # evalplus DEFAULT_GT_TIME_LIMIT_FACTOR
TIMEOUT_PER_TASK = 60.0  # evalplus EVALPLUS_TIMEOUT_PER_TASK default
MEMORY = 4 << 30  # evalplus's reliability guard: 4 GiB
GROUNDTRUTH_VERSION = "2"
CATEGORIES = ("plus", "base")
INSTRUCTION = ("Please provide a self-contained Python script that solves the following problem "
               "in a markdown code block:\n```python\n{prompt}\n```")
SYSTEM = "You are an expert Python programmer. Answer with the complete function in one ```python block."


# ---------------------------------------------------------------------------------- data

def dataset_path(dataset: str, data_dir: str | None = None, version: str = "auto") -> Path:
    """Where the dataset file is. MBPP+: ``version="auto"`` takes the official v0.2.0 when present, else a
    pre-release ``MbppPlus-*.jsonl.gz`` found in a data folder, else downloads v0.2.0."""
    if dataset == "humaneval":
        return assets.locate(assets.EVALPLUS, HUMANEVAL_FILE, data_dir)
    wanted = MBPP_FILE if version in ("auto", "v0.2.0") else f"MbppPlus-{version}.jsonl.gz"
    for folder in assets.candidate_dirs(assets.EVALPLUS.name, data_dir):
        if (folder / wanted).exists():
            return folder / wanted
    if version == "auto":
        for folder in assets.candidate_dirs(assets.EVALPLUS.name, data_dir):
            found = sorted(folder.glob("MbppPlus-*.jsonl*")) if folder.is_dir() else []
            if found:
                return found[-1]
    return assets.locate(assets.EVALPLUS, wanted, data_dir)


_problem_cache: dict[str, dict[str, dict]] = {}
_problem_lock = threading.Lock()


def load_problems(dataset: str, path: Path) -> dict[str, dict]:
    """Problems by task id, read with evalplus's loaders (MBPP+ inputs deserialised to tuples, sets...)."""
    from evalplus.data.mbpp import mbpp_deserialize_inputs
    from evalplus.data.utils import completeness_check, stream_jsonl

    key = f"{dataset}:{path}"
    with _problem_lock:
        if key not in _problem_cache:
            problems = {t["task_id"]: t for t in stream_jsonl(str(path))}
            if dataset == "mbpp":
                for task_id, task in problems.items():
                    task["base_input"] = mbpp_deserialize_inputs(task_id, task["base_input"])
                    task["plus_input"] = mbpp_deserialize_inputs(task_id, task["plus_input"])
            completeness_check("HumanEval+" if dataset == "humaneval" else "MBPP+", problems)
            _problem_cache[key] = problems
        return _problem_cache[key]


def file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()[:16]


# --------------------------------------------------------------------------- expected outputs

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
        from lopd_envs.suites import valuecodec
        try:
            data = valuecodec.loads(self._file(problem["task_id"]).read_text())
            return Oracle(data["base"], data["base_time"], data["plus"], data["plus_time"], data.get("errors", {}))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _compute(self, problem: dict) -> Oracle:
        from evalplus.eval._special_oracle import MBPP_OUTPUT_NOT_NONE_TASKS

        from lopd_envs.suites import valuecodec
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


# ------------------------------------------------------------------------------- comparison

@functools.lru_cache(maxsize=None)
def _special():
    """evalplus's own oracles and task lists (imported lazily: evalplus pulls in numpy and psutil)."""
    from evalplus.eval import is_floats
    from evalplus.eval._special_oracle import (MBPP_OUTPUT_NOT_NONE_TASKS, MBPP_OUTPUT_SET_EQ_TASKS,
                                               _digit_distance_nums, _poly, _surface_Area)
    return is_floats, MBPP_OUTPUT_NOT_NONE_TASKS, MBPP_OUTPUT_SET_EQ_TASKS, _digit_distance_nums, _poly, _surface_Area


def output_matches(dataset: str, entry_point: str, inp: Sequence[Any], out: Any, exp: Any, atol: float,
                   as_set: Any = None, strict: bool = False) -> tuple[bool, float, bool]:
    """One input's check, as evalplus's ``unsafe_execute`` does it. Returns (passed, atol for the next input,
    counted). ``counted`` is False for HumanEval/32's special oracle, which evalplus never counts."""
    is_floats, not_none, set_eq, digit_distance, poly, surface_area = _special()
    try:
        exact = out == exp
        if dataset == "mbpp":
            if entry_point == "are_equivalent":
                exact = True
            elif entry_point == "sum_div":
                exact = exact or out == 0
            elif entry_point == "surface_Area":
                exact = exact or abs(out - surface_area(*inp)) <= atol
            elif entry_point == "digit_distance_nums":
                exact = exact or out == digit_distance(*inp)
            elif entry_point in set_eq:
                exact = set(as_set if as_set is not None else out) == set(exp)
            elif entry_point in not_none:
                exact = out == exp if isinstance(out, bool) else exp == (out is not None)
        if dataset == "humaneval" and entry_point == "find_zero":
            return abs(poly(*inp, out)) <= atol, atol, strict
        next_atol = atol
        if atol == 0 and is_floats(exp):
            atol = next_atol = 1e-6
        if not exact and atol != 0:
            if type(out) != type(exp):  # noqa: E721 - evalplus compares exact types
                return False, next_atol, True
            if isinstance(exp, (list, tuple)) and len(out) != len(exp):
                return False, next_atol, True
            return bool(np.allclose(out, exp, rtol=1e-07, atol=atol)), next_atol, True
        return bool(exact), next_atol, True
    except Exception:  # noqa: BLE001 - any error in comparing is a failed input, as in evalplus
        return False, atol, True


@dataclass
class GroupVerdict:
    status: str  # pass | fail | timeout (evalplus's statuses)
    passed: int
    total: int
    first_failure: int | None = None
    reason: str = ""

    def to_dict(self, inputs: Sequence[Any]) -> dict[str, Any]:
        out: dict[str, Any] = {"status": self.status, "passed": self.passed, "total": self.total}
        if self.first_failure is not None:
            out["failing_input"] = compact(repr(inputs[self.first_failure]), 300)
            out["failing_index"] = self.first_failure
        if self.reason:
            out["reason"] = compact(self.reason, 300)
        return out


def judge_group(dataset: str, problem: dict, group: str, outcome: GroupOutcome, expected: Sequence[Any],
                strict: bool = False, checked: dict[int, tuple[bool, float, bool]] | None = None) -> GroupVerdict:
    """The evalplus status of one group from the sandbox's records (pure: no execution). ``checked`` holds
    comparisons already made while the records streamed in (same inputs, same order), to skip redoing them."""
    inputs = problem[f"{group}_input"]
    total, ep = len(inputs), problem["entry_point"]
    if outcome.exec_error is not None:
        return GroupVerdict("fail", 0, total, None, f"the code failed to load: {outcome.exec_error}")
    atol, passed, counted_all = problem["atol"], 0, True
    base_atol = atol
    for i in range(total):
        if i in outcome.errors:
            err = outcome.errors[i]
            why = "time limit exceeded" if err.startswith("TimeoutException") else f"raised {err}"
            return GroupVerdict("fail", passed, total, i, why)
        if i not in outcome.outputs:
            stopped = outcome.out_of_budget or not outcome.ended
            return GroupVerdict("timeout" if stopped else "fail", passed, total, i,
                                "the run stopped before this input (time limit or exit)")
        if checked is not None and i in checked:
            ok, atol, counted = checked[i]
        else:
            ok, atol, counted = output_matches(dataset, ep, inputs[i], outcome.outputs[i], expected[i], atol,
                                               outcome.as_sets.get(i), strict)
        if strict:
            atol = base_atol  # strict: the float tolerance does not leak into later inputs
        if not ok:
            return GroupVerdict("fail", passed, total, i, f"wrong output {compact(repr(outcome.outputs[i]), 120)}")
        counted_all &= counted
        passed += counted
    if not counted_all:
        return GroupVerdict("fail", passed, total, None,
                            "evalplus 0.3.1's special oracle for find_zero never counts an input as passed")
    return GroupVerdict("pass", passed, total)


class FastCheck:
    """Judges outputs as they stream in and names a group to stop at its first wrong output, as evalplus's
    ``fast_check`` does (a wrong candidate then costs one failing input, not every input). Only a speed-up:
    the verdict comes from :func:`judge_group` over all records afterwards."""

    def __init__(self, dataset: str, problem: dict, oracle: Oracle, names: Sequence[str], strict: bool):
        self.dataset, self.problem, self.oracle, self.strict = dataset, problem, oracle, strict
        self.state = {n: {"next": 0, "atol": problem["atol"], "failed": False} for n in names}
        self.checked: dict[str, dict[int, tuple[bool, float, bool]]] = {n: {} for n in names}

    def __call__(self, rec: dict) -> str | None:
        name, i = rec.get("g"), rec.get("i")
        st = self.state.get(name) if isinstance(name, str) else None
        if st is None or st["failed"] or "v" not in rec or i != st["next"]:
            return None
        expected = getattr(self.oracle, name)
        if not isinstance(i, int) or i >= len(expected):
            return None
        ok, atol, counted = output_matches(self.dataset, self.problem["entry_point"],
                                           self.problem[f"{name}_input"][i], rec["v"], expected[i], st["atol"],
                                           rec.get("s"), self.strict)
        self.checked[name][i] = (ok, atol, counted)
        st["atol"] = self.problem["atol"] if self.strict else atol
        if ok:
            st["next"] += 1
            return None
        st["failed"] = True
        return name


def time_limits(times: Sequence[float]) -> list[float]:
    return [max(MIN_TIME_LIMIT, GT_TIME_LIMIT_FACTOR * t) for t in times]


def group_budget(limits: Sequence[float], per_task: float = TIMEOUT_PER_TASK) -> float:
    """evalplus kills a group's process after ``min(60, sum(limits)) + 1`` (+1 to join)."""
    return min(per_task, sum(limits)) + 2.0


def evaluate_solution(dataset: str, problem: dict, oracle: Oracle, solution: str, sandbox: Sandbox,
                      base_only: bool = False, strict: bool = False,
                      timeout_per_task: float = TIMEOUT_PER_TASK) -> dict[str, Any]:
    """Run and judge one solution (complete code) on a task; the evalplus result dict shape."""
    from evalplus.eval._special_oracle import MBPP_OUTPUT_SET_EQ_TASKS

    names = ["base"] if base_only else ["base", "plus"]
    groups = []
    for name in names:
        limits = time_limits(getattr(oracle, f"{name}_time"))
        groups.append(Group(name, problem[f"{name}_input"], limits, group_budget(limits, timeout_per_task),
                            encoded_inputs(problem, name)))
    total_timeout = sum(g.budget for g in groups) + 2.0
    fast = FastCheck(dataset, problem, oracle, names, strict)
    run: FunctionRun = run_function_tests(
        sandbox, solution, problem["entry_point"], groups, guard=True,
        set_eq=dataset == "mbpp" and problem["entry_point"] in MBPP_OUTPUT_SET_EQ_TASKS, timeout=total_timeout,
        watch=fast)
    details: dict[str, Any] = {"task_id": problem["task_id"], "backend": run.result.backend,
                               "isolating": run.result.isolating}
    if run.result.error:
        details["sandbox_error"] = run.result.error
    verdicts = {}
    for name in names:
        verdict = judge_group(dataset, problem, name, run.groups[name], getattr(oracle, name), strict,
                              fast.checked[name] if run.streamed else None)
        if verdict.status == "fail" and run.result.timed_out and verdict.first_failure is not None \
                and verdict.reason.startswith("the run stopped"):
            verdict.status = "timeout"
        verdicts[name] = verdict
        details[name] = verdict.to_dict(problem[f"{name}_input"])
    details["base_status"] = verdicts["base"].status
    details["plus_status"] = verdicts["plus"].status if "plus" in verdicts else None
    details["passed"] = all(v.status == "pass" for v in verdicts.values())
    return details


def evaluate_task(dataset: str, problem: dict, oracle: Oracle, solution: str, sandbox: Sandbox,
                  base_only: bool = False, strict: bool = False,
                  timeout_per_task: float = TIMEOUT_PER_TASK) -> dict[str, Any]:
    """:func:`evaluate_solution`, with a group whose expected outputs are missing judged ``fail``."""
    unavailable = {"status": "fail", "passed": 0, "reason": "expected outputs unavailable: "}
    if "base" in oracle.errors:
        out = {"task_id": problem["task_id"], "passed": False, "base_status": "fail",
               "base": {**unavailable, "reason": unavailable["reason"] + oracle.errors["base"]},
               "plus_status": None if base_only else "fail"}
        return out
    if "plus" in oracle.errors and not base_only:
        out = evaluate_solution(dataset, problem, oracle, solution, sandbox, True, strict, timeout_per_task)
        out.update(plus_status="fail", passed=False,
                   plus={**unavailable, "reason": unavailable["reason"] + oracle.errors["plus"]})
        return out
    return evaluate_solution(dataset, problem, oracle, solution, sandbox, base_only, strict, timeout_per_task)


_encoded_lock = threading.Lock()


def encoded_inputs(problem: dict, group: str) -> str:
    """A task's inputs encoded once and kept with the problem: every solution of the task reuses them."""
    key = f"_lopd_{group}_input_json"
    if key not in problem:
        text = encode_inputs(problem[f"{group}_input"])
        with _encoded_lock:
            problem.setdefault(key, text)
    return problem[key]


def solution_from_answer(problem: dict, text: str) -> str:
    """The complete program for an answer: the extracted function, or the prompt followed by the answer
    when the answer is a completion of the prompt's function body."""
    ep = problem["entry_point"]
    code = extract_code(text, ep)
    if code and defines(code, ep):
        return code
    body = "\n".join(b for _, b in fenced_blocks(text)) if "```" in text else text
    completed = problem["prompt"] + body
    code2 = extract_code(completed, ep)
    if code2 and defines(code2, ep):
        return code2
    return code


# ------------------------------------------------------------------------------------- env

class CodeEpisode(CodeAnswerEpisode):
    """One problem, one answer: the function is taken from the answer and judged on base and plus inputs."""

    system_prompt = SYSTEM

    def judge(self, text: str) -> tuple[dict[str, Any], str]:
        problem = self.task.data
        solution = solution_from_answer(problem, text)
        if not solution:
            details = {"task_id": self.task.task_id, "passed": False, "base_status": "fail",
                       "plus_status": None if self.env.base_only else "fail",
                       "reason": "no Python code found in the answer"}
        else:
            details = self.env.evaluate(problem, solution)
            details["solution"] = compact(solution, 2000)
        summary = f"base: {details['base_status']}" + \
            ("" if self.env.base_only else f", plus: {details['plus_status']}")
        return details, summary


class EvalPlusEnv(AgentEnv):
    """Shared by HumanEval+ and MBPP+; subclasses set ``dataset``."""

    dataset = "humaneval"
    episode_class = CodeEpisode
    default_max_turns = 1

    def __init__(self, category: str | Sequence[str] = "plus", data_dir: str | None = None,
                 max_turns: int | None = None, scoring: str = "official",
                 sandbox: str | Sandbox | None = None, version: str = "auto",
                 timeout_per_task: float = TIMEOUT_PER_TASK, **options: Any):
        self._sandbox_choice = sandbox
        self.version = version
        self.timeout_per_task = float(timeout_per_task)  # evalplus's EVALPLUS_TIMEOUT_PER_TASK
        super().__init__(category=category, data_dir=data_dir, max_turns=max_turns, scoring=scoring, **options)

    def load_tasks(self, category, data_dir):
        selected = select(category, CATEGORIES, {"all": ["plus"]})
        self.base_only = selected == ["base"]
        self.path = dataset_path(self.dataset, data_dir, self.version)
        self.problems = load_problems(self.dataset, self.path)
        cat = "base" if self.base_only else "plus"
        for task_id, problem in self.problems.items():
            yield Task(task_id, cat, INSTRUCTION.format(prompt=problem["prompt"].strip()), [], problem)

    @property
    def sandbox(self) -> Sandbox:
        if not isinstance(self._sandbox_choice, Sandbox):
            self._sandbox_choice = get_sandbox(self._sandbox_choice)
        return self._sandbox_choice

    @property
    def groundtruth(self) -> GroundTruth:
        key = (self.dataset, str(self.path), id(self.sandbox))
        with _gt_lock:
            if key not in _groundtruths:
                _groundtruths[key] = GroundTruth(self.dataset, self.path, self.sandbox)
            return _groundtruths[key]

    def evaluate(self, problem: dict, solution: str) -> dict[str, Any]:
        return evaluate_task(self.dataset, problem, self.groundtruth.get(problem), solution, self.sandbox,
                             self.base_only, strict=self.scoring == "strict", timeout_per_task=self.timeout_per_task)


_groundtruths: dict[tuple, GroundTruth] = {}
_gt_lock = threading.Lock()


class HumanEvalPlusEnv(EvalPlusEnv):
    env_id = "lopd/HumanEvalPlus-v0"
    dataset = "humaneval"


class MBPPPlusEnv(EvalPlusEnv):
    env_id = "lopd/MBPPPlus-v0"
    dataset = "mbpp"
