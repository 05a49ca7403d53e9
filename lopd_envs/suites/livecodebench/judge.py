"""LiveCodeBench's verdicts: its code extraction, its output checks, and running every test in the sandbox
(in-process in :mod:`.harness`, as LiveCodeBench's ``testing_util`` does, or, in strict mode, stdin
programs as real processes)."""

from __future__ import annotations

import inspect
import json
from decimal import Decimal
from pathlib import Path
from typing import Any, cast

from lopd_envs.codeexec.channel import ResultChannel
from lopd_envs.codeexec.functest import harness_source
from lopd_envs.sandbox import MiB, Sandbox
from lopd_envs.suites.livecodebench.data import with_tests
from lopd_envs.suites.livecodebench.harness import PREAMBLE, _Quitter
from lopd_envs.suites.livecodebench.libraries import with_numpy
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


class TestingError(Exception):
    """A check that raises where LiveCodeBench's grader has no per-test ``try`` (comparing ``Decimal``
    tokens such as ``sNaN``): its ``run_test`` then returns ``[-4]`` for the whole answer."""


def stdout_matches(output: str, expected: str) -> tuple[bool, str]:
    """LiveCodeBench's stdin check: same number of stripped lines; each equal, or equal as Decimal tokens.
    Raises :class:`TestingError` where the official comparison raises."""
    got, want = stripped_lines(output), stripped_lines(expected)
    if len(got) != len(want):
        return False, "Wrong answer: mismatched output length"
    for idx, (g, w) in enumerate(zip(got, want)):
        if g == w:
            continue
        dg, dw = decimals(g), decimals(w)
        try:
            same = dg is not None and dw is not None and dg == dw
        except Exception as exc:  # decimal.InvalidOperation on signalling NaNs
            raise TestingError(f"{type(exc).__name__} comparing {compact(g, 80)} with {compact(w, 80)}") from exc
        if not same:
            return False, f"Wrong answer at output_line_idx={idx}: {compact(g, 80)} != {compact(w, 80)}"
    return True, ""


def _fixed(entry: Any) -> Any:
    """An official result entry as ``evaluate_generations_by_problem`` fixes it: a numpy array becomes its
    first item, a numpy bool a bool (an empty array there crashes the metrics: here it fails)."""
    if type(entry).__module__ == "numpy":
        try:
            entry = entry.item(0) if type(entry).__name__ == "ndarray" else entry.item()
        except Exception:  # noqa: BLE001
            return False
    return entry if isinstance(entry, bool) else False


def functional_verdict(value: Any, expected_json: str) -> list:
    """The entries LiveCodeBench's ``grade_call_based`` appends for one test: ``prediction == expected``
    is appended as it is and then tested with ``not``; either step raising (a numpy array of two or more
    items, a list holding one) appends ``-4`` (after the appended comparison, when ``not`` raised). So
    ``[True]`` passes, ``[False]`` is a wrong answer, ``[-4]``/``[entry, -4]`` a runtime error."""
    try:
        same = value == json.loads(expected_json)
    except Exception:  # noqa: BLE001
        return [-4]
    try:
        truthy = bool(same)
    except Exception:  # noqa: BLE001
        return [_fixed(same), -4]
    return [True] if truthy and _fixed(same) is True else [False]


def functional_matches(value: Any, expected_json: str) -> bool:
    return functional_verdict(value, expected_json) == [True]


def failure_entries(problem: dict, i: int, rec: dict, results: list) -> tuple[list, int]:
    """The official result list and error code once test ``i`` did not pass: a functional test appends
    what :func:`functional_verdict` says; an stdin check that raises officially replaces the list by
    ``[-4]``; otherwise ``-2``."""
    if problem["kind"] == "functional":
        entries = functional_verdict(rec.get("v"), problem["outputs"][i])
        return results + entries, -4 if entries[-1] == -4 else -2
    try:
        stdout_matches(str(rec.get("out", "")), problem["outputs"][i])
    except TestingError:
        return [-4], -4
    return [*results, -2], -2


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
        results, meta = _in_process(problem, code, sandbox, timeout, strict)
    details.update(meta)
    details["results"] = results
    details["passed"] = len(results) == n and all(r is True for r in results)
    return details


