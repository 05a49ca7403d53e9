"""ACEBench's files as lopd tasks: one ``Task`` per row of ``data_<category>.json``, its answer row from
``possible_answer/`` attached. Rows are read once per process and shared read-only, so envs stay cheap to
create; episodes copy whatever they mutate (the agent ``initial_config``)."""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lopd_envs.assets import Benchmark, Source, locate, register
from lopd_envs.datafile import check_unique, pair_by_key, read_jsonl
from lopd_envs.tasks import Task, select

ACEBENCH_COMMIT = "e6db74b735ead22c24f27367606a9408573b848f"
SHA256_MANIFEST = Path(__file__).with_name("sha256.json")  # relative path -> sha256 of every data file


def _files() -> dict[str, Source]:
    """Every data file at the pinned commit, with the hash recorded when it was pinned."""
    manifest = json.loads(SHA256_MANIFEST.read_text())
    base = f"https://raw.githubusercontent.com/ACEBench/ACEBench/{ACEBENCH_COMMIT}/data_all/"
    return {rel: Source("url", base + rel, sha) for rel, sha in manifest.items()}


ACEBENCH = register(Benchmark("acebench", "ACEBench", _files()))

LANGUAGES = ("en", "zh")

NORMAL = ("normal_atom_bool", "normal_atom_enum", "normal_atom_list", "normal_atom_number",
          "normal_atom_object_deep", "normal_atom_object_short", "normal_single_turn_single_function",
          "normal_single_turn_parallel_function", "normal_multi_turn_user_adjust",
          "normal_multi_turn_user_switch", "normal_similar_api", "normal_preference")
SPECIAL = ("special_incomplete", "special_error_param", "special_irrelevant")
AGENT = ("agent_multi_step", "agent_multi_turn")
CATEGORIES = NORMAL + SPECIAL + AGENT

# Official groups (``category.py``'s ACE_DATA_CATEGORY, "test_all" spelled "all").
GROUPS: dict[str, Sequence[str]] = {
    "normal": NORMAL, "special": SPECIAL, "agent": AGENT,
    "atom": NORMAL[:6], "multi_turn": ("normal_multi_turn_user_adjust", "normal_multi_turn_user_switch"),
    "all": CATEGORIES,
}


def group_of(category: str) -> str:
    return "normal" if category in NORMAL else "special" if category in SPECIAL else "agent"


@dataclass(frozen=True)
class Row:
    """A question row and its answer row, plus the language they belong to."""

    language: str
    question: dict[str, Any]
    answer: dict[str, Any]

    @property
    def gold(self) -> Any:
        return self.answer["ground_truth"]

    @property
    def milestones(self) -> list:
        return self.answer.get("mile_stone") or []


_CACHE: dict[tuple[str, float, float], list[Row]] = {}
_LOCK = threading.Lock()


QUESTION_FIELDS = {"id": str, "question": str, "function": list}
AGENT_FIELDS = {**QUESTION_FIELDS, "initial_config": dict, "involved_classes": list}  # the scenario to run
ANSWER_FIELDS = {"id": str, "ground_truth": (dict, list, str)}


def _functions_ok(row: dict[str, Any]) -> str | None:
    """Each offered function is an object with a string ``name`` (checked at read time, with the line)."""
    for i, function in enumerate(row["function"]):
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            return f"function {i} of {row['id']} is not an object with a string 'name'"
    return None


def load_rows(category: str, language: str, data_dir: str | None = None) -> list[Row]:
    """The rows of one category, questions paired with answers row by row (ids must agree, as the official
    evaluation assumes); a corrupt, empty or misaligned file is one error naming the file and line."""
    if language not in LANGUAGES:
        raise ValueError(f"ACEBench language must be one of {LANGUAGES}, got {language!r}")
    qpath = locate(ACEBENCH, f"data_{language}/data_{category}.json", data_dir)
    apath = locate(ACEBENCH, f"data_{language}/possible_answer/data_{category}.json", data_dir)
    key = (str(qpath), Path(qpath).stat().st_mtime, Path(apath).stat().st_mtime)
    with _LOCK:
        if key not in _CACHE:
            fields = AGENT_FIELDS if category in AGENT else QUESTION_FIELDS
            questions = read_jsonl(qpath, fields, _functions_ok)
            answers = read_jsonl(apath, ANSWER_FIELDS)
            check_unique(questions, qpath)
            _CACHE[key] = [Row(language, q, a) for q, a in pair_by_key(questions, qpath, answers, apath)]
        return _CACHE[key]


def tool_function(function: dict[str, Any]) -> dict[str, Any]:
    """A function as lopd's tool format wants it: some distractor functions of the atom categories name
    their schema ``arguments`` instead of ``parameters``."""
    params = function.get("parameters") or function.get("arguments") or {"type": "object", "properties": {}}
    return {"name": function["name"], "description": function.get("description", ""), "parameters": params}


def data_files(category: str | Sequence[str], language: str, data_dir: str | None = None) -> list[Path]:
    """The question and answer files of the selected categories (what the env's provenance records)."""
    return [locate(ACEBENCH, f"data_{language}/{sub}data_{name}.json", data_dir)
            for name in select(category, CATEGORIES, GROUPS) for sub in ("", "possible_answer/")]


def load_tasks(category: str | Sequence[str], language: str, data_dir: str | None = None) -> list[Task]:
    tasks = []
    for name in select(category, CATEGORIES, GROUPS):
        for row in load_rows(name, language, data_dir):
            tools = [tool_function(f) for f in row.question["function"]]
            tasks.append(Task(row.question["id"], name, row.question["question"], tools, row))
    return tasks
