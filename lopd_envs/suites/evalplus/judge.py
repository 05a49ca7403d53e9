"""evalplus 0.3.1's verdicts on a candidate's records: its per-input comparison (special oracles, ``atol``),
group statuses, time limits, and the streaming early stop (``fast_check``). Pure given the records, except
:func:`evaluate_solution`, which runs the candidate through :mod:`lopd_envs.codeexec.functest`."""

from __future__ import annotations

import functools
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from lopd_envs.codeexec.extract import defines, extract_code, fenced_blocks
from lopd_envs.codeexec.functest import EXPECTED, FunctionRun, Group, GroupOutcome, encode_inputs, run_function_tests
from lopd_envs.sandbox import Sandbox
from lopd_envs.suites.evalplus.answer import official_solution
from lopd_envs.suites.evalplus.groundtruth import Oracle
from lopd_envs.trace import compact

MIN_TIME_LIMIT = 1.0  # evalplus DEFAULT_MIN_TIME_LIMIT
GT_TIME_LIMIT_FACTOR = 4.0  # evalplus DEFAULT_GT_TIME_LIMIT_FACTOR
TIMEOUT_PER_TASK = 60.0  # evalplus EVALPLUS_TIMEOUT_PER_TASK default
#: How fast the host counts on a result's bytes arriving, beyond the call's own time limit (evalplus times
#: the call only). Measured: HumanEval/130's 114 MB of canonical outputs take 3.7 s to encode and write in
#: the sandbox on the 2-core VM (31 MB/s); a third of that leaves room for a loaded machine.
TRANSFER_BYTES_PER_SECOND = 10e6


@functools.cache
def _special():
    """evalplus's own oracles and task lists (imported lazily: evalplus pulls in numpy and psutil)."""
    from evalplus.eval import is_floats
    from evalplus.eval._special_oracle import (
        MBPP_OUTPUT_NOT_NONE_TASKS,
        MBPP_OUTPUT_SET_EQ_TASKS,
        _digit_distance_nums,
        _poly,
        _surface_Area,
    )
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
            return abs(poly(*inp, out)) <= atol, atol, strict  # pyright: ignore[reportCallIssue]  # inp is [xs]
        next_atol = atol
        if atol == 0 and is_floats(exp):
            atol = next_atol = 1e-6
        if not exact and atol != 0:
            if type(out) != type(exp):  # noqa: E721 - evalplus compares exact types
                return False, next_atol, True
            if isinstance(exp, (list, tuple)) and len(cast("list | tuple", out)) != len(exp):  # out: exp's type
                return False, next_atol, True
            return bool(np.allclose(out, exp, rtol=1e-07, atol=atol)), next_atol, True
        return bool(exact), next_atol, True
    except Exception:  # noqa: BLE001 - any error in comparing is a failed input, as in evalplus
        return False, atol, True


#: entry points with a special oracle in evalplus 0.3.1: their check is more than ``out == exp`` (HumanEval
#: find_zero; the MBPP ones, see ``output_matches``), so their results are never recognised by bytes alone
SPECIAL_ENTRY_POINTS = {"humaneval": frozenset({"find_zero"}),
                        "mbpp": frozenset({"are_equivalent", "sum_div", "surface_Area", "digit_distance_nums"})}


def recognisable(dataset: str, entry_point: str) -> bool:
    """Whether a result equal to the expected output always passes ``output_matches`` on this task."""
    _, not_none, set_eq, *_ = _special()
    special = SPECIAL_ENTRY_POINTS.get(dataset, frozenset())
    if dataset == "mbpp":
        special = special | set(not_none) | set(set_eq)
    return entry_point not in special


def expected_matches(oracle: Oracle, group: str, i: int, atol: float) -> tuple[bool, float, bool]:
    """``output_matches`` for a result recognised as the expected output (:data:`EXPECTED`): it passes, and
    the tolerance for later inputs moves as evalplus's would (1e-6 once a float output is met with 0)."""
    return True, (1e-6 if atol == 0 and oracle.is_floats(group, i) else atol), True