def _in_process(problem: dict, code: str, sandbox: Sandbox, timeout: int, strict: bool = False) -> tuple[list, dict]:
    """All tests in one sandboxed harness run; each test's time limit is kept by the host's clock (see
    :mod:`lopd_envs.codeexec.channel`): a result later than ``timeout`` is a time limit (-3), and a test
    that has none by then is killed and gets -3, whatever the harness's own alarm did."""
    n = len(problem["inputs"])
    sandbox, sys_path = with_numpy(sandbox)
    request = {"kind": problem["kind"], "code": code, "fn_name": problem.get("fn_name"),
               "inputs": problem["inputs"], "timeout": timeout, "guard": True, "strict": strict,
               "sys_path": sys_path}
    data = json.dumps(request).encode("utf-8", "surrogatepass")
    channel = ResultChannel(TestSequence(problem, timeout))
    run = sandbox.run(harness_source(HARNESS), stdin=b"%d\n" % len(data) + data, timeout=(timeout + 1) * n + 5,
                      memory_limit=MEMORY, output=256 * MiB, processes=64, interact=channel)
    channel.finish()
    meta: dict[str, Any] = {}
    if run.error:
        meta["sandbox_error"] = run.error
    return verdicts(problem, channel, run.stopped, {**meta, "timed_out": run.timed_out} if run.timed_out else meta)


def verdicts(problem: dict, channel: ResultChannel, stopped: bool, meta: dict[str, Any]) -> tuple[list, dict]:
    """LiveCodeBench's result list from the channel's records in sequence (pure given the records)."""
    n = len(problem["inputs"])
    results: list = []
    for arrival in channel.arrivals:
        rec = arrival.record
        if "compile_error" in rec:
            return [-4], {**meta, "error_code": -4, "error_message": f"Error during testing: {compact(str(rec['compile_error']), 200)}"}
        if "end" in rec:
            return results, meta
        if "i" not in rec:
            continue  # the "ready" record
        i = rec["i"]
        if arrival.late or "err" in rec:
            tle = arrival.late or bool(rec.get("tle"))
            results.append(-3 if tle else -4)
            why = f"took {arrival.elapsed:.2f}s by the host's clock" if arrival.late else str(rec["err"])
            return results, {**meta, "error_code": -3 if tle else -4,
                             "error_message": "Time Limit Exceeded" if tle else "Runtime Error",
                             "error": compact(why, 200), "inputs": compact(problem["inputs"][i], 200)}
        ok, why = test_passes(problem, i, rec)
        if not ok:
            results, code = failure_entries(problem, i, rec, results)
            return results, {**meta, "error_code": code, "error_message": why,
                             "inputs": compact(problem["inputs"][i], 200),
                             "expected": compact(problem["outputs"][i], 200)}
        results.append(True)
    if stopped and not cast(TestSequence, channel.schedule).compiled:  # the host stopped the load (deadline or budget)
        return [-4], {**meta, "error_code": -4, "error_message": "Error during testing: "
                      + (channel.violation or "compilation did not finish by the host's deadline")}
    if stopped and len(results) < n:  # the host stopped the pending test
        tle = channel.violation is None
        i = len(results)
        results.append(-3 if tle else -4)
        return results, {**meta, "error_code": results[-1],
                         "error_message": "Time Limit Exceeded" if tle else "Runtime Error",
                         "error": channel.violation or "no result by the host's deadline",
                         "inputs": compact(problem["inputs"][i], 200)}
    # the process died or hit the global limit before finishing: LiveCodeBench marks every test -1
    return [-1] * n, {**meta, "error_code": -1, "error_message": "global timeout or crash", "timed_out": stopped}


