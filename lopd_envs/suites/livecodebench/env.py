"""The LiveCodeBench gymnasium env: one problem per episode, one answer, judged by :mod:`.judge`."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from lopd_envs.codeexec.env import CodeAnswerEpisode, CodeEnv
from lopd_envs.codeexec.extract import extract_code, syntax_ok
from lopd_envs.options import check_choice
from lopd_envs.provenance import Provenance
from lopd_envs.suites.livecodebench.data import (
    SAMPLES,
    find_files,
    origin_label,
    parse_date,
    problem_from_row,
    read_rows,
    release_files,
    with_tests,
)
from lopd_envs.suites.livecodebench.judge import TIMEOUT, evaluate, official_extract
from lopd_envs.tasks import Task, select
from lopd_envs.trace import compact

CATEGORIES = ("stdin", "functional")
SOURCES = ("official", "bundled", "samples")
DIFFICULTIES = ("easy", "medium", "hard")
SYSTEM = ("You are an expert Python programmer. You will be given a question (problem specification) and will "
          "generate a correct Python program that matches the specification and passes all tests.")
FORMAT_STARTER = ("### Format: You will use the following starter code to write the solution to the problem and "
                  "enclose your code within delimiters.\n```python\n{starter}\n```\n\n")
FORMAT_STDIN = ("### Format: Read the inputs from stdin solve the problem and write the answer to stdout (do not "
                "directly test on the sample inputs). Enclose your code within delimiters as follows. Ensure that "
                "when the python program runs, it reads the inputs, runs the algorithm and writes output to "
                "STDOUT.\n```python\n# YOUR CODE HERE\n```\n\n")


def _date(name: str, text: str | None) -> datetime | None:
    """A ``YYYY-MM-DD`` bound, or a ValueError naming the option and the format."""
    if text is None:
        return None
    try:
        return datetime.strptime(text, "%Y-%m-%d")
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a date written YYYY-MM-DD, got {text!r}") from None


def instruction(problem: dict) -> str:
    fmt = FORMAT_STARTER.format(starter=problem["starter_code"]) if problem.get("starter_code") else FORMAT_STDIN
    return f"### Question:\n{problem['question_content']}\n\n{fmt}### Answer: (use the provided format with backticks)\n\n"


class LiveCodeBenchEpisode(CodeAnswerEpisode):
    """One problem, one answer: the fenced code is run on every public and private test."""

    system_prompt = SYSTEM
    env: LiveCodeBenchEnv

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


class LiveCodeBenchEnv(CodeEnv):
    """Options beyond :class:`CodeEnv`'s: ``source=`` (``"official"``: the release files from ``path=``, a data
    folder or the hub, an error saying how to fetch them when absent; ``"bundled"``: lopd's 6 sample problems
    in LiveCodeBench's format, never the benchmark; ``"samples"`` is its older name), ``release_version=``,
    ``start_date=``/``end_date=`` (``YYYY-MM-DD``), ``difficulty=`` and ``test_timeout=`` (seconds per test)."""

    env_id = "lopd/LiveCodeBench-v0"

    def __init__(self, category: str | Sequence[str] = "all", *, path: str | None = None,
                 source: str = "official", release_version: str = "release_v6", start_date: str | None = None,
                 end_date: str | None = None, difficulty: str | Sequence[str] | None = None,
                 test_timeout: int = TIMEOUT, **options: Any):
        check_choice("source", source, SOURCES)
        release_files(release_version)  # an unknown tag fails here, naming the accepted forms
        if path and source != "official":
            raise ValueError(f"path= reads official release files; it cannot be combined with source={source!r}")
        self.path, self.source_choice, self.release_version = path, source, release_version
        self.start_date, self.end_date = _date("start_date", start_date), _date("end_date", end_date)
        self.difficulty = [difficulty] if isinstance(difficulty, str) else difficulty
        for level in self.difficulty or ():
            check_choice("difficulty", level, DIFFICULTIES)
        self.test_timeout = int(test_timeout)
        super().__init__(category=category, **options)

    def reference_answer(self, task: Task) -> None:
        """LiveCodeBench problems carry tests but no reference solution: there is nothing for a teacher that
        reads one (OPSD) to see."""
        return None

    def new_episode(self, task: Task) -> LiveCodeBenchEpisode:
        return LiveCodeBenchEpisode(self, task)

    def load_tasks(self, category, data_dir):
        kinds = select(category, CATEGORIES)
        if self.source_choice in ("bundled", "samples"):
            files, self.source = [SAMPLES], "samples"
        else:
            files, self.source = find_files(self.path, data_dir, self.release_version)
        start, end = self.start_date, self.end_date
        rows = read_rows(files)
        self.data_origin = origin_label(self.source, len(rows))
        self.provenance = Provenance(
            "LiveCodeBench", "bundled" if self.source == "samples" else "official",
            "lopd samples" if self.source == "samples" else (self.release_version if not self.path else "path="),
            self.source, files)
        for row in rows:
            problem = problem_from_row(row)
            date = parse_date(problem["contest_date"]) if problem["contest_date"] else None
            if (start and date and date < start) or (end and date and date > end):
                continue
            if self.difficulty and problem.get("difficulty") not in self.difficulty:
                continue
            if problem["kind"] in kinds:
                yield Task(problem["question_id"], problem["kind"], instruction(problem), [], problem)
