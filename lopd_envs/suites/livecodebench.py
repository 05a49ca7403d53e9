"""LiveCodeBench code generation (``lopd/LiveCodeBench-v0``), official ``code_generation_lite`` format.

Rows: ``question_title, question_content, platform, question_id, contest_id, contest_date, starter_code,
difficulty, public_test_cases, private_test_cases, metadata`` (tests and metadata are JSON strings; private
tests are either JSON or base64 of zlib of a pickled JSON string). Sources, first found: ``path=`` (a jsonl
file or a folder of ``test*.jsonl``), ``<data dir>/livecodebench/``, the Hugging Face hub
(``livecodebench/code_generation_lite``) when online, else the few problems of our own bundled in
``livecodebench_samples.jsonl`` (``source="samples"`` picks them explicitly). ``release_version``
(``release_v1`` … ``release_v6``, or ``v2``, ``v1_v3`` …) selects the hub files and ``start_date`` /
``end_date`` (``YYYY-MM-DD``) filter on ``contest_date``, as LiveCodeBench does.

Categories: ``stdin`` and ``functional`` (LeetCode-style, ``metadata.func_name``). Task ids are the
official ``question_id``. Reward 1 when every public and private test passes.

Scoring ``official`` follows LiveCodeBench's runner: the answer's last fenced code block (none: fail);
functional problems call ``Solution().<func_name>(*json_lines)`` with LiveCodeBench's import preamble and
compare with ``==`` after turning a returned tuple into a list; stdin problems run in-process with
``sys.stdin`` a ``StringIO`` (so ``sys.stdin.buffer`` fails, as there) and outputs are compared line by
line after stripping, equal lines or equal ``Decimal`` tokens; 6 s per test (``signal.alarm``).
``strict`` deviates in two points: an answer without a fence is taken as code when it parses, and stdin
programs run as real processes with the test input on their real stdin (each test a fresh sandboxed
process), so ``sys.stdin.buffer`` and ``open(0)`` work as on the judges.
"""

from __future__ import annotations

import base64
import io
import json
import logging
import pickle
import re
import threading
import zlib
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any, Iterable, Sequence

from lopd_envs import assets
from lopd_envs.core import AgentEnv, Task, select
from lopd_envs.sandbox import MiB, Sandbox, get_sandbox
from lopd_envs.suites import valuecodec
from lopd_envs.suites.codeexec import CodeAnswerEpisode, extract_code, harness_source, syntax_ok
from lopd_envs.trace import compact

log = logging.getLogger(__name__)

HUB_REPO = "livecodebench/code_generation_lite"
SAMPLES = Path(__file__).with_name("livecodebench_samples.jsonl")
CATEGORIES = ("stdin", "functional")
TIMEOUT = 6  # seconds per test, LiveCodeBench's default
MEMORY = 4 << 30
MAX_PRIVATE_BYTES = 1 << 31
SYSTEM = ("You are an expert Python programmer. You will be given a question (problem specification) and will "
          "generate a correct Python program that matches the specification and passes all tests.")
FORMAT_STARTER = ("### Format: You will use the following starter code to write the solution to the problem and "
                  "enclose your code within delimiters.\n```python\n{starter}\n```\n\n")
FORMAT_STDIN = ("### Format: Read the inputs from stdin solve the problem and write the answer to stdout (do not "
                "directly test on the sample inputs). Enclose your code within delimiters as follows. Ensure that "
                "when the python program runs, it reads the inputs, runs the algorithm and writes output to "
                "STDOUT.\n```python\n# YOUR CODE HERE\n```\n\n")


# ------------------------------------------------------------------------------------- data

class _StringsOnly(pickle.Unpickler):
    """Unpickles plain data only: any reference to a class or function (the way pickle runs code) is
    refused, so a crafted ``private_test_cases`` field cannot execute anything."""

    def find_class(self, module: str, name: str):  # noqa: D401
        raise pickle.UnpicklingError(f"refusing to load {module}.{name} from private test cases")

    def persistent_load(self, pid: Any):
        raise pickle.UnpicklingError("refusing persistent ids in private test cases")


