"""HumanEval+ / MBPP+ data: the release files (declared here with their pinned sources and hashes) and
evalplus's own loaders, so that inputs are deserialised exactly as evalplus does it."""

from __future__ import annotations

import threading
from pathlib import Path

from lopd_envs import assets

HUMANEVAL_FILE = "HumanEvalPlus-v0.1.10.jsonl.gz"
MBPP_FILE = "MbppPlus-v0.2.0.jsonl.gz"

EVALPLUS = assets.register(assets.Benchmark("evalplus", "EvalPlus (HumanEval+ / MBPP+)", {
    HUMANEVAL_FILE: assets.Source(
        "url", "https://github.com/evalplus/humanevalplus_release/releases/download/v0.1.10/"
               "HumanEvalPlus-v0.1.10.jsonl.gz",
        "272720b90ac375502c8ed23cd791c2a93dfb22a911641a494da74a426c09f101"),
    MBPP_FILE: assets.Source(
        "url", "https://github.com/evalplus/mbppplus_release/releases/download/v0.2.0/MbppPlus-v0.2.0.jsonl.gz"),
}))


def dataset_path(dataset: str, data_dir: str | None = None, version: str = "auto") -> Path:
    """Where the dataset file is. MBPP+: ``version="auto"`` takes the official v0.2.0 when present, else a
    pre-release ``MbppPlus-*.jsonl.gz`` found in a data folder, else downloads v0.2.0."""
    if dataset == "humaneval":
        return assets.locate(EVALPLUS, HUMANEVAL_FILE, data_dir)
    wanted = MBPP_FILE if version in ("auto", "v0.2.0") else f"MbppPlus-{version}.jsonl.gz"
    for folder in assets.candidate_dirs(EVALPLUS.name, data_dir):
        if (folder / wanted).exists():
            return folder / wanted
    if version == "auto":
        for folder in assets.candidate_dirs(EVALPLUS.name, data_dir):
            found = sorted(folder.glob("MbppPlus-*.jsonl*")) if folder.is_dir() else []
            if found:
                return found[-1]
    return assets.locate(EVALPLUS, wanted, data_dir)


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
    """A short content hash of a dataset file: it names the expected-output cache of that exact file."""
    return assets.sha256_of(path)[:16]
