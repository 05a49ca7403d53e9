"""evalplus samples (what ``evalplus.evaluate --samples`` takes): read, scored in lopd's sandbox with
evalplus's verdicts, and lopd's own answers written in that format (for :mod:`.official_files`).

Accepted as evalplus 0.3.1's ``load_solutions`` accepts them: a JSON Lines file (``.jsonl``, or gzip) of
``{"task_id", "solution"}`` (the complete program) or ``{"task_id", "completion"}`` (the function body after
the prompt: the program is ``prompt + completion``, ``solution`` winning when both are there), a task repeated
once per sample; or evalplus's folder layout, ``<task_id with / as _>/<n>.py`` holding complete programs.
As in ``evaluate``, a program is run as it stands (nothing is sanitised) on the base tests and then on base +
plus, and a sample whose task is not in the dataset is skipped with a warning. Unlike ``evaluate``, which
asserts that every task of the dataset has a sample, the tasks present are scored (and the rest counted as
missing). A line that is not such a sample is an error naming the file and line; no code in the file runs
outside the sandbox (reading never executes anything).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from lopd_envs.datafile import DataFileError, iter_jsonl

log = logging.getLogger(__name__)

#: env id -> (evalplus's dataset name, the prefix of its task ids)
DATASETS = {"lopd/HumanEvalPlus-v0": ("humaneval", "HumanEval/"), "lopd/MBPPPlus-v0": ("mbpp", "Mbpp/")}


class SamplesFileError(ValueError):
    """A samples file (or folder) that cannot be scored: the message names the file and line."""


def _check(row: dict) -> str | None:
    if "solution" not in row and "completion" not in row:
        return "no 'solution' or 'completion' in this sample (evalplus needs one)"
    for key in ("solution", "completion"):
        if key in row and not isinstance(row[key], str):
            return f"{key!r} must be a string, got {type(row[key]).__name__} (repeat the task_id per sample)"
    return None


def read_samples(path: str | Path) -> list[dict[str, Any]]:
    """``[{"task_id", "solution" | "completion", "where"}]`` in file order (evalplus's order of samples)."""
    path = Path(path)
    if path.is_dir():
        return _read_folder(path)
    if not path.exists():
        raise SamplesFileError(f"{path}: no such samples file")
    samples = []
    try:
        for line, row in iter_jsonl(path, {"task_id": str}, _check):
            sample = {"task_id": row["task_id"], "where": f"{path}:{line}"}
            sample.update({k: row[k] for k in ("solution", "completion") if k in row})
            samples.append(sample)
    except DataFileError as exc:
        raise SamplesFileError(str(exc)) from None
    if not samples:
        raise SamplesFileError(f"{path}: the file holds no samples")
    return samples


def _read_folder(folder: Path) -> list[dict[str, Any]]:
    """evalplus's folder layout: ``<task folder>/<n>.py``, task ids with ``_`` for ``/`` (sorted, where
    evalplus takes the listing order: pass@k does not depend on it)."""
    samples = []
    for task_dir in sorted(p for p in folder.iterdir() if p.is_dir()):
        files = sorted((p for p in task_dir.glob("*.py") if p.is_file()),
                       key=lambda p: (not p.stem.isdigit(), int(p.stem) if p.stem.isdigit() else 0, p.name))
        for file in files:
            try:
                code = file.read_bytes().decode("utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise SamplesFileError(f"{file}: cannot be read as UTF-8 text ({exc})") from None
            samples.append({"task_id": task_dir.name.replace("_", "/"), "solution": code, "where": str(file)})
    if not samples:
        raise SamplesFileError(f"{folder}: no <task>/<n>.py samples in this folder")
    return samples


def dataset_env(samples: Sequence[dict[str, Any]], env_ids: Sequence[str] | None) -> str:
    """The env of the samples' dataset: the one ``--env`` names, else the one their task ids belong to."""
    if env_ids:
        wrong = [e for e in env_ids if e not in DATASETS]
        if wrong or len(env_ids) != 1:
            raise SamplesFileError(f"--env {(wrong or env_ids)[0]}: --score-samples scores one of "
                                   f"{', '.join(DATASETS)}")
        return env_ids[0]
    for env_id, (_, prefix) in DATASETS.items():
        if any(s["task_id"].startswith(prefix) for s in samples):
            return env_id
    first = samples[0]
    raise SamplesFileError(f"{first['where']}: task {first['task_id'][:80]!r} is neither HumanEval+ nor MBPP+; "
                           f"name the dataset with --env {' or --env '.join(DATASETS)}")


def program(sample: dict[str, Any], problem: dict[str, Any]) -> str:
    """What evalplus runs: ``solution``, else the prompt followed by ``completion``."""
    return sample["solution"] if "solution" in sample else problem["prompt"] + sample["completion"]


def score_samples(samples: Sequence[dict[str, Any]], env: Any, workers: int = 1,
                  progress: Callable[[int], object] | None = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Each sample judged by the env's evalplus judge (base, then plus unless the env is base-only), in the
    env's sandbox, ``workers`` at a time. Returns the scored items (sample index = its rank among its task's
    samples, as evalplus's ``completion_id``) and what was skipped or missing."""
    unwrapped = env.unwrapped
    problems = unwrapped.problems
    order = {t.task_id: i for i, t in enumerate(unwrapped.tasks)}
    known = [s for s in samples if s["task_id"] in problems]
    unknown = [s for s in samples if s["task_id"] not in problems]
    if not known:
        first = samples[0]
        raise SamplesFileError(f"{first['where']}: no sample names a task of {unwrapped.env_id} (this one names "
                               f"{first['task_id'][:80]!r}); is it the other dataset, or an override file?")
    if unknown:
        log.warning("%d sample(s) name tasks that are not in %s (first: %r at %s): skipped, as evalplus does",
                    len(unknown), unwrapped.env_id, unknown[0]["task_id"][:80], unknown[0]["where"])
    counts: dict[str, int] = {}
    jobs = []
    for s in known:
        jobs.append((s, counts.get(s["task_id"], 0)))
        counts[s["task_id"]] = counts.get(s["task_id"], 0) + 1

    def judge(job: tuple[dict[str, Any], int]) -> dict[str, Any]:
        sample, index = job
        problem = problems[sample["task_id"]]
        details = unwrapped.evaluate(problem, program(sample, problem))
        if details.get("sandbox_error"):  # the sandbox failed, not the program: no pass (as the env says)
            details["passed"] = False
        if progress:
            progress(1)
        return {"task_id": sample["task_id"], "sample": index, "order": order[sample["task_id"]],
                "category": "base" if unwrapped.base_only else "plus", "details": details,
                "success": bool(details.get("passed")), "where": sample["where"], "turns": 1, "tokens": 0}

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        scored = list(pool.map(judge, jobs))
    info = {"n_samples": len(samples), "skipped_unknown_tasks": len(unknown),
            "first_unknown": unknown[0]["where"] if unknown else None,
            "tasks_missing": len(problems) - len(counts), "samples_per_task": sorted(set(counts.values()))}
    return sorted(scored, key=lambda s: (s["order"], s["sample"])), info


# ------------------------------------------------------------------------------------------------ writing


def answer_text(record: dict[str, Any]) -> str:
    """The text the env judged for a lopd record: its last assistant message, read as the env read it."""
    from lopd_envs.tools import parse_action

    messages = [m for m in record.get("messages") or [] if m.get("role") == "assistant"]
    if not messages:
        return ""
    message = messages[-1]
    action: Any = message.get("content") or ""
    if message.get("tool_calls"):
        action = {"role": "assistant", "content": message.get("content") or "",
                  "tool_calls": message["tool_calls"]}
    text = parse_action(action).text
    return text if isinstance(text, str) else ""


def samples_of(records: Sequence[dict[str, Any]], env: Any) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """lopd's answers as evalplus samples: ``(sanitised, raw)`` lines, as evalplus's ``codegen`` writes
    ``<name>.jsonl`` and ``<name>.raw.jsonl``: the program the env judged (evalplus's own ``sanitize`` of the
    answer in official scoring, the strict reading in strict scoring) and the answer as the model gave it."""
    from lopd_envs.suites.evalplus.judge import solution_from_answer

    unwrapped = env.unwrapped
    strict = unwrapped.scoring == "strict"
    sanitised, raw = [], []
    for r in records:
        text = answer_text(r)
        problem = unwrapped.problems[r["task_id"]]
        sanitised.append({"task_id": r["task_id"], "solution": solution_from_answer(problem, text, strict)})
        raw.append({"task_id": r["task_id"], "solution": text})
    return sanitised, raw