def decode_private_tests(field: str) -> list[dict]:
    """``private_test_cases``: JSON, or base64(zlib(pickle(JSON string))) decoded without running code."""
    try:
        return json.loads(field)
    except (ValueError, TypeError):
        pass
    raw = base64.b64decode(field.encode("utf-8"), validate=False)
    inflater = zlib.decompressobj()
    data = inflater.decompress(raw, MAX_PRIVATE_BYTES)
    if inflater.unconsumed_tail:
        raise ValueError("private test cases larger than the decompression limit")
    obj = _StringsOnly(io.BytesIO(data)).load()
    if not isinstance(obj, str):
        raise ValueError(f"private test cases must unpickle to a JSON string, got {type(obj).__name__}")
    return json.loads(obj)


def encode_private_tests(tests: list[dict]) -> str:
    """The official compressed form (used to write our sample problems and in tests)."""
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(tests)))).decode("ascii")


def release_files(version: str) -> list[str]:
    """Hub files of a release tag: ``release_vN`` = test.jsonl … testN.jsonl, ``vN`` = that increment only,
    ``vA_vB`` = increments A … B."""
    name = lambda n: "test.jsonl" if n == 1 else f"test{n}.jsonl"  # noqa: E731
    if m := re.fullmatch(r"release_v(\d+)", version):
        return [name(n) for n in range(1, int(m.group(1)) + 1)]
    if m := re.fullmatch(r"v(\d+)", version):
        return [name(int(m.group(1)))]
    if m := re.fullmatch(r"v(\d+)_v(\d+)", version):
        return [name(n) for n in range(int(m.group(1)), int(m.group(2)) + 1)]
    raise ValueError(f"unknown LiveCodeBench release_version {version!r} (release_v1..release_v6, vN, vA_vB)")


def find_files(path: str | None, data_dir: str | None, version: str) -> tuple[list[Path], str]:
    """The jsonl files to read and a label of where they came from."""
    if path:
        p = Path(path)
        files = sorted(p.glob("test*.jsonl")) if p.is_dir() else [p]
        if not files or not all(f.exists() for f in files):
            raise FileNotFoundError(f"LiveCodeBench: no jsonl file at {path}")
        return files, str(p)
    wanted = release_files(version)
    for folder in assets.candidate_dirs("livecodebench", data_dir):
        if all((folder / f).exists() for f in wanted):
            return [folder / f for f in wanted], str(folder)
    if not assets.offline():
        try:
            from huggingface_hub import hf_hub_download
            files = [Path(hf_hub_download(HUB_REPO, f, repo_type="dataset")) for f in wanted]
            return files, f"hub:{HUB_REPO}"
        except Exception as exc:  # noqa: BLE001 - offline or no hub client: fall back below
            log.warning("LiveCodeBench: hub download failed (%s); using the bundled sample problems", exc)
    else:
        log.warning("LiveCodeBench: no local files for %s and offline; using the bundled sample problems", version)
    return [SAMPLES], "samples"


def read_rows(files: Iterable[Path]) -> list[dict]:
    rows = []
    for f in files:
        rows.extend(assets.read_jsonl(f))
    return rows


def problem_from_row(row: dict) -> dict:
    """The row with metadata decoded. Private tests (often megabytes each) stay encoded until the problem
    is first scored: see :func:`with_tests`."""
    metadata = json.loads(row.get("metadata") or "{}")
    kind = "functional" if metadata.get("func_name") else "stdin"
    return {**row, "metadata": metadata, "kind": kind, "fn_name": metadata.get("func_name"),
            "contest_date": str(row.get("contest_date", ""))}


_tests_lock = threading.Lock()


def with_tests(problem: dict) -> dict:
    """``problem`` with ``inputs``/``outputs``: all tests, public then private, as LiveCodeBench runs them
    (decoded once, then kept)."""
    if "inputs" not in problem:
        public = json.loads(problem["public_test_cases"])
        tests = public + decode_private_tests(problem["private_test_cases"])
        with _tests_lock:
            problem.setdefault("n_public", len(public))
            problem.setdefault("outputs", [t["output"] for t in tests])
            problem.setdefault("inputs", [t["input"] for t in tests])
    return problem


def parse_date(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "")[:19]) if "T" in text else datetime.strptime(text[:10], "%Y-%m-%d")


