"""HumanEval+ / MBPP+ data: the release files (declared here with their pinned sources and hashes, and
MBPP+'s pre-release as a stand-in for its release), read through lopd's one data reader (so a broken
``.jsonl.gz`` is one error naming the file and line) and then evalplus's own steps, so that inputs are
deserialised exactly as evalplus does it.

evalplus's ``HUMANEVAL_OVERRIDE_PATH`` / ``MBPP_OVERRIDE_PATH`` are honoured as evalplus honours them: when set
(non-empty), the file they name is the dataset, whatever the data folder or ``version=`` say; the env's
provenance then has ``source="override"`` and its origin names the variable."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from lopd_envs import assets
from lopd_envs.datafile import DataFileError, iter_jsonl
from lopd_envs.provenance import Provenance

HUMANEVAL_FILE = "HumanEvalPlus-v0.1.10.jsonl.gz"
MBPP_FILE = "MbppPlus-v0.2.0.jsonl.gz"

EVALPLUS = assets.register(assets.Benchmark("evalplus", "EvalPlus (HumanEval+ / MBPP+)", {
    HUMANEVAL_FILE: assets.Source(
        "url", "https://github.com/evalplus/humanevalplus_release/releases/download/v0.1.10/"
               "HumanEvalPlus-v0.1.10.jsonl.gz",
        "272720b90ac375502c8ed23cd791c2a93dfb22a911641a494da74a426c09f101"),
    MBPP_FILE: assets.Source(
        "url", "https://github.com/evalplus/mbppplus_release/releases/download/v0.2.0/MbppPlus-v0.2.0.jsonl.gz"),
}, stand_ins={MBPP_FILE: "MbppPlus-*.jsonl*"}))

# what every problem row must hold (evalplus's completeness check, plus what the envs read)
PROBLEM_FIELDS = {"task_id": str, "prompt": str, "entry_point": str, "canonical_solution": str,
                  "contract": str, "base_input": list, "plus_input": (list, dict), "atol": (int, float)}


#: evalplus 0.3.1's variables naming a file that replaces the release (``evalplus/data/{humaneval,mbpp}.py``)
OVERRIDE_VARIABLES = {"humaneval": "HUMANEVAL_OVERRIDE_PATH", "mbpp": "MBPP_OVERRIDE_PATH"}


def override_path(dataset: str) -> Path | None:
    """The file evalplus's override variable for ``dataset`` names, or None when it is unset or empty (as
    evalplus reads it). A name that is not a file is an error naming the variable."""
    variable = OVERRIDE_VARIABLES.get(dataset)
    value = os.environ.get(variable, "") if variable else ""
    if not value:
        return None
    path = Path(value).expanduser()
    if not path.is_file():
        raise DataFileError(path, f"named by {variable}, but there is no such file")
    return path


def override_variable(path: Path) -> str | None:
    """The override variable that names ``path`` now, if one does."""
    for variable in OVERRIDE_VARIABLES.values():
        value = os.environ.get(variable, "")
        if value and Path(value).expanduser() == Path(path):
            return variable
    return None


def dataset_path(dataset: str, data_dir: str | None = None, version: str = "auto") -> Path:
    """Where the dataset file is. The file named by evalplus's override variable first, when set (as evalplus
    does). MBPP+: ``version="auto"`` takes the official v0.2.0 when present, else a
    pre-release ``MbppPlus-*.jsonl.gz`` found in a data folder (its declared stand-in), else downloads
    v0.2.0; ``"v0.2.0"`` takes the release only; another tag names a pre-release file."""
    override = override_path(dataset)
    if override is not None:
        return override
    if dataset == "humaneval":
        return assets.locate(EVALPLUS, HUMANEVAL_FILE, data_dir)
    if version in ("auto", "v0.2.0"):
        return assets.locate(EVALPLUS, MBPP_FILE, data_dir, stand_in=version == "auto")
    return assets.locate(EVALPLUS, f"MbppPlus-{version}.jsonl.gz", data_dir)


def origin_label(path: Path) -> str:
    """What ``lopd envs list`` says the env loaded (a pre-release standing in for a release says so, and so
    does a file named by evalplus's override variable)."""
    variable = override_variable(path)
    if variable:
        return f"data found: {path} (from {variable})"
    if path.name in EVALPLUS.files:
        return f"data found: {path}"
    stood_for = next((rel for rel, pattern in EVALPLUS.stand_ins.items() if path.match(pattern)), None)
    return f"data found: {path} (stand-in for {stood_for})" if stood_for else f"data found: {path}"


def provenance_of(dataset: str, path: Path) -> Provenance:
    """The release file read, a pre-release standing in for the release (``source="stand-in"``), or the file
    evalplus's override variable names (``source="override"``, the variable in ``origin``)."""
    name = "HumanEval+" if dataset == "humaneval" else "MBPP+"
    version = path.name.removesuffix(".gz").removesuffix(".jsonl").split("-", 1)[-1]
    variable = override_variable(path)
    if variable:
        return Provenance(name, "override", path.name.removesuffix(".gz").removesuffix(".jsonl"),
                          f"{variable}={path}", (path,))
    return Provenance(name, "official" if path.name in EVALPLUS.files else "stand-in", version, str(path.parent),
                      (path,))


_problem_cache: dict[str, dict[str, dict]] = {}
_problem_lock = threading.Lock()


def load_problems(dataset: str, path: Path) -> dict[str, dict]:
    """Problems by task id (MBPP+ inputs deserialised by evalplus to tuples, sets...). Rows are read by
    :func:`lopd_envs.datafile.read_jsonl`, which handles the gzip and names the file and line of a bad row."""
    from evalplus.data.mbpp import mbpp_deserialize_inputs

    key = f"{dataset}:{path}"
    with _problem_lock:
        if key not in _problem_cache:
            problems: dict[str, dict] = {}
            for line, task in iter_jsonl(path, PROBLEM_FIELDS):
                task_id = task["task_id"]
                if task_id in problems:
                    raise DataFileError(path, f"task {task_id!r} appears twice", line)
                if dataset == "mbpp":
                    try:
                        task["base_input"] = mbpp_deserialize_inputs(task_id, task["base_input"])
                        task["plus_input"] = mbpp_deserialize_inputs(task_id, task["plus_input"])
                    except Exception as exc:  # noqa: BLE001 - evalplus's own step; any failure is bad data
                        raise DataFileError(path, f"inputs of {task_id} cannot be deserialised "
                                                  f"({type(exc).__name__}: {exc})", line) from None
                problems[task_id] = task
            if not problems:
                raise DataFileError(path, "the file holds no problems (empty)")
            _problem_cache[key] = problems
        return _problem_cache[key]


def file_digest(path: Path) -> str:
    """A short content hash of a dataset file: it names the expected-output cache of that exact file."""
    return assets.sha256_of(path)[:16]