@dataclass
class GroupVerdict:
    status: str  # pass | fail | timeout (evalplus's statuses), or sandbox_error (no verdict: the run broke)
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
                strict: bool = False, checked: dict[int, tuple[bool, float, bool]] | None = None,
                oracle: Oracle | None = None) -> GroupVerdict:
    """The evalplus status of one group from the sandbox's records (pure: no execution). ``checked`` holds
    comparisons already made while the records streamed in (same inputs, same order), to skip redoing them.
    A result recognised as the expected output (:data:`EXPECTED`) needs ``oracle`` for evalplus's float rule."""
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
        elif outcome.outputs[i] is EXPECTED:
            if oracle is None:
                raise ValueError("a result recognised as the expected output needs the oracle to be judged")
            ok, atol, counted = expected_matches(oracle, group, i, atol)
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
        if not isinstance(name, str):
            return None
        st = self.state.get(name)
        if st is None or st["failed"] or "v" not in rec or i != st["next"]:
            return None
        expected = getattr(self.oracle, name)
        if not isinstance(i, int) or i >= len(expected):
            return None
        if rec["v"] is EXPECTED:
            ok, atol, counted = expected_matches(self.oracle, name, i, st["atol"])
        elif self.oracle.cheap(name, i):
            ok, atol, counted = output_matches(self.dataset, self.problem["entry_point"],
                                               self.problem[f"{name}_input"][i], rec["v"], expected[i], st["atol"],
                                               rec.get("s"), self.strict)
        else:
            return None
        self.checked[name][i] = (ok, atol, counted)
        st["atol"] = self.problem["atol"] if self.strict else atol
        if ok:
            st["next"] += 1
            return None
        st["failed"] = True
        return name


def time_limits(times: Sequence[float]) -> list[float]:
    return [max(MIN_TIME_LIMIT, GT_TIME_LIMIT_FACTOR * t) for t in times]


def transfer_allowances(oracle: Oracle, group: str) -> list[float] | None:
    """Per input, the seconds its expected output's bytes take at :data:`TRANSFER_BYTES_PER_SECOND` (a
    correct result has that size); None when the sizes are not known (a just-computed oracle)."""
    outputs = getattr(oracle, group)
    return _allowances(outputs) if hasattr(outputs, "encoded_size") else None


@functools.lru_cache(maxsize=4096)
def _allowances(outputs: Any) -> list[float]:
    """(Kept per stored group: every solution of the task asks again.)"""
    return [outputs.encoded_size(i) / TRANSFER_BYTES_PER_SECOND for i in range(len(outputs))]


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
    recognise = recognisable(dataset, problem["entry_point"])
    for name in names:
        limits = time_limits(getattr(oracle, f"{name}_time"))
        groups.append(Group(name, problem[f"{name}_input"], limits, group_budget(limits, timeout_per_task),
                            encoded_inputs(problem, name), oracle.expected_json(name) if recognise else None,
                            transfer_allowances(oracle, name), oracle.expected_digests(name) if recognise else None))
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
                              fast.checked[name] if run.streamed else None, oracle)
        if verdict.status == "fail" and run.result.timed_out and verdict.first_failure is not None \
                and verdict.reason.startswith("the run stopped"):
            verdict.status = "timeout"
        if run.result.error and verdict.status != "pass":  # the sandbox broke: no verdict on the code
            verdict.status = "sandbox_error"
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
               "plus_status": None if base_only else "fail",
               "error": "not scored: the base tests' expected outputs are unavailable: " + oracle.errors["base"]}
        return out
    if "plus" in oracle.errors and not base_only:
        out = evaluate_solution(dataset, problem, oracle, solution, sandbox, True, strict, timeout_per_task)
        out.update(plus_status="fail", passed=False,
                   plus={**unavailable, "reason": unavailable["reason"] + oracle.errors["plus"]},
                   error="not scored: the plus tests' expected outputs are unavailable: " + oracle.errors["plus"])
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


def solution_from_answer(problem: dict, text: str, strict: bool = False) -> str:
    """The program judged for an answer.

    Official (evalplus's pipeline for chat models, ``codegen.py``): evalplus's ``sanitize`` of the answer alone
    (:func:`lopd_envs.suites.evalplus.answer.official_solution`); the prompt is prepended only for completion models, so a
    body-only answer such as ``    return x + y`` stays a body and fails.
    Strict: the fenced block that defines the entry point (the longest parseable stretch without fences),
    and when the answer does not define it, the prompt followed by the answer (read as a completion of the
    prompt's function body), the reading a human grader would give it."""
    ep = problem["entry_point"]
    if not strict:
        return official_solution(text, ep)
    code = extract_code(text, ep)
    if code and defines(code, ep):
        return code
    body = "\n".join(b for _, b in fenced_blocks(text)) if "```" in text else text
    completed = problem["prompt"] + body
    code2 = extract_code(completed, ep)
    if code2 and defines(code2, ep):
        return code2
    return code