def instruction(problem: dict) -> str:
    fmt = FORMAT_STARTER.format(starter=problem["starter_code"]) if problem.get("starter_code") else FORMAT_STDIN
    return f"### Question:\n{problem['question_content']}\n\n{fmt}### Answer: (use the provided format with backticks)\n\n"


# ----------------------------------------------------------------------------------- scoring

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
    run = sandbox.run(harness_source("lcb_harness.py"), stdin=b"%d\n" % len(data) + data, timeout=(timeout + 1) * n + 5,
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


# ---------------------------------------------------------------------------------------- env

class LiveCodeBenchEpisode(CodeAnswerEpisode):
    """One problem, one answer: the fenced code is run on every public and private test."""

    system_prompt = SYSTEM

    def judge(self, text: str) -> tuple[dict[str, Any], str]:
        strict = self.env.scoring == "strict"
        code = official_extract(text)
        if not code.strip() and strict:
            code = text if syntax_ok(text) else extract_code(text)
        problem = self.task.data
        try:
            n_tests = len(with_tests(problem)["inputs"])
        except Exception as exc:  # noqa: BLE001 - a corrupt row fails this task, not the caller
            message = f"the problem's tests could not be decoded: {exc}"
            return ({"task_id": self.task.task_id, "passed": False, "results": [], "error_message": message,
                     "error": message}, "the problem's tests are unreadable")
        if not code.strip():
            details = {"task_id": self.task.task_id, "passed": False, "results": [],
                       "error_message": "no code block in the answer"}
        else:
            details = evaluate(problem, code, self.env.sandbox, strict, self.env.test_timeout)
            details["code"] = compact(code, 2000)
        passed = sum(r is True for r in details["results"])
        summary = f"{passed}/{n_tests} tests passed" + \
            (f" ({details['error_message']})" if details.get("error_message") else "")
        return details, summary


class LiveCodeBenchEnv(AgentEnv):
    env_id = "lopd/LiveCodeBench-v0"
    episode_class = LiveCodeBenchEpisode
    default_max_turns = 1

    def __init__(self, category: str | Sequence[str] = "all", data_dir: str | None = None,
                 max_turns: int | None = None, scoring: str = "official", sandbox: str | Sandbox | None = None,
                 path: str | None = None, source: str | None = None, release_version: str = "release_v6",
                 start_date: str | None = None, end_date: str | None = None,
                 difficulty: str | Sequence[str] | None = None, test_timeout: int = TIMEOUT, **options: Any):
        self._sandbox_choice = sandbox
        self.path, self.source_choice, self.release_version = path, source, release_version
        self.start_date, self.end_date = start_date, end_date
        self.difficulty = [difficulty] if isinstance(difficulty, str) else difficulty
        self.test_timeout = int(test_timeout)
        super().__init__(category=category, data_dir=data_dir, max_turns=max_turns, scoring=scoring, **options)

    def load_tasks(self, category, data_dir):
        kinds = select(category, CATEGORIES)
        if self.source_choice == "samples":
            files, self.source = [SAMPLES], "samples"
        else:
            files, self.source = find_files(self.path, data_dir, self.release_version)
        start = datetime.strptime(self.start_date, "%Y-%m-%d") if self.start_date else None
        end = datetime.strptime(self.end_date, "%Y-%m-%d") if self.end_date else None
        for row in read_rows(files):
            problem = problem_from_row(row)
            date = parse_date(problem["contest_date"]) if problem["contest_date"] else None
            if (start and date and date < start) or (end and date and date > end):
                continue
            if self.difficulty and problem.get("difficulty") not in self.difficulty:
                continue
            if problem["kind"] in kinds:
                yield Task(problem["question_id"], problem["kind"], instruction(problem), [], problem)

    @property
    def sandbox(self) -> Sandbox:
        if not isinstance(self._sandbox_choice, Sandbox):
            self._sandbox_choice = get_sandbox(self._sandbox_choice)
        return self._sandbox_choice


assets.register(assets.Benchmark(
    "livecodebench", "LiveCodeBench (code_generation_lite)", {},
    note=f"LiveCodeBench's problems live on the Hugging Face hub ({HUB_REPO}): put its test*.jsonl files in "
         "<data dir>/livecodebench/, or pass path=...; offline, lopd uses its bundled sample problems."))