def test_passes(problem: dict, i: int, rec: dict) -> tuple[bool, str]:
    """Compare test ``i``'s reported result with the expected one; a comparison that raises on a crafted
    output (e.g. ``sNaN`` tokens under Decimal) is a wrong answer, never a scorer exception."""
    try:
        if problem["kind"] == "functional":
            entries = functional_verdict(rec.get("v"), problem["outputs"][i])
            return entries == [True], "Runtime Error" if entries[-1] == -4 else "Wrong Answer"
        return stdout_matches(str(rec.get("out", "")), problem["outputs"][i])
    except TestingError as exc:
        return False, f"Error during testing: {exc}"
    except Exception as exc:  # noqa: BLE001
        return False, f"Wrong answer: the output could not be compared ({type(exc).__name__})"


class TestSequence:
    """The harness's record sequence for the host's clock: ``ready`` (or ``compile_error``) within the
    compile limit, then each test's result within ``timeout``; it also stops the harness at the first
    failing test (LiveCodeBench returns there; only a speed-up, the verdict is :func:`verdicts`)."""

    def __init__(self, problem: dict, timeout: float):
        self.problem, self.timeout = problem, float(timeout)
        self.compiled, self.done, self.next, self.sent = False, False, 0, False

    def limit(self) -> float | None:
        if self.done or (self.compiled and self.next >= len(self.problem["inputs"])):
            return None
        return self.timeout

    def accept(self, rec: dict) -> bool:
        if self.done:
            return False
        if not self.compiled:
            if "ready" in rec:
                self.compiled = True
                return True
            if "compile_error" in rec:
                self.done = True
                return True
            return False
        if "end" in rec:
            self.done = True
            return True
        if rec.get("i") == self.next and self.next < len(self.problem["inputs"]) and \
                ("v" in rec or "out" in rec or "err" in rec):
            self.next += 1
            return True
        return False

    def watch(self, rec: dict) -> bytes | None:
        if self.sent or "i" not in rec:
            return None
        if "err" in rec or not test_passes(self.problem, rec["i"], rec)[0]:
            self.sent = True
            return b"stop\n"
        return None


_STRICT_LAUNCHER = """import builtins as _b, sys as _s


{quitter}

_b.exit, _b.quit = _Quitter("exit"), _Quitter("quit")
_s.path.extend({paths!r})
_ns = {{"__name__": "__main__", "__builtins__": _b}}
exec({preamble!r}, _ns)
del _b, _s, _Quitter
exec(compile({code!r}, "solution.py", "exec"), _ns)
"""


def strict_program(code: str, sys_path: list[str]) -> str:
    """Strict mode's stdin program, run as a real process: the answer as a judge runs it, plus what a
    judge's interpreter has and ours (started with ``-S``) lacks: ``exit()``/``quit()``; the names of
    LiveCodeBench's preamble work without an import (judges pre-import them, LeetCode-style); numpy on
    ``sys.path``. The answer is compiled on its own, so ``from __future__`` imports still work."""
    return _STRICT_LAUNCHER.format(quitter=inspect.getsource(_Quitter), paths=list(sys_path), preamble=PREAMBLE,
                                   code=code)


def _strict_stdin(problem: dict, code: str, sandbox: Sandbox, timeout: int) -> tuple[list, dict]:
    results: list = []
    sandbox, sys_path = with_numpy(sandbox)
    program = strict_program(code, sys_path)
    for inp, out in zip(problem["inputs"], problem["outputs"]):
        run = sandbox.run(program, stdin=inp, timeout=timeout, memory_limit=MEMORY, output=64 * MiB)
        if run.timed_out:
            results.append(-3)
            return results, {"error_code": -3, "error_message": "Time Limit Exceeded", "inputs": compact(inp, 200)}
        if run.exit_code != 0 or run.error or run.truncated:
            results.append(-4)
            return results, {"error_code": -4, "error_message": "Runtime Error",
                             "error": compact(run.error or run.stderr[-300:], 300), "inputs": compact(inp, 200)}
        try:
            ok, why = stdout_matches(run.stdout, out)
        except TestingError as exc:
            ok, why = False, f"Wrong answer: {exc}"
        if not ok:
            results.append(-2)
            return results, {"error_code": -2, "error_message": why, "inputs": compact(inp, 200),
                             "expected": compact(out, 200)}
        results.append(True)
    return results, {}
