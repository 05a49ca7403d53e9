"""LiveCodeBench's verdicts: its code extraction, its output checks, and running every test in the sandbox
(in-process in :mod:`.harness`, as LiveCodeBench's ``testing_util`` does, or, in strict mode, stdin
programs as real processes)."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

from lopd_envs.codeexec import valuecodec
from lopd_envs.codeexec.functest import harness_source
from lopd_envs.sandbox import MiB, Sandbox
from lopd_envs.suites.livecodebench.data import with_tests
from lopd_envs.trace import compact

HARNESS = Path(__file__).with_name("harness.py")
TIMEOUT = 6  # seconds per test, LiveCodeBench's default
MEMORY = 4 << 30


def official_extract(text: str) -> str:
    """LiveCodeBench's extraction: the lines between the last two lines containing a fence."""
    lines = text.split("\n")
    fences = [i for i, line in enumerate(lines) if "```" in line]
    if len(fences) < 2:
        return ""
    return "\n".join(lines[fences[-2] + 1:fences[-1]])


def stripped_lines(text: str) -> list[str]:
    return [line.strip() for line in text.strip().split("\n")]


def decimals(line: str) -> list[Decimal] | None:
    try:
        return [Decimal(tok) for tok in line.split()]
    except Exception:  # noqa: BLE001 - decimal.InvalidOperation and friends
        return None


def stdout_matches(output: str, expected: str) -> tuple[bool, str]:
    """LiveCodeBench's stdin check: same number of stripped lines; each equal, or equal as Decimal tokens."""
    got, want = stripped_lines(output), stripped_lines(expected)
    if len(got) != len(want):
        return False, "Wrong answer: mismatched output length"
    for idx, (g, w) in enumerate(zip(got, want)):
        if g == w:
            continue
        dg, dw = decimals(g), decimals(w)
        if dg is None or dw is None or dg != dw:
            return False, f"Wrong answer at output_line_idx={idx}: {compact(g, 80)} != {compact(w, 80)}"
    return True, ""


def functional_matches(value: Any, expected_json: str) -> bool:
    try:
        return value == json.loads(expected_json)
    except Exception:  # noqa: BLE001
        return False


def evaluate(problem: dict, code: str, sandbox: Sandbox, strict: bool = False, timeout: int = TIMEOUT) -> dict:
    """Run and judge ``code`` on all tests of ``problem``; LiveCodeBench's result codes in ``results``
    (True, -2 wrong answer, -3 time limit, -4 runtime error, -1 global timeout)."""
    problem = with_tests(problem)
    n = len(problem["inputs"])
    details: dict[str, Any] = {"task_id": problem["question_id"], "kind": problem["kind"], "tests": n,
                               "backend": sandbox.name, "isolating": sandbox.isolating}
    if strict and problem["kind"] == "stdin":
        results, meta = _strict_stdin(problem, code, sandbox, timeout)
    else:
        results, meta = _in_process(problem, code, sandbox, timeout)
    details.update(meta)
    details["results"] = results
    details["passed"] = len(results) == n and all(r is True for r in results)
    return details


def _in_process(problem: dict, code: str, sandbox: Sandbox, timeout: int) -> tuple[list, dict]:
    n = len(problem["inputs"])
    request = {"kind": problem["kind"], "code": code, "fn_name": problem.get("fn_name"),
               "inputs": problem["inputs"], "timeout": timeout, "guard": True}
    data = json.dumps(request).encode("utf-8", "surrogatepass")
    run = sandbox.run(harness_source(HARNESS), stdin=b"%d\n" % len(data) + data, timeout=(timeout + 1) * n + 5,
                      memory_limit=MEMORY, output=256 * MiB, processes=64, interact=StopAtFirstFailure(problem))
    results: list = []
    meta: dict[str, Any] = {}
    if run.error:
        meta["sandbox_error"] = run.error
    for line in run.stdout.splitlines():
        try:
            rec = valuecodec.loads(line)
        except ValueError:
            continue
        if not isinstance(rec, dict):
            continue
        if "compile_error" in rec:
            return [-4], {**meta, "error_code": -4, "error_message": f"Error during testing: {compact(str(rec['compile_error']), 200)}"}
        if "end" in rec:
            return results, meta
        i = rec.get("i")
        if i != len(results) or i >= n:
            continue  # out of order or forged: only the harness's own sequence counts
        if "err" in rec:
            tle = bool(rec.get("tle"))
            results.append(-3 if tle else -4)
            return results, {**meta, "error_code": -3 if tle else -4,
                             "error_message": "Time Limit Exceeded" if tle else "Runtime Error",
                             "error": compact(str(rec["err"]), 200), "inputs": compact(problem["inputs"][i], 200)}
        if problem["kind"] == "functional":
            try:
                ok = functional_matches(rec.get("v"), problem["outputs"][i])
            except Exception:  # noqa: BLE001
                ok = False
            why = "Wrong Answer"
        else:
            ok, why = stdout_matches(str(rec.get("out", "")), problem["outputs"][i])
        if not ok:
            results.append(-2)
            return results, {**meta, "error_code": -2, "error_message": why,
                             "inputs": compact(problem["inputs"][i], 200),
                             "expected": compact(problem["outputs"][i], 200)}
        results.append(True)
    # the process died or hit the global limit before finishing: LiveCodeBench marks every test -1
    return [-1] * n, {**meta, "error_code": -1, "error_message": "global timeout or crash",
                      "timed_out": run.timed_out}


class StopAtFirstFailure:
    """Watches the harness's records as they stream and tells it to stop once a test failed (only a
    speed-up: the verdict is computed from all records afterwards)."""

    def __init__(self, problem: dict):
        self.problem, self.partial, self.sent = problem, b"", False

    def __call__(self, chunk: bytes) -> bytes | None:
        lines = (self.partial + chunk).split(b"\n")
        self.partial = lines.pop()
        if self.sent:
            return None
        for line in lines:
            try:
                rec = valuecodec.loads(line)
            except (ValueError, RecursionError, TypeError):
                continue
            i = rec.get("i") if isinstance(rec, dict) else None
            if not isinstance(i, int) or not 0 <= i < len(self.problem["outputs"]):
                continue
            if "err" in rec:
                ok = False
            elif self.problem["kind"] == "functional":
                ok = functional_matches(rec.get("v"), self.problem["outputs"][i])
            else:
                ok = stdout_matches(str(rec.get("out", "")), self.problem["outputs"][i])[0]
            if not ok:
                self.sent = True
                return b"stop\n"
        return None


def _strict_stdin(problem: dict, code: str, sandbox: Sandbox, timeout: int) -> tuple[list, dict]:
    results: list = []
    for i, (inp, out) in enumerate(zip(problem["inputs"], problem["outputs"])):
        run = sandbox.run(code, stdin=inp, timeout=timeout, memory_limit=MEMORY, output=64 * MiB)
        if run.timed_out:
            results.append(-3)
            return results, {"error_code": -3, "error_message": "Time Limit Exceeded", "inputs": compact(inp, 200)}
        if run.exit_code != 0 or run.error or run.truncated:
            results.append(-4)
            return results, {"error_code": -4, "error_message": "Runtime Error",
                             "error": compact(run.error or run.stderr[-300:], 300), "inputs": compact(inp, 200)}
        ok, why = stdout_matches(run.stdout, out)
        if not ok:
            results.append(-2)
            return results, {"error_code": -2, "error_message": why, "inputs": compact(inp, 200),
                             "expected": compact(out, 200)}
        results.append(True)
    return results, {}
