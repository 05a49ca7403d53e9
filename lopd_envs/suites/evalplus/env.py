"""The HumanEval+ / MBPP+ gymnasium envs: one problem per episode, one answer, judged by :mod:`.judge`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lopd_envs.codeexec.env import CodeAnswerEpisode, CodeEnv
from lopd_envs.suites.evalplus.data import dataset_path, load_problems, origin_label, provenance_of
from lopd_envs.suites.evalplus.groundtruth import GroundTruth, groundtruth_for
from lopd_envs.suites.evalplus.judge import TIMEOUT_PER_TASK, evaluate_task, solution_from_answer
from lopd_envs.tasks import Task, select
from lopd_envs.trace import compact

CATEGORIES = ("plus", "base")
INSTRUCTION = ("Please provide a self-contained Python script that solves the following problem "
               "in a markdown code block:\n```python\n{prompt}\n```")
SYSTEM = "You are an expert Python programmer. Answer with the complete function in one ```python block."


class CodeEpisode(CodeAnswerEpisode):
    """One problem, one answer: the function is taken from the answer and judged on base and plus inputs."""

    system_prompt = SYSTEM
    env: EvalPlusEnv

    def judge(self, text: str) -> tuple[dict[str, Any], str]:
        problem = self.task.data
        solution = solution_from_answer(problem, text, strict=self.env.scoring == "strict")
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


class EvalPlusEnv(CodeEnv):
    """Shared by HumanEval+ and MBPP+; subclasses set ``dataset``. Options beyond :class:`CodeEnv`'s:
    ``version=`` (MBPP+ release) and ``timeout_per_task=`` (evalplus's ``EVALPLUS_TIMEOUT_PER_TASK``)."""

    dataset = "humaneval"

    def __init__(self, category: str | Sequence[str] = "plus", *, version: str = "auto",
                 timeout_per_task: float = TIMEOUT_PER_TASK, **options: Any):
        self.version = version
        self.timeout_per_task = float(timeout_per_task)
        super().__init__(category=category, **options)

    def load_tasks(self, category, data_dir):
        selected = select(category, CATEGORIES, {"all": ["plus"]})
        self.base_only = selected == ["base"]
        self.path = dataset_path(self.dataset, data_dir, self.version)
        self.problems = load_problems(self.dataset, self.path)
        self.data_origin = origin_label(self.path)
        self.provenance = provenance_of(self.dataset, self.path)
        cat = "base" if self.base_only else "plus"
        for task_id, problem in self.problems.items():
            yield Task(task_id, cat, INSTRUCTION.format(prompt=problem["prompt"].strip()), [], problem)

    def new_episode(self, task: Task) -> CodeEpisode:
        return CodeEpisode(self, task)

    def reference_answer(self, task: Task) -> str:
        """The canonical solution as a fenced answer (for teachers that read a reference, e.g. OPSD). A
        HumanEval canonical solution is the body that completes the prompt; MBPP's is the whole function."""
        problem = task.data
        code = problem["prompt"] + problem["canonical_solution"] if self.dataset == "humaneval" else \
            problem["canonical_solution"]
        return "```python\n" + code.strip("\n") + "\n```"

    @property
    def groundtruth(self) -> GroundTruth:
        return groundtruth_for(self.dataset, self.path, self.sandbox)

    def evaluate(self, problem: dict, solution: str) -> dict[str, Any]:
        return evaluate_task(self.dataset, problem, self.groundtruth.get(problem), solution, self.sandbox,
                             self.base_only, strict=self.scoring == "strict", timeout_per_task=self.timeout_per_task)


class HumanEvalPlusEnv(EvalPlusEnv):
    env_id = "lopd/HumanEvalPlus-v0"
    dataset = "humaneval"


class MBPPPlusEnv(EvalPlusEnv):
    env_id = "lopd/MBPPPlus-v0"
    dataset = "mbpp"
